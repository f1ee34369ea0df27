"""mx.sym: symbols — MXNet-compatible computation graphs built from the operator registry.

Every operator of the Rust registry becomes a function here (snake_case of its MXNet name:
``fully_connected``, ``softmax_output``, …), callable in the Clojure forms ``op(opts)``,
``op(name, opts)``, ``op(name, attr_map, opts)`` and with Python keywords
``op(data, num_hidden=10, name="fc1")``. Inputs are symbols, by position (the op's argument
order) or by argument name; everything else is an operator parameter.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _native
from ._dtypes import dtype_name
from ._opts import normalize_key, opt, parse_opts
from ._ops import attr_str, op_functions

if TYPE_CHECKING:
    from ._types import DTypeLike, PathLike, Shape

    # The operator functions added from the registry at import (sym.fully_connected,
    # sym.softmax_output, sym.FullyConnected, …): each returns a Symbol.
    def __getattr__(name: str) -> Callable[..., Symbol]: ...


class Symbol:
    """A symbolic graph output (or a group of outputs).

    Supports ``+ - * / **`` and unary ``-`` with symbols and scalars (``elemwise_*`` and
    ``_*_scalar`` nodes, as MXNet writes them), ``s[i]`` / ``s["fc1_output"]``, and the
    query methods below (also available as functions of this module).

    Example:
        >>> data = variable("data")
        >>> fc = fully_connected(data, num_hidden=10, name="fc1")
        >>> fc.list_arguments()
        ['data', 'fc1_weight', 'fc1_bias']
        >>> (fc * 2).list_outputs()[0].startswith("_mulscalar")
        True
    """

    __slots__ = ("_h",)
    _h: _native.SymbolHandle

    def __init__(self, handle: _native.SymbolHandle) -> None:
        if not isinstance(handle, _native.SymbolHandle):
            raise TypeError("Symbol(...) wraps a core handle; use mx.sym.variable or an operator")
        self._h = handle

    # -- queries
    def list_arguments(self) -> list[str]:
        return self._h.list_arguments()

    def list_outputs(self) -> list[str]:
        return self._h.list_outputs()

    def list_auxiliary_states(self) -> list[str]:
        return self._h.list_auxiliary_states()

    def list_inputs(self) -> list[str]:
        return self._h.list_inputs()

    @property
    def name(self) -> str | None:
        return self._h.name()

    def attr(self, key: str) -> str | None:
        return self._h.attr(key)

    def attr_dict(self) -> dict[str, dict[str, str]]:
        return self._h.attr_dict()

    def get_internals(self) -> Symbol:
        return Symbol(self._h.get_internals())

    def tojson(self) -> str:
        return self._h.to_json()

    to_json = tojson

    def infer_shape(self, *args: Any, **kwargs: Any) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]], list[tuple[int, ...]]]:
        return infer_shape(self, *args, **kwargs)

    def infer_type(self, *args: Any, **kwargs: Any) -> tuple[list[np.dtype[Any]], list[np.dtype[Any]], list[np.dtype[Any]]]:
        return infer_type(self, *args, **kwargs)

    def __len__(self) -> int:
        return self._h.num_outputs()

    def __iter__(self) -> Iterator[Symbol]:
        return (self[i] for i in range(len(self)))

    def __getitem__(self, key: int | str) -> Symbol:
        if isinstance(key, str):
            return Symbol(self._h.output_by_name(key))
        if isinstance(key, numbers.Integral):
            n = self._h.num_outputs()
            if not -n <= int(key) < n:
                raise IndexError(f"symbol output index {key} out of range for {n} outputs")
            return Symbol(self._h.output(int(key) % n))
        raise TypeError(f"symbol index must be an int or an output name, got {type(key).__name__}")

    def __repr__(self) -> str:
        outs = self.list_outputs()
        return f"<Symbol {self.name if len(outs) == 1 else 'group [' + ', '.join(outs) + ']'}>"

    # -- arithmetic, as MXNet writes it in JSON
    def _arith(self, other: Any, op: str, scalar_op: str, hint: str, scalar_hint: str,
               reverse: bool = False) -> Symbol:
        if isinstance(other, Symbol):
            a, b = (other, self) if reverse else (self, other)
            return _compose(op, None, hint, {}, [(None, a), (None, b)])
        if isinstance(other, numbers.Number) and not isinstance(other, bool):
            return _compose(scalar_op, None, scalar_hint, {"scalar": attr_str(other)}, [(None, self)])
        return NotImplemented

    def __add__(self, o: Symbol | float) -> Symbol: return self._arith(o, "elemwise_add", "_plus_scalar", "_plus", "_plusscalar")
    def __radd__(self, o: Symbol | float) -> Symbol: return self.__add__(o)
    def __sub__(self, o: Symbol | float) -> Symbol: return self._arith(o, "elemwise_sub", "_minus_scalar", "_minus", "_minusscalar")
    def __rsub__(self, o: Symbol | float) -> Symbol: return self._arith(o, "elemwise_sub", "_rminus_scalar", "_minus", "_rminusscalar", True)
    def __mul__(self, o: Symbol | float) -> Symbol: return self._arith(o, "elemwise_mul", "_mul_scalar", "_mul", "_mulscalar")
    def __rmul__(self, o: Symbol | float) -> Symbol: return self.__mul__(o)
    def __truediv__(self, o: Symbol | float) -> Symbol: return self._arith(o, "elemwise_div", "_div_scalar", "_div", "_divscalar")
    def __rtruediv__(self, o: Symbol | float) -> Symbol: return self._arith(o, "elemwise_div", "_rdiv_scalar", "_div", "_rdivscalar", True)
    def __pow__(self, o: Symbol | float) -> Symbol: return self._arith(o, "_power", "_power_scalar", "_power", "_powerscalar")
    def __neg__(self) -> Symbol: return self.__mul__(-1.0)

    def __copy__(self) -> Symbol:
        return self

    def __deepcopy__(self, memo: Any) -> Symbol:
        return self


def _compose(op: str, name: str | None, hint: str | None, attrs: dict[str, str],
             inputs: Sequence[tuple[str | None, Symbol]]) -> Symbol:
    return Symbol(_native.sym_create(op, name, hint, attrs, [(k, s._h) for k, s in inputs]))


def variable(name: str, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Symbol:
    """A variable: a named graph input (data, label or parameter).

    Options:
        shape (tuple, None): known shape (stored as ``__shape__``).
        dtype (str, None): dtype (stored as ``__dtype__``, MXNet's type flag).
        lr_mult (float, None): learning-rate multiplier (``__lr_mult__``).
        wd_mult (float, None): weight-decay multiplier (``__wd_mult__``).
        init (initializer or str, None): initializer (``__init__``).
        attr (dict, None): further string attributes, e.g. ``{"__layout__": "NC"}``.

    Example:
        >>> variable("w", shape=(2, 3), lr_mult=0.5).attr("__lr_mult__")
        '0.5'
    """
    o = parse_opts("sym.variable", _VAR_OPTS, opts, kw)
    if not isinstance(name, str):
        raise TypeError(f"sym.variable: name must be a str, got {type(name).__name__}")
    attrs = {str(k): str(v) for k, v in (o["attr"] or {}).items()}
    if o["shape"] is not None:
        attrs["__shape__"] = attr_str(tuple(o["shape"]))
    if o["dtype"] is not None:
        attrs["__dtype__"] = str({"float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5,
                                  "int64": 6}[dtype_name(o["dtype"], "sym.variable")])
    if o["lr_mult"] is not None:
        attrs["__lr_mult__"] = attr_str(float(o["lr_mult"]))
    if o["wd_mult"] is not None:
        attrs["__wd_mult__"] = attr_str(float(o["wd_mult"]))
    if o["init"] is not None:
        init = o["init"]
        attrs["__init__"] = init if isinstance(init, str) else init.dumps()
    return Symbol(_native.sym_variable(name, attrs))


_VAR_OPTS = {
    "shape": opt(None, (tuple, list), "known shape"),
    "dtype": opt(None, None, "dtype"),
    "lr_mult": opt(None, float, "learning-rate multiplier"),
    "wd_mult": opt(None, float, "weight-decay multiplier"),
    "init": opt(None, None, "initializer"),
    "attr": opt(None, Mapping, "string attributes"),
}

var = Variable = variable


def group(symbols: Sequence[Symbol]) -> Symbol:
    """One symbol whose outputs are all the outputs of ``symbols``."""
    return Symbol(_native.sym_group([s._h for s in symbols]))


Group = group


def get_internals(s: Symbol) -> Symbol:
    """Every node output of ``s`` (``fc1_output``, variables, …) as one grouped symbol."""
    return s.get_internals()


def get_output(s: Symbol, i: int | str) -> Symbol:
    """Output ``i`` (an index or an output name) of ``s``."""
    return s[i]


def list_arguments(s: Symbol) -> list[str]:
    """Argument names (inputs and parameters, not auxiliary states), in graph order."""
    return s.list_arguments()


def list_outputs(s: Symbol) -> list[str]:
    """Output names (``fc1_output``, …)."""
    return s.list_outputs()


def list_auxiliary_states(s: Symbol) -> list[str]:
    """Auxiliary state names (``bn_moving_mean``, …)."""
    return s.list_auxiliary_states()


def list_inputs(s: Symbol) -> list[str]:
    """Every variable name (arguments and auxiliary states)."""
    return s.list_inputs()


def name(s: Symbol) -> str | None:
    """The node name of a single-output symbol."""
    return s.name


def attr(s: Symbol, key: str) -> str | None:
    """Attribute ``key`` of a single-node symbol (None when absent)."""
    return s.attr(key)


def attr_dict(s: Symbol) -> dict[str, dict[str, str]]:
    """``{node name: {key: value}}`` for every node with attributes."""
    return s.attr_dict()


def _shape_map(fname: str, shapes: Mapping[str, Any] | None, kw: Mapping[str, Any]) -> dict[str, list[int]]:
    m = dict(shapes or {})
    m.update(kw)
    out = {}
    for k, v in m.items():
        if v is None:
            continue
        try:
            out[str(k)] = [int(d) for d in v]
        except TypeError:
            raise TypeError(f"{fname}: shape of {k!r} must be a tuple of ints, got {v!r}") from None
    return out


def infer_shape(s: Symbol, shapes: Mapping[str, Shape | None] | None = None, /,
                **kw: Shape | None) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]], list[tuple[int, ...]]]:
    """``(arg_shapes, out_shapes, aux_shapes)`` from known input shapes (a map or keywords).

    Raises MXFNError naming the argument that could not be inferred.

    Example:
        >>> fc = fully_connected(variable("data"), num_hidden=4, name="fc")
        >>> infer_shape(fc, {"data": (2, 3)})
        ([(2, 3), (4, 3), (4,)], [(2, 4)], [])
    """
    a, o, x = s._h.infer_shape(_shape_map("sym.infer_shape", shapes, kw))
    tup = lambda v: [tuple(t) for t in v]  # noqa: E731
    return tup(a), tup(o), tup(x)


def infer_type(s: Symbol, types: Mapping[str, DTypeLike] | None = None, /,
               **kw: DTypeLike) -> tuple[list[np.dtype[Any]], list[np.dtype[Any]], list[np.dtype[Any]]]:
    """``(arg_types, out_types, aux_types)`` as numpy dtypes from known input dtypes."""
    m = {str(k): dtype_name(v, "sym.infer_type") for k, v in {**(types or {}), **kw}.items()}
    a, o, x = s._h.infer_type(m)
    conv = lambda v: [np.dtype(t) for t in v]  # noqa: E731
    return conv(a), conv(o), conv(x)


def to_json(s: Symbol) -> str:
    """MXNet 1.x JSON text of ``s`` (what ``Symbol.tojson()`` writes)."""
    return s.tojson()


def load_json(text: str) -> Symbol:
    """A symbol from MXNet JSON text (1.x, or the pre-1.0 layouts MXNet upgrades)."""
    if not isinstance(text, str):
        raise TypeError(f"sym.load_json: text must be a str, got {type(text).__name__}")
    return Symbol(_native.sym_load_json(text))


def save(s: Symbol, fname: PathLike) -> None:
    """Writes ``s`` as MXNet JSON to ``fname`` (atomically)."""
    _native.sym_save(s._h, os.fspath(fname))


def load(fname: PathLike) -> Symbol:
    """Reads a symbol JSON file (``prefix-symbol.json``)."""
    return Symbol(_native.sym_load(os.fspath(fname)))


def add(a: Any, b: Any) -> Symbol:
    """``a + b`` (symbols or scalars)."""
    return a + b


def sub(a: Any, b: Any) -> Symbol:
    """``a - b``."""
    return a - b


def mul(a: Any, b: Any) -> Symbol:
    """``a * b``."""
    return a * b


def div(a: Any, b: Any) -> Symbol:
    """``a / b``."""
    return a / b


# -- operator functions generated from the registry ---------------------------------------

def _split_call(fname: str, args: Sequence[Any], kwargs: Mapping[str, Any]
                ) -> tuple[Any, Any, list[Any], dict[Any, Any]]:
    """Separates the three Clojure call forms and Python keywords into
    (name, attr_map, inputs list, params dict)."""
    args = list(args)
    node_name, attr_map = None, None
    if args and isinstance(args[0], str):
        node_name = args.pop(0)
        if args and isinstance(args[0], Mapping) and len(args) >= 2 and isinstance(args[1], Mapping):
            attr_map = args.pop(0)
    opts = {}
    if args and isinstance(args[-1], Mapping) and not isinstance(args[-1], Symbol):
        opts = dict(args.pop())
    merged = {**opts, **kwargs}
    merged = {normalize_key(k) if isinstance(k, str) else k: v for k, v in merged.items()}
    if "name" in merged:
        node_name = merged.pop("name")
    if "attr" in merged:
        attr_map = merged.pop("attr")
    return node_name, attr_map, args, merged


def _make_sym_op(info: _native.OpInfo) -> Callable[..., Symbol]:
    op = info["name"]

    def f(*args: Any, **kwargs: Any) -> Symbol:
        node_name, attr_map, positional, merged = _split_call(info["py_name"], args, kwargs)
        inputs = [(None, _as_symbol(a, op)) for a in positional]
        params = {}
        for k, v in merged.items():
            if isinstance(v, Symbol):
                inputs.append((k, v))
            elif info["variadic"] and k in ("data", "args") and isinstance(v, (list, tuple)):
                inputs.extend((None, _as_symbol(x, op)) for x in v)
            else:
                params[k] = attr_str(v)
        if info["variadic"] and len(positional) == 1 and isinstance(args[0], (list, tuple)):
            inputs = [(None, _as_symbol(x, op)) for x in args[0]]
        attrs = dict(params)
        for k, v in (attr_map or {}).items():
            # User attributes are MXNet's reserved keys: "ctx_group" is stored as
            # "__ctx_group__" (what MXNet's legacy upgrade does), so it never reads as an
            # operator parameter.
            k = str(k)
            attrs[k if k.startswith("__") and k.endswith("__") else f"__{k}__"] = str(v)
        return _compose(op, node_name, op.lower(), attrs, inputs)

    return f


def _as_symbol(x: Any, op: str) -> Symbol:
    if isinstance(x, (list, tuple)):
        raise TypeError(f"sym.{op}: give several inputs as separate arguments or by name")
    if not isinstance(x, Symbol):
        raise TypeError(f"sym.{op}: inputs must be Symbols, got {type(x).__name__}")
    return x


_FILL_OPTS = {
    "dtype": opt("float32", None, "element type (a name or numpy dtype)"),
    "name": opt(None, str, "node name; None = automatic (_zeros0, _ones0, _full0, …)"),
}


def _fill(fname: str, op: str, shape: Any, value: float | None, opts: Mapping[str, Any] | None,
          kw: Mapping[str, Any]) -> Symbol:
    o = parse_opts(f"sym.{fname}", _FILL_OPTS, opts, kw)
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
            isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in shape):
        raise TypeError(f"sym.{fname}: shape must be a tuple of ints, got {shape!r}")
    attrs = {"shape": attr_str(tuple(int(d) for d in shape)),
             "dtype": dtype_name(o["dtype"], f"sym.{fname}")}
    if value is not None:
        attrs["value"] = attr_str(value)
    return _compose(op, o["name"], op, attrs, [])


def zeros(shape: Shape | int, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Symbol:
    """A symbol of ``shape`` filled with 0 (MXNet's ``mx.sym.zeros``: a ``_zeros`` node).

    Options: ``dtype="float32"``, ``name=None``.

    Example:
        >>> (variable("x") + zeros((2, 3))).list_arguments()
        ['x']
    """
    return _fill("zeros", "_zeros", shape, None, opts, kw)


def ones(shape: Shape | int, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Symbol:
    """A symbol of ``shape`` filled with 1 (MXNet's ``mx.sym.ones``: a ``_ones`` node).
    Options as ``zeros``."""
    return _fill("ones", "_ones", shape, None, opts, kw)


def full(shape: Shape | int, val: float, opts: Mapping[str, Any] | None = None, /,
         **kw: Any) -> Symbol:
    """A symbol of ``shape`` filled with ``val`` (MXNet's ``mx.sym.full``: a ``_full`` node).
    Options as ``zeros``."""
    if isinstance(val, bool) or not isinstance(val, numbers.Real):
        raise TypeError(f"sym.full: val must be a number, got {type(val).__name__} {val!r}")
    return _fill("full", "_full", shape, float(val), opts, kw)


_OWN = set(globals())
globals().update({k: v for k, v in op_functions(_make_sym_op).items() if k not in _OWN})
