"""mx.nd: NDArray, a numpy-friendly handle on the Rust core's arrays, and its functions.

Arrays are values: operations return new arrays, and ``x[i] = v`` rebinds ``x`` to an
updated copy (copy-on-write), so a numpy view taken earlier never changes under you.
"""

from __future__ import annotations

import builtins
import numbers
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, SupportsFloat, cast

import numpy as np

from . import _native
from ._errors import MXFNError
from ._dtypes import DTYPES, dtype_name  # noqa: F401  (mx.nd.DTYPES)
from ._ops import attr_str, op_functions
from ._opts import opt, parse_opts
from .context import Context, as_context, cpu, dev_type_code

if TYPE_CHECKING:
    from ._types import ArrayLike, ContextLike, DTypeLike, PathLike, Shape

    # The operator functions _install_ops() adds from the registry (nd.fully_connected,
    # nd.softmax, nd.FullyConnected, …): each returns an NDArray, or a list of them for an
    # operator with several visible outputs.
    def __getattr__(name: str) -> Callable[..., Any]: ...


_CTX_OPTS = {
    "dtype": opt("float32", None, "element type: a numpy dtype name or numpy dtype"),
    "ctx": opt(None, None, "device (a Context or a name such as \"cpu(1)\"); default: current context"),
}


def _ctx_of(ctx: ContextLike, fname: str) -> Context:
    c = as_context(ctx, fname)
    if c.device_type != "cpu":
        raise MXFNError(f"{fname}: ctx {c} is not available: this build of mxfn has no GPU "
                        f"backend; use mx.cpu(i)")
    return c


def _place(handle: _native.NDArrayHandle, ctx: Context) -> NDArray:
    return NDArray(_native.nd_as_in_context(handle, dev_type_code(ctx), ctx.device_id))


