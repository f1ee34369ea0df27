"""mx.executor: a symbol bound to arrays — forward, backward, gradients, monitor, reshape."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from . import _native
from ._errors import MXFNError
from ._opts import opt, parse_opts
from .context import as_context, dev_type_code
from .ndarray import NDArray, _handle, dtype_name

if TYPE_CHECKING:
    from ._types import ArrayLike, ContextLike
    from .context import Context
    from .symbol import Symbol


class Executor:
    """A bound symbol (MXNet's ``Executor``). Use the module functions: ``forward(exe, ...)``,
    ``backward(exe, ...)``, ``outputs(exe)``, ``arg_dict(exe)``, … ; the methods of the same
    names are there for MXNet habits."""

    __slots__ = ("_h", "ctx", "_monitor", "_monitor_cb")
    _h: _native.ExecutorHandle
    ctx: Context
    _monitor: Any
    _monitor_cb: Callable[[str, _native.NDArrayHandle], None] | None

    def __init__(self, handle: _native.ExecutorHandle, ctx: Context) -> None:
        self._h = handle
        self.ctx = ctx
        self._monitor = None
        self._monitor_cb = None

    @property
    def outputs(self) -> list[NDArray]:
        return outputs(self)

    @property
    def arg_dict(self) -> dict[str, NDArray]:
        return arg_dict(self)

    @property
    def grad_dict(self) -> dict[str, NDArray]:
        return grad_dict(self)

    @property
    def aux_dict(self) -> dict[str, NDArray]:
        return aux_dict(self)

    @property
    def arg_arrays(self) -> list[NDArray]:
        return [NDArray(h) for h in self._h.arg_arrays()]

    @property
    def grad_arrays(self) -> list[NDArray | None]:
        return [None if h is None else NDArray(h) for h in self._h.grad_arrays()]

    @property
    def aux_arrays(self) -> list[NDArray]:
        return [NDArray(h) for h in self._h.aux_arrays()]

    def forward(self, is_train: bool = False, **kwargs: ArrayLike) -> Executor:
        return forward(self, {"is_train": is_train}, **kwargs)

    def backward(self, out_grads: ArrayLike | Sequence[ArrayLike] | None = None) -> Executor:
        return backward(self, out_grads)

    def __repr__(self) -> str:
        return f"<Executor {self._h.arg_names()} -> {self._h.symbol().list_outputs()} @{self.ctx}>"


def _ctx(ctx: ContextLike, fname: str) -> Context:
    c = as_context(ctx, fname)
    if c.device_type != "cpu":
        raise MXFNError(f"{fname}: ctx {c} is not available: this build of mxfn has no GPU backend; use mx.cpu(i)")
    return c


def _req_map(fname: str, grad_req: Any, names: list[str]) -> dict[str, str]:
    if isinstance(grad_req, str):
        return {n: grad_req for n in names}
    if isinstance(grad_req, Mapping):
        unknown = [k for k in grad_req if k not in names]
        if unknown:
            raise MXFNError(f"{fname}: grad_req names unknown arguments {unknown}; arguments are {names}")
        return {n: grad_req.get(n, "null") for n in names}
    if isinstance(grad_req, (list, tuple)):
        if len(grad_req) != len(names):
            raise MXFNError(f"{fname}: grad_req list needs {len(names)} entries ({names}), got {len(grad_req)}")
        return dict(zip(names, grad_req))
    raise TypeError(f"{fname}: grad_req must be a str, a map name->req or a list, got {type(grad_req).__name__}")


_SIMPLE_BIND_OPTS = {
    "grad_req": opt("write", None, '"write", "add", "null", or a map argument name -> req'),
    "type_dict": opt(None, Mapping, "dtypes of inputs by name"),
}


def simple_bind(sym: Symbol, ctx: ContextLike = None, opts: Mapping[str, Any] | None = None, /,
                **kw: Any) -> Executor:
    """Allocates arrays from input shapes (given by name, in ``opts`` or as keywords) and binds.

    Options:
        grad_req (str or map, "write"): gradient request for every argument, or per name.
        type_dict (map, None): dtypes by input name (default float32).

    Example:
        >>> import mxfn as mx
        >>> x = mx.sym.variable("x")
        >>> exe = simple_bind(x * 2, mx.cpu(), x=(2,))
        >>> _ = forward(exe, is_train=True, x=mx.nd.array([1, 2]))
        >>> outputs(exe)[0].asnumpy()
        array([2., 4.], dtype=float32)
    """
    fname = "executor.simple_bind"
    merged = {**(opts or {}), **kw}
    known = set(_SIMPLE_BIND_OPTS)
    shapes = {k: v for k, v in merged.items() if k not in known}
    o = parse_opts(fname, _SIMPLE_BIND_OPTS, {k: v for k, v in merged.items() if k in known})
    c = _ctx(ctx, fname)
    names = sym.list_arguments()
    bad = [k for k in shapes if k not in sym.list_inputs()]
    if bad:
        raise MXFNError(f"{fname}: {bad} are neither options nor inputs of the symbol; inputs are {sym.list_inputs()}")
    reqs = _req_map(fname, o["grad_req"], names)
    types = {k: dtype_name(v, fname) for k, v in (o["type_dict"] or {}).items()}
    shp: dict[str, list[int]] = {}
    for k, v in shapes.items():
        try:
            shp[k] = [int(d) for d in v]
        except TypeError:
            raise TypeError(f"{fname}: shape of {k!r} must be a tuple of ints, got {v!r}") from None
    h = _native.exe_simple_bind(sym._h, (dev_type_code(c), c.device_id), shp, types, reqs, "write")
    return Executor(h, c)


_BIND_OPTS = {
    "args_grad": opt(None, None, "gradient arrays (dict or list); default: allocated where grad_req is not null"),
    "grad_req": opt("write", None, '"write", "add", "null", or a map name -> req'),
    "aux_states": opt(None, None, "auxiliary states (dict or list)"),
}


def _by_name(fname: str, what: str, values: Any, names: list[str], required: bool = True) -> list[Any]:
    if values is None:
        return [None] * len(names)
    if isinstance(values, Mapping):
        extra = [k for k in values if k not in names]
        if extra:
            raise MXFNError(f"{fname}: {what} has unknown names {extra}; expected {names}")
        missing = [n for n in names if n not in values]
        if missing and required:
            raise MXFNError(f"{fname}: {what} misses {missing}")
        return [values.get(n) for n in names]
    values = list(values)
    if len(values) != len(names):
        raise MXFNError(f"{fname}: {what} needs {len(names)} arrays ({names}), got {len(values)}")
    return values


def bind(sym: Symbol, ctx: ContextLike, args: Mapping[str, ArrayLike] | Sequence[ArrayLike],
         opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Executor:
    """Binds ``sym`` to given argument arrays (a dict name -> array or a list in
    ``list_arguments`` order).

    Options:
        args_grad (dict or list, None): gradient arrays; when omitted, gradient arrays are
            allocated for every argument whose grad_req is not "null".
        grad_req (str or map, "write"): gradient request.
        aux_states (dict or list, None): auxiliary states.
    """
    fname = "executor.bind"
    o = parse_opts(fname, _BIND_OPTS, opts, kw)
    c = _ctx(ctx, fname)
    names = sym.list_arguments()
    aux_names = sym.list_auxiliary_states()
    arg_list = [_handle(a) for a in _by_name(fname, "args", args, names)]
    grads = _by_name(fname, "args_grad", o["args_grad"], names, required=False)
    grads = [None if g is None else _handle(g) for g in grads]
    reqs = _req_map(fname, o["grad_req"], names)
    aux = _by_name(fname, "aux_states", o["aux_states"], aux_names) if aux_names or o["aux_states"] else []
    if any(a is None for a in aux):
        raise MXFNError(f"{fname}: aux_states must give {aux_names}")
    h = _native.exe_bind(sym._h, (dev_type_code(c), c.device_id), arg_list, grads, [reqs[n] for n in names],
                         [_handle(a) for a in aux])
    return Executor(h, c)


def forward(exe: Executor, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Executor:
    """Runs forward. Options: ``is_train`` (default False); any other key sets that argument's
    value by name (weights included) before running.

    Returns:
        exe (read the results with ``outputs(exe)``).
    """
    merged = {**(opts or {}), **kw}
    is_train = bool(merged.pop("is_train", False))
    for k, v in merged.items():
        exe._h.set_arg(k, _handle(v))
    exe._h.forward(is_train)
    return exe


def backward(exe: Executor, out_grads: ArrayLike | Sequence[ArrayLike] | None = None) -> Executor:
    """Back-propagates: ``out_grads`` is one array (or a list, one per output); it may be
    omitted for loss outputs (MXNet's rule)."""
    if out_grads is None:
        g = []
    elif isinstance(out_grads, (list, tuple)):
        g = [_handle(x) for x in out_grads]
    else:
        g = [_handle(out_grads)]
    exe._h.backward(g)
    return exe


def outputs(exe: Executor) -> list[NDArray]:
    """The outputs of the last forward, as a list of NDArray."""
    return [NDArray(h) for h in exe._h.outputs()]


def arg_dict(exe: Executor) -> dict[str, NDArray]:
    """``{argument name: NDArray}``."""
    return dict(zip(exe._h.arg_names(), (NDArray(h) for h in exe._h.arg_arrays())))


def grad_dict(exe: Executor) -> dict[str, NDArray]:
    """``{argument name: gradient NDArray}`` for arguments with a gradient."""
    return {n: NDArray(h) for n, h in zip(exe._h.arg_names(), exe._h.grad_arrays()) if h is not None}


def aux_dict(exe: Executor) -> dict[str, NDArray]:
    """``{auxiliary state name: NDArray}``."""
    return dict(zip(exe._h.aux_names(), (NDArray(h) for h in exe._h.aux_arrays())))


def set_monitor_callback(exe: Executor, f: Callable[[str, NDArray], Any] | None) -> Executor:
    """Calls ``f(name, array)`` with every op output after each forward (None removes it)."""
    # Held weakly by the core (see module._install); the executor keeps the callback alive.
    exe._monitor_cb = None if f is None else (lambda n, h: f(n, NDArray(h)))
    exe._h.set_monitor(exe._monitor_cb)
    return exe


def reshape(exe: Executor, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Executor:
    """A new executor for new input shapes (a map or keywords), sharing the parameters."""
    shapes = {k: [int(d) for d in v] for k, v in {**(opts or {}), **kw}.items()}
    return Executor(exe._h.reshape(shapes), exe.ctx)
