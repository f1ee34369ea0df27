"""The values of ``mx.io`` — data descs, data batches — and the DataIter base class that
every iterator (the core's, ``iter_from``'s, the wrappers) derives from. ``mx.io`` re-exports
all of it; this module exists so that iterators defined outside ``io.py`` can share them
without an import cycle.
"""

from __future__ import annotations

import abc
import numbers
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import MXFNError
from ._maps import FrozenMap
from ._opts import REQUIRED, documented, opt, parse_opts
from .ndarray import NDArray, as_ndarray, dtype_name

if TYPE_CHECKING:
    from typing_extensions import Self

    from ._types import DataBatchOptions, DataDescOptions, DescLike, Shape


def _int(fname: str, key: str, value: Any, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum`` (bool and non-integers are TypeErrors)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f'{fname}: "{key}" must be an int, got {type(value).__name__} {value!r}')
    if value < minimum:
        raise MXFNError(f'{fname}: "{key}" must be at least {minimum}, got {value}')
    return int(value)


def _shape(fname: str, key: str, shape: Any) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints (lists accepted)."""
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f'{fname}: "{key}" must be a tuple of ints, got {type(shape).__name__} {shape!r}')
    return tuple(_int(fname, key, d) for d in shape)


def _seed(fname: str, seed: Any) -> int | None:
    return None if seed is None else _int(fname, "seed", seed)


# -- DataDesc -------------------------------------------------------------------------------

_DEFAULT_LAYOUTS = {1: "N", 2: "NC", 3: "NTC", 4: "NCHW", 5: "NCDHW"}


class DataDesc(FrozenMap):
    """An input's name, batch shape, dtype and layout: a read-only map with the keys
    ``name``, ``shape``, ``dtype``, ``layout`` (also readable as attributes). Build it with
    ``data_desc``."""

    __slots__ = ()

    name = property(lambda self: self["name"])
    shape = property(lambda self: self["shape"])
    dtype = property(lambda self: self["dtype"])
    layout = property(lambda self: self["layout"])

    def __reduce__(self) -> tuple[Any, ...]:
        return (DataDesc, (dict(self),))


_DESC_OPTS = {
    "name": opt(REQUIRED, str, "the input's name"),
    "shape": opt(REQUIRED, (tuple, list), "the batch shape (a tuple of ints; a list is accepted)"),
    "dtype": opt("float32", None, "element type: a numpy dtype name or numpy dtype"),
    "layout": opt(None, str, "axis names such as \"NCHW\"; None = by rank: N, NC, NTC, NCHW, NCDHW"),
}


@documented(_DESC_OPTS)
def data_desc(name: str | DataDescOptions | Mapping[str, Any], shape: Shape | int | Mapping[str, Any] | None = None,
              opts: Mapping[str, Any] | None = None, /, **kw: Any) -> DataDesc:
    """Describes one input: ``data_desc(name, shape, opts)`` or ``data_desc({"name", "shape", ...})``.

    The default layout depends on the rank (1–5: ``N``, ``NC``, ``NTC``, ``NCHW``,
    ``NCDHW``; other ranks: None); the batch axis is where the layout has ``N``
    (``batch_axis``). A ``TNC`` layout must be given explicitly.

    %OPTIONS%

    Returns:
        A read-only DataDesc; assignment raises TypeError, ``toolz.assoc`` gives a new dict.

    Example:
        >>> d = data_desc("data", (32, 1, 28, 28))
        >>> d
        {'name': 'data', 'shape': (32, 1, 28, 28), 'dtype': 'float32', 'layout': 'NCHW'}
        >>> data_desc({"name": "seq", "shape": [10, 32, 8], "layout": "TNC"}).shape
        (10, 32, 8)
    """
    fname = "io.data_desc"
    if isinstance(name, Mapping):
        if shape is not None and opts is None and isinstance(shape, Mapping):
            shape, opts = None, shape
        if shape is not None:
            raise TypeError(f"{fname}: give either a map or (name, shape), not both")
        given = dict(name)
    else:
        given = {"name": name}
        if shape is not None:
            given["shape"] = shape
    if opts is not None:
        if not isinstance(opts, Mapping):
            raise TypeError(f"{fname}: options must be a mapping or None, got {type(opts).__name__}")
        given.update(opts)
    o = parse_opts(fname, _DESC_OPTS, given, kw)
    shp = _shape(fname, "shape", o["shape"])
    layout = o["layout"] if o["layout"] is not None else _DEFAULT_LAYOUTS.get(len(shp))
    return DataDesc(name=o["name"], shape=shp, dtype=dtype_name(o["dtype"], fname), layout=layout)


def as_data_desc(x: DescLike) -> DataDesc:
    """A DataDesc from a DataDesc, a map with ``name`` and ``shape``, or a ``(name, shape)``
    pair (the forms ``module.bind`` accepts).

    Example:
        >>> as_data_desc(("softmax_label", [32]))["layout"]
        'N'
    """
    if isinstance(x, DataDesc):
        return x
    if isinstance(x, Mapping):
        return data_desc(x)
    if isinstance(x, (tuple, list)) and len(x) == 2 and isinstance(x[0], str):
        return data_desc(x[0], x[1])
    raise TypeError(f"io.as_data_desc: expected a DataDesc, a map with name and shape, or a "
                    f"(name, shape) pair, got {type(x).__name__} {x!r}")


def batch_axis(desc: DescLike) -> int:
    """The batch axis of a desc: where its layout has ``N``; 0 without a layout; -1 for a
    layout without ``N`` (MXNet's rule: the whole array goes to every device).

    Example:
        >>> batch_axis(data_desc("x", (5, 4, 3), layout="TNC")), batch_axis(("y", (4, 2)))
        (1, 0)
    """
    layout = as_data_desc(desc)["layout"]
    return 0 if layout is None else layout.find("N")


# -- DataBatch ------------------------------------------------------------------------------

class DataBatch(FrozenMap):
    """One batch: a read-only map with the keys ``data``, ``label``, ``pad``, ``index``,
    ``bucket_key``, ``provide_data``, ``provide_label`` (also readable as attributes, as in
    MXNet). Build it with ``data_batch``; iterators return it."""

    __slots__ = ()

    data = property(lambda self: self["data"])
    label = property(lambda self: self["label"])
    pad = property(lambda self: self["pad"])
    index = property(lambda self: self["index"])
    bucket_key = property(lambda self: self["bucket_key"])
    provide_data = property(lambda self: self["provide_data"])
    provide_label = property(lambda self: self["provide_label"])

    def __reduce__(self) -> tuple[Any, ...]:
        return (DataBatch, (dict(self),))


_BATCH_OPTS = {
    "data": opt(REQUIRED, None, "the data arrays (a list; one array is accepted; numpy too)"),
    "label": opt(None, None, "the label arrays (a list; one array is accepted), or None"),
    "pad": opt(0, int, "how many samples at the end of the batch are padding"),
    "index": opt(None, None, "the source index of every sample, or None"),
    "bucket_key": opt(None, None, "the bucket of the batch (bucketing), or None"),
    "provide_data": opt(None, list, "descs of the data (DataDesc, maps or (name, shape) pairs)"),
    "provide_label": opt(None, list, "descs of the labels, like provide_data"),
}


def _array_list(fname: str, key: str, xs: Any) -> list[NDArray] | None:
    if xs is None:
        return None
    if isinstance(xs, (NDArray, np.ndarray)):
        xs = [xs]
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f'{fname}: "{key}" must be a list of arrays, got {type(xs).__name__}')
    return [as_ndarray(x, fname) for x in xs]


@documented(_BATCH_OPTS)
def data_batch(opts: DataBatchOptions | Mapping[str, Any] | None = None, /, **kw: Any) -> DataBatch:
    """A batch for ``module.forward`` and friends.

    %OPTIONS%

    Returns:
        A read-only DataBatch (numpy arrays become NDArrays; descs become DataDescs).

    Example:
        >>> b = data_batch(data=[np.ones((2, 3))], label=[np.zeros(2)], pad=1)
        >>> batch_data(b)[0].shape, batch_pad(b)
        ((2, 3), 1)
    """
    fname = "io.data_batch"
    o = parse_opts(fname, _BATCH_OPTS, opts, kw)
    descs = {k: None if o[k] is None else [as_data_desc(d) for d in o[k]]
             for k in ("provide_data", "provide_label")}
    return DataBatch(data=_array_list(fname, "data", o["data"]), label=_array_list(fname, "label", o["label"]),
                     pad=_int(fname, "pad", o["pad"]), index=o["index"], bucket_key=o["bucket_key"], **descs)


def _field(b: Any, key: str) -> Any:
    return b[key] if isinstance(b, Mapping) else getattr(b, key)


def batch_data(b: Any) -> list[NDArray]:
    """The data arrays of a batch (a DataBatch, a map, or an MXNet-style object)."""
    return _field(b, "data")


def batch_label(b: Any) -> list[NDArray] | None:
    """The label arrays of a batch (None or [] without labels)."""
    return b.get("label") if isinstance(b, Mapping) else getattr(b, "label", None)


def batch_pad(b: Any) -> int:
    """How many samples at the end of a batch are padding."""
    p = b.get("pad", 0) if isinstance(b, Mapping) else getattr(b, "pad", 0)
    return p or 0


def batch_index(b: Any) -> Any:
    """The source index of every sample of a batch (a numpy int64 array), or None."""
    return b.get("index") if isinstance(b, Mapping) else getattr(b, "index", None)


def batch_bucket_key(b: Any) -> Any:
    """The bucket key of a batch, or None."""
    return b.get("bucket_key") if isinstance(b, Mapping) else getattr(b, "bucket_key", None)


# -- iterators ------------------------------------------------------------------------------

class DataIter(abc.ABC):
    """Base of mxfn's iterators. ``for b in it`` runs the rest of the epoch; the methods
    ``next``, ``has_next``, ``reset`` and the attributes ``provide_data``, ``provide_label``,
    ``batch_size``, ``default_bucket_key`` are what the ``mx.io`` functions use, so an object
    with the same members works with them too."""

    batch_size: int = 0
    default_bucket_key: Any = None

    def __iter__(self) -> Iterator[DataBatch]:
        return self

    def __next__(self) -> DataBatch:
        return self.next()

    @abc.abstractmethod
    def next(self) -> DataBatch:
        """The next batch (a DataBatch); StopIteration at the end of the epoch."""

    @abc.abstractmethod
    def has_next(self) -> bool:
        """Whether another batch is left in this epoch."""

    def reset(self) -> Self:
        return self

    # The descs a subclass sets (or it overrides the properties).
    _pd: Sequence[DataDesc] = ()
    _pl: Sequence[DataDesc] = ()

    @property
    def provide_data(self) -> list[DataDesc]:
        return list(self._pd)

    @property
    def provide_label(self) -> list[DataDesc]:
        return list(self._pl)

    def __repr__(self) -> str:
        names = [d["name"] for d in self.provide_data + self.provide_label]
        return f"<{type(self).__name__} batch_size={self.batch_size} inputs={names}>"