class NDArray:
    """An n-d array of float32 (the default), float64, float16, uint8, int8, int32 or int64.

    Supports ``+ - * / % ** -x`` and comparisons elementwise with arrays (numpy broadcasting),
    numpy arrays and scalars; ``x.shape``, ``x.dtype``, ``x.size``, ``x.ndim``, ``x.T``,
    ``len(x)``, ``x[i]``, ``x[a:b]``, ``x[i, 1:3]``; ``np.asarray(x)`` is a read-only view
    without a copy; ``x.asnumpy()`` is a writable copy, as in MXNet.

    Example:
        >>> x = array([[1, 2], [3, 4]])
        >>> (x * 2 + 1).asnumpy()
        array([[3., 5.],
               [7., 9.]], dtype=float32)
        >>> x[1]
        <BLANKLINE>
        [3. 4.]
        <NDArray 2 @cpu(0)>
    """

    __slots__ = ("_h",)
    _h: _native.NDArrayHandle
    # numpy defers binary operators to NDArray (so `np_array + x` is an NDArray).
    __array_priority__ = 1000.0

    def __init__(self, handle: _native.NDArrayHandle) -> None:
        if not isinstance(handle, _native.NDArrayHandle):
            raise TypeError("NDArray(...) wraps a core handle; build arrays with mx.nd.array(data)")
        self._h = handle

    # -- what it is
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._h.shape())

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(self._h.dtype())

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def context(self) -> Context:
        code, dev_id = self._h.context()
        return Context("gpu" if code == 2 else "cpu", dev_id)

    ctx = context

    @property
    def T(self) -> "NDArray":
        return NDArray(_native.nd_transpose(self._h))

    # -- numpy
    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray[Any, Any]:
        view = self._h.numpy()
        if dtype is not None and np.dtype(dtype) != view.dtype:
            return view.astype(dtype)
        return np.array(view) if copy else view

    def asnumpy(self) -> np.ndarray[Any, Any]:
        return np.array(self._h.numpy())

    def asscalar(self) -> Any:
        return to_scalar(self)

    # -- DLPack
    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: Any = None, copy: bool | None = None) -> Any:
        """Exports the array through DLPack (the array-API protocol numpy, torch, JAX… read).

        Zero-copy when the consumer speaks DLPack 1.0 (numpy 2's ``from_dlpack`` does): the
        capsule holds the array's buffer read-only, and mxfn's copy-on-write keeps it
        unchanged — a later write to this NDArray goes to a new buffer, so an exported view
        never sees it. A consumer of the older, unversioned protocol cannot be told the
        buffer is read-only, so it gets a private copy (as it does with ``copy=True``).
        ``stream`` must be None (CPU memory). MXNet 1.9.1's ``to_dlpack_for_read`` is the
        zero-copy, read-only export this mirrors.
        """
        if stream is not None:
            raise MXFNError(f"NDArray.__dlpack__: stream must be None for CPU arrays, got {stream!r}")
        view = self._h.numpy()
        versioned = max_version is not None and tuple(max_version)[:1] >= (1,)
        if copy or not versioned:
            view = np.array(view)
        kw: dict[str, Any] = {} if max_version is None else {"max_version": max_version}
        if copy is not None:
            kw["copy"] = copy
        if dl_device is not None:
            kw["dl_device"] = dl_device
        try:
            return view.__dlpack__(**kw)
        except (BufferError, TypeError):
            # numpy before 2.1 exports no read-only buffers and knows no versioned keywords.
            return np.array(view).__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(1, 0)``: DLPack's CPU device (every mxfn context is host memory)."""
        return (1, 0)

    def tolist(self) -> Any:
        return self._h.numpy().tolist()

    # -- conversions
    def astype(self, dtype: DTypeLike) -> NDArray:
        return NDArray(_native.nd_astype(self._h, dtype_name(dtype, "NDArray.astype")))

    def copy(self) -> NDArray:
        return NDArray(_native.nd_copy(self._h))

    def as_in_context(self, ctx: ContextLike) -> NDArray:
        return _place(self._h, _ctx_of(ctx, "NDArray.as_in_context"))

    def reshape(self, *shape: Any) -> NDArray:
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = shape[0]
        return reshape(self, shape)

    # -- python protocol
    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d NDArray")
        return self.shape[0]

    def __iter__(self) -> Iterator[NDArray]:
        for i in range(len(self)):
            yield self[i]

    def __bool__(self) -> bool:
        if self.size == 1:
            return bool(self._h.numpy().reshape(-1)[0])
        if self.size == 0:
            return False
        raise MXFNError(f"the truth value of an NDArray with {self.size} elements is ambiguous")

    def __float__(self) -> float:
        return float(to_scalar(self))

    def __int__(self) -> int:
        return int(to_scalar(self))

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        shape = "x".join(str(d) for d in self.shape)
        try:
            values = self._h.numpy()
        except MXFNError:  # numpy cannot describe it (more than 32 axes, a huge empty array)
            return f"<NDArray {shape} {self.dtype} @{self.context}>"
        return f"\n{values}\n<NDArray {shape} @{self.context}>"

    def __getitem__(self, key: Any) -> NDArray:
        begin, end, step, drop = _index(self.shape, key)
        h = _native.nd_slice(self._h, begin, end, step)
        if drop:
            keep = [d for i, d in enumerate(h.shape()) if i not in drop]
            h = _native.nd_reshape(h, keep)
        return NDArray(h)

    def __setitem__(self, key: Any, value: ArrayLike) -> None:
        begin, end, step, _ = _index(self.shape, key)
        v = _handle(value, self.dtype.name)
        self._h = _native.nd_assign_slice(self._h, begin, end, step, v)

    # -- arithmetic
    def _bin(self, op: str, other: Any, reverse: bool = False) -> NDArray:
        if isinstance(other, numbers.Number) and not isinstance(other, bool):
            return NDArray(_native.nd_scalar(op, self._h, float(cast(SupportsFloat, other)), reverse))
        if isinstance(other, NDArray):
            o = other._h  # dtypes must match, as in MXNet: the core says so if they do not
        else:
            try:
                o = _handle(other, self.dtype.name)
            except (MXFNError, TypeError):
                return NotImplemented
        a, b = (o, self._h) if reverse else (self._h, o)
        return NDArray(_native.nd_binary(op, a, b))

    def __add__(self, o: Any) -> NDArray: return self._bin("add", o)
    def __radd__(self, o: Any) -> NDArray: return self._bin("add", o, True)
    def __sub__(self, o: Any) -> NDArray: return self._bin("sub", o)
    def __rsub__(self, o: Any) -> NDArray: return self._bin("sub", o, True)
    def __mul__(self, o: Any) -> NDArray: return self._bin("mul", o)
    def __rmul__(self, o: Any) -> NDArray: return self._bin("mul", o, True)
    def __truediv__(self, o: Any) -> NDArray: return self._bin("div", o)
    def __rtruediv__(self, o: Any) -> NDArray: return self._bin("div", o, True)
    def __mod__(self, o: Any) -> NDArray: return self._bin("mod", o)
    def __rmod__(self, o: Any) -> NDArray: return self._bin("mod", o, True)
    def __pow__(self, o: Any) -> NDArray: return self._bin("pow", o)
    def __rpow__(self, o: Any) -> NDArray: return self._bin("pow", o, True)
    # Elementwise, as numpy and MXNet compare: an array, not a bool.
    def __eq__(self, o: Any) -> NDArray: return self._bin("eq", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> NDArray: return self._bin("ne", o)  # type: ignore[override]
    def __lt__(self, o: Any) -> NDArray: return self._bin("lt", o)
    def __le__(self, o: Any) -> NDArray: return self._bin("le", o)
    def __gt__(self, o: Any) -> NDArray: return self._bin("gt", o)
    def __ge__(self, o: Any) -> NDArray: return self._bin("ge", o)
    def __neg__(self) -> NDArray: return NDArray(_native.nd_neg(self._h))
    def __pos__(self) -> NDArray: return self
    def __abs__(self) -> NDArray: return NDArray(_native.nd_binary("maximum", self._h, _native.nd_neg(self._h)))


def _index(shape: tuple[int, ...], key: Any) -> tuple[list[int | None], list[int | None], list[int | None], set[int]]:
    """Turns a getitem key (ints and slices, possibly in a tuple) into slice arguments."""
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) > len(shape):
        raise IndexError(f"too many indices for an NDArray of shape {shape}: {len(key)}")
    begin: list[int | None] = []
    end: list[int | None] = []
    step: list[int | None] = []
    drop: set[int] = set()
    for axis, k in enumerate(key):
        if isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, bool):
            n = shape[axis]
            if not -n <= int(k) < n:
                raise IndexError(f"index {k} is out of bounds for axis {axis} with size {n}")
            k = int(k) % n
            begin.append(k)
            end.append(k + 1)
            step.append(1)
            drop.add(axis)
        elif isinstance(k, builtins.slice):
            begin.append(k.start)
            end.append(k.stop)
            step.append(k.step)
        else:
            raise TypeError(f"NDArray indices must be ints or slices, got {type(k).__name__}")
    return begin, end, step, drop


def _handle(x: ArrayLike, dtype: str | None = None, fname: str = "nd") -> _native.NDArrayHandle:
    """The core handle of an NDArray, numpy array, nested list or scalar (cast to ``dtype``)."""
    if isinstance(x, NDArray):
        return x._h if dtype is None or x.dtype.name == dtype else _native.nd_astype(x._h, dtype)
    return array(x, dtype=dtype)._h if dtype else array(x)._h


def as_ndarray(x: ArrayLike, fname: str = "nd") -> NDArray:
    """``x`` if it is an NDArray, else ``array(x)``: numpy arrays are accepted everywhere.

    Example:
        >>> as_ndarray(np.zeros(2)).dtype
        dtype('float32')
    """
    return x if isinstance(x, NDArray) else array(x)


def array(data: ArrayLike, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> NDArray:
    """An NDArray holding a copy of ``data`` (a nested list, scalar, numpy array or NDArray).

    The dtype defaults to the source's for an NDArray and to float32 for everything else,
    numpy arrays included (as MXNet's ``mx.nd.array`` does): pass ``dtype`` to keep another.

    Options:
        dtype (str, None): element type; None = from the source as above.
        ctx (Context, None): device; None = the current context.

    Returns:
        A new NDArray. Non-numeric or ragged data raises MXFNError.

    Example:
        >>> array([[1, 2, 3]], dtype="int32")
        <BLANKLINE>
        [[1 2 3]]
        <NDArray 1x3 @cpu(0)>
    """
    o = parse_opts("nd.array", _ARRAY_OPTS, opts, kw)
    ctx = _ctx_of(o["ctx"], "nd.array")
    if isinstance(data, NDArray):
        src = data.asnumpy()
    else:
        try:
            src = np.asarray(data)
        except (ValueError, TypeError) as e:
            raise MXFNError(f"nd.array: data must be numbers in a regular (non-ragged) nesting; {e}") from None
    if o["dtype"] is not None:
        dt = dtype_name(o["dtype"], "nd.array")
    elif isinstance(data, NDArray):
        dt = src.dtype.name
    else:
        dt = "float32"
    if src.dtype.kind not in "biuf":
        raise MXFNError(f"nd.array: data must be numeric; got values of numpy dtype {src.dtype} "
                        f"(e.g. {src.reshape(-1)[:1].tolist()})")
    return _place(_native.nd_from_numpy(np.ascontiguousarray(src, dtype=dt)), ctx)


_ARRAY_OPTS = {**_CTX_OPTS, "dtype": opt(None, None, "element type; None = from the source")}


def from_dlpack(obj: Any) -> NDArray:
    """An NDArray from any DLPack producer (an object with ``__dlpack__``: a numpy array, a
    torch tensor, another NDArray…), keeping its dtype.

    The values are copied: an mxfn array owns its buffer (arrays are values with
    copy-on-write), and a buffer borrowed from the producer could change behind it. Export
    (``NDArray.__dlpack__``) is zero-copy.

    Example:
        >>> from_dlpack(np.arange(3, dtype=np.int64)).asnumpy()
        array([0, 1, 2])
    """
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"nd.from_dlpack: obj must support the DLPack protocol (__dlpack__), "
                        f"got {type(obj).__name__}")
    view = np.from_dlpack(obj)
    if view.dtype.kind not in "biuf":
        raise MXFNError(f"nd.from_dlpack: obj holds {view.dtype} values; mxfn arrays are numeric")
    return _place(_native.nd_from_numpy(np.ascontiguousarray(view)), _ctx_of(None, "nd.from_dlpack"))


def _creator(fname: str, fill: float) -> Callable[..., NDArray]:
    def make(shape: Shape | int, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> NDArray:
        o = parse_opts(f"nd.{fname}", _CTX_OPTS, opts, kw)
        ctx = _ctx_of(o["ctx"], f"nd.{fname}")
        return _place(_native.nd_full(_shape(shape, f"nd.{fname}"), fill, dtype_name(o["dtype"], f"nd.{fname}")), ctx)
    make.__name__ = fname
    make.__doc__ = f"""An NDArray of ``shape`` filled with {fill:g}.

    Options:
        dtype (str, "float32"): element type.
        ctx (Context, None): device; None = the current context.

    Example:
        >>> {fname}((2, 2), dtype="int32").asnumpy().tolist()
        {[[int(fill)] * 2] * 2}
    """
    return make


zeros = _creator("zeros", 0.0)
ones = _creator("ones", 1.0)


def empty(shape: Shape | int, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> NDArray:
    """An NDArray of ``shape`` (mxfn fills it with zeros, so its content is never garbage).

    Options: as ``zeros``.

    Example:
        >>> empty(3).shape
        (3,)
    """
    return zeros(shape, opts, **kw)


def full(shape: Shape | int, value: float, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> NDArray:
    """An NDArray of ``shape`` with every element ``value``.

    Options: as ``zeros``.

    Example:
        >>> full((2,), 7, dtype="int64").asnumpy()
        array([7, 7])
    """
    o = parse_opts("nd.full", _CTX_OPTS, opts, kw)
    ctx = _ctx_of(o["ctx"], "nd.full")
    return _place(_native.nd_full(_shape(shape, "nd.full"), float(value), dtype_name(o["dtype"], "nd.full")), ctx)


def arange(start: float, stop: float | None = None, step: float = 1.0,
           opts: Mapping[str, Any] | None = None, /, **kw: Any) -> NDArray:
    """Evenly spaced values in ``[start, stop)`` (``[0, start)`` when ``stop`` is None).

    Options: as ``zeros``.

    Example:
        >>> arange(3).asnumpy()
        array([0., 1., 2.], dtype=float32)
    """
    o = parse_opts("nd.arange", _CTX_OPTS, opts, kw)
    if stop is None:
        start, stop = 0.0, start
    ctx = _ctx_of(o["ctx"], "nd.arange")
    return _place(_native.nd_arange(float(start), float(stop), float(step), dtype_name(o["dtype"], "nd.arange")), ctx)


def _shape(shape: Any, fname: str) -> tuple[int, ...]:
    if isinstance(shape, (numbers.Integral, np.integer)):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{fname}: shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(d < 0 for d in dims) or any(isinstance(d, bool) for d in shape):
        raise MXFNError(f"{fname}: shape must hold non-negative ints, got {tuple(shape)!r}")
    return dims


# -- functional accessors (SPEC §4) ------------------------------------------------------

def shape(x: ArrayLike) -> tuple[int, ...]:
    """The shape of ``x``. Example: ``shape(zeros((2, 3)))`` is ``(2, 3)``."""
    return as_ndarray(x).shape


def dtype(x: ArrayLike) -> np.dtype[Any]:
    """The numpy dtype of ``x``."""
    return as_ndarray(x).dtype


def size(x: ArrayLike) -> int:
    """The number of elements of ``x``."""
    return as_ndarray(x).size


def context(x: ArrayLike) -> Context:
    """The device of ``x``."""
    return as_ndarray(x).context


def copy(x: ArrayLike) -> NDArray:
    """A copy of ``x`` that shares no storage with it."""
    return as_ndarray(x).copy()


def as_in_context(x: ArrayLike, ctx: ContextLike) -> NDArray:
    """``x`` on device ``ctx``."""
    return as_ndarray(x).as_in_context(ctx)


def to_numpy(x: ArrayLike) -> np.ndarray[Any, Any]:
    """A writable numpy copy of ``x`` (= ``x.asnumpy()``)."""
    return as_ndarray(x).asnumpy()


def to_list(x: ArrayLike) -> Any:
    """``x`` as nested Python lists, like numpy's ``tolist``."""
    return as_ndarray(x).tolist()


def to_scalar(x: ArrayLike) -> Any:
    """The value of a one-element array as a Python number (MXNet's ``asscalar``).

    Example:
        >>> to_scalar(array([2.5]))
        2.5
    """
    a = as_ndarray(x)
    if a.size != 1:
        raise MXFNError(f"nd.to_scalar: x must have exactly one element, got shape {a.shape}")
    return a._h.numpy().reshape(-1)[0].item()


def reshape(data: ArrayLike, shape: Shape | int) -> NDArray:
    """``data`` with a new shape (one dimension may be -1). As in MXNet, the input may be
    given by keyword: ``reshape(data=x, shape=...)``.

    Example:
        >>> reshape(arange(6), (2, -1)).shape
        (2, 3)
    """
    dims: Any = shape if not isinstance(shape, numbers.Integral) else (shape,)
    return NDArray(_native.nd_reshape(_handle(data), [int(d) for d in dims]))


def concat(*arrays: Any, dim: int = 1) -> NDArray:
    """Joins arrays along axis ``dim`` (default 1, as MXNet); a list or several arrays.

    Example:
        >>> concat(ones((1, 2)), zeros((1, 1))).asnumpy()
        array([[1., 1., 0.]], dtype=float32)
    """
    xs = arrays[0] if len(arrays) == 1 and isinstance(arrays[0], (list, tuple)) else arrays
    return NDArray(_native.nd_concat([_handle(a) for a in xs], int(dim)))


def stack(*arrays: Any, axis: int = 0) -> NDArray:
    """Joins arrays along a new axis ``axis``; a list or several arrays."""
    xs = arrays[0] if len(arrays) == 1 and isinstance(arrays[0], (list, tuple)) else arrays
    return NDArray(_native.nd_stack([_handle(a) for a in xs], int(axis)))


def slice(data: ArrayLike, begin: Sequence[int | None], end: Sequence[int | None],
          step: Sequence[int | None] | None = None) -> NDArray:  # noqa: A001 - MXNet's name
    """MXNet's ``slice``: per leading axis, ``begin``/``end``/``step`` (None = default);
    ``data`` may be given by keyword.

    Example:
        >>> slice(arange(10), (1,), (8,), (3,)).asnumpy()
        array([1., 4., 7.], dtype=float32)
    """
    begin, end = list(begin), list(end)
    step = list(step) if step is not None else []
    return NDArray(_native.nd_slice(_handle(data), begin, end, step))


def slice_axis(data: ArrayLike, axis: int, begin: int, end: int | None) -> NDArray:
    """Elements ``begin:end`` of ``data`` along ``axis`` (``end`` None = to the end).

    Example:
        >>> slice_axis(data=arange(6).reshape((2, 3)), axis=1, begin=1, end=None).asnumpy()
        array([[1., 2.],
               [4., 5.]], dtype=float32)
    """
    return NDArray(_native.nd_slice_axis(_handle(data), int(axis), int(begin), None if end is None else int(end)))


def transpose(data: ArrayLike, axes: Sequence[int] | None = None) -> NDArray:
    """``data`` with its axes permuted (reversed when ``axes`` is None); ``data`` may be given
    by keyword."""
    return NDArray(_native.nd_transpose(_handle(data), None if axes is None else [int(a) for a in axes]))


def argmax_channel(x: ArrayLike) -> NDArray:
    """Index of the maximum along the last axis, as float32 (MXNet's ``argmax_channel``).

    Example:
        >>> argmax_channel(array([[1, 3, 2], [9, 0, 0]])).asnumpy()
        array([1., 0.], dtype=float32)
    """
    return NDArray(_native.nd_argmax(_handle(x), -1, False))


def dot(lhs: ArrayLike, rhs: ArrayLike, transpose_a: bool = False, transpose_b: bool = False) -> NDArray:
    """Matrix product with MXNet's ``dot`` semantics (GEMM in the core).

    Example:
        >>> dot(ones((2, 3)), ones((3, 4))).shape
        (2, 4)
    """
    return NDArray(_native.nd_dot(_handle(lhs), _handle(rhs), bool(transpose_a), bool(transpose_b)))


def batch_dot(lhs: ArrayLike, rhs: ArrayLike, transpose_a: bool = False,
              transpose_b: bool = False) -> NDArray:
    """Batched matrix product ``(B, m, k) x (B, k, n) -> (B, m, n)``."""
    return NDArray(_native.nd_batch_dot(_handle(lhs), _handle(rhs), bool(transpose_a), bool(transpose_b)))


def _reducer(name: str) -> Callable[..., NDArray]:
    def reduce(data: ArrayLike, axis: int | Sequence[int] | None = None, keepdims: bool = False,
               exclude: bool = False) -> NDArray:
        axes = None if axis is None else [int(a) for a in (axis if isinstance(axis, (list, tuple)) else (axis,))]
        return NDArray(_native.nd_reduce(name, _handle(data), axes, bool(keepdims), bool(exclude)))
    reduce.__name__ = name
    reduce.__doc__ = f"""The {name} of ``data`` over ``axis`` (None = all axes); ``keepdims`` keeps reduced
    axes as 1; ``exclude`` reduces over the axes not listed (MXNet's ``{name}``; ``data`` may be
    given by keyword, as there).

    Example:
        >>> {name}(array([[1, 2], [3, 4]]), axis=1).shape
        (2,)
        >>> {name}(data=array([[1, 2], [3, 4]]), axis=0).shape
        (2,)
    """
    return reduce


sum = _reducer("sum")  # noqa: A001 - MXNet's names
mean = _reducer("mean")
max = _reducer("max")  # noqa: A001
min = _reducer("min")  # noqa: A001
prod = _reducer("prod")


def random_uniform(low: float = 0.0, high: float = 1.0, shape: Shape | int = (1,),
                   opts: Mapping[str, Any] | None = None, **kw: Any) -> NDArray:
    """Uniform samples in ``[low, high)`` from the global seed (``mx.random.seed``).

    Options: as ``zeros``.
    """
    o = parse_opts("nd.random_uniform", _CTX_OPTS, opts, kw)
    ctx = _ctx_of(o["ctx"], "nd.random_uniform")
    h = _native.random_uniform(float(low), float(high), _shape(shape, "nd.random_uniform"),
                               dtype_name(o["dtype"], "nd.random_uniform"))
    return _place(h, ctx)


def random_normal(loc: float = 0.0, scale: float = 1.0, shape: Shape | int = (1,),
                  opts: Mapping[str, Any] | None = None, **kw: Any) -> NDArray:
    """Normal samples with mean ``loc`` and standard deviation ``scale`` (global seed).

    Options: as ``zeros``.
    """
    o = parse_opts("nd.random_normal", _CTX_OPTS, opts, kw)
    ctx = _ctx_of(o["ctx"], "nd.random_normal")
    h = _native.random_normal(float(loc), float(scale), _shape(shape, "nd.random_normal"),
                              dtype_name(o["dtype"], "nd.random_normal"))
    return _place(h, ctx)


def save(fname: PathLike, data: Any) -> None:
    """Saves an NDArray, a list of them or a dict name → NDArray in MXNet's binary format.

    The file is written atomically (temp file + rename) and loads in MXNet 1.9.1
    (``mx.nd.load``). numpy arrays are accepted as values.

    Example:
        >>> import tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "x.params")
        >>> save(f, {"w": ones(2)}); load(f)["w"].asnumpy()
        array([1., 1.], dtype=float32)
    """
    path = os.fspath(fname)
    if isinstance(data, Mapping):
        for k in data:
            if not isinstance(k, str):
                raise TypeError(f"nd.save: dict keys must be str, got {type(k).__name__} {k!r}")
        _native.nd_save(path, [_handle(v) for v in data.values()], list(data.keys()))
    elif isinstance(data, (list, tuple)):
        _native.nd_save(path, [_handle(v) for v in data], None)
    elif isinstance(data, (NDArray, np.ndarray)):
        _native.nd_save(path, [_handle(data)], None)
    else:
        raise TypeError(f"nd.save: data must be an NDArray, a list or a dict of them, got {type(data).__name__}")


def load(fname: PathLike) -> list[NDArray] | dict[str, NDArray]:
    """Loads an MXNet NDArray file: a list, or a dict when the file has names (in file order).

    Raises FileNotFoundError for a missing file and MXFNError for a malformed one.
    """
    out = _native.nd_load(os.fspath(fname))
    if isinstance(out, dict):
        return {k: NDArray(v) for k, v in out.items()}
    return [NDArray(v) for v in out]


# -- operator functions generated from the registry ---------------------------------------

def _make_nd_op(info: _native.OpInfo) -> Callable[..., Any]:
    op = info["name"]
    variadic = info["variadic"]

    def f(*positional: Any, **kwargs: Any) -> Any:
        args = list(positional)
        opts = dict(args.pop()) if args and isinstance(args[-1], Mapping) else {}
        merged = {**opts, **kwargs}
        merged.pop("name", None)  # imperative calls have no node name
        out = merged.pop("out", None)
        if variadic and len(args) == 1 and isinstance(args[0], (list, tuple)):
            args = list(args[0])
        inputs = [(None, _handle(a)) for a in args]
        attrs: dict[str, str] = {}
        for k, v in merged.items():
            k = k.replace("-", "_")
            if isinstance(v, (NDArray, np.ndarray)):
                inputs.append((k, _handle(v)))
            else:
                attrs[k] = attr_str(v)
        res = [NDArray(h) for h in _native.op_invoke(op, attrs, inputs)]
        if out is not None:
            raise MXFNError(f"nd.{info['py_name']}: out= is not supported; arrays are values, use the result")
        return res[0] if len(res) == 1 else res

    return f


def _install_ops() -> None:
    own = set(globals())
    globals().update({k: v for k, v in op_functions(_make_nd_op).items() if k not in own})


__all__ = [
    "NDArray", "array", "zeros", "ones", "empty", "full", "arange", "random_uniform",
    "random_normal", "shape", "dtype", "size", "context", "copy", "as_in_context", "to_numpy",
    "to_list", "to_scalar", "reshape", "concat", "stack", "slice", "slice_axis", "transpose",
    "argmax_channel", "dot", "batch_dot", "sum", "mean", "max", "min", "prod", "save", "load",
    "as_ndarray", "dtype_name", "from_dlpack",
]

_install_ops()
