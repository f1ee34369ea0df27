"""mx.io: data descs, data batches and data iterators.

``ndarray_iter``, ``mnist_iter``, ``csv_iter`` and ``bucket_sentence_iter`` build their
batches in the Rust core (rows are gathered there, or shared without a copy when they are
consecutive); ``prefetching_iter`` and ``resize_iter`` wrap any iterator; ``iter_from``
(``_iter_from.py``) reads batches from any Python iterable. The values (data descs, data
batches) and the DataIter base class live in ``_batch.py``. Iterators are
Python iterables: ``for batch in it`` runs the rest of the current epoch; ``reset(it)``
starts the next one (reshuffling when the iterator shuffles).
"""

from __future__ import annotations

import logging
import numbers
import os
import threading
import weakref
from collections.abc import Mapping

import numpy as np

from . import _dist, _native
from ._batch import (DataBatch, DataDesc, DataIter, _field, _int, _seed, _shape, as_data_desc, batch_axis,
                     batch_bucket_key, batch_data, batch_index, batch_label, batch_pad, data_batch, data_desc)
from ._errors import MXFNError
from ._iter_from import iter_from
from ._opts import REQUIRED, documented, opt, parse_opts
from .ndarray import NDArray, array, dtype_name

_LOG = logging.getLogger("mxfn")

__all__ = [
    "DataDesc", "DataBatch", "DataIter", "data_desc", "as_data_desc", "batch_axis", "data_batch",
    "batch_data", "batch_label", "batch_pad", "batch_index", "batch_bucket_key", "ndarray_iter",
    "mnist_iter", "csv_iter", "bucket_sentence_iter", "prefetching_iter", "resize_iter",
    "provide_data", "provide_label", "reset", "has_next", "next", "do_batches", "for_batches",
    "reduce_batches", "iter_from",
]



def _desc_of(t):
    name, shape, dtype, layout = t
    return DataDesc(name=name, shape=tuple(shape), dtype=dtype, layout=layout)


_PART_OPTS = {
    "num_parts": opt(None, int, "split the samples into this many contiguous parts…; None = the "
                                "number of workers under mpiexec (data-parallel training), else 1"),
    "part_index": opt(None, int, "…and read this one; None = this worker's rank under mpiexec, else 0"),
}


def _parts(fname, o) -> tuple:
    """``(num_parts, part_index)``: as given, or this process's place among the mpiexec
    workers (so every worker of a dist_sync run reads its own part by default)."""
    rank, size = _dist.launcher_world()
    n = size if o["num_parts"] is None else _int(fname, "num_parts", o["num_parts"], 1)
    i = (rank if o["num_parts"] is None else 0) if o["part_index"] is None \
        else _int(fname, "part_index", o["part_index"])
    if i >= n:
        raise MXFNError(f'{fname}: "part_index" must be below num_parts ({n}), got {i}')
    return n, i


def _part_rows(count, n, i) -> tuple:
    """Rows ``[start, end)`` of part ``i`` of ``n`` over ``count`` samples (MNISTIter's split)."""
    return int(count / n * i), int(count / n * (i + 1))


class NativeIter(DataIter):
    """An iterator of the Rust core (``ndarray_iter``, ``mnist_iter``, ``csv_iter``,
    ``bucket_sentence_iter``); ``kind`` is MXNet's class name."""

    def __init__(self, handle, kind):
        self._h = handle
        self.kind = kind
        self._pd = [_desc_of(t) for t in handle.provide_data()]
        self._pl = [_desc_of(t) for t in handle.provide_label()]
        self.batch_size = handle.batch_size()
        self.default_bucket_key = handle.default_bucket_key()

    def next(self) -> DataBatch:
        r = self._h.next()
        if r is None:
            raise StopIteration
        data, label, pad, index, key, pd, pl = r
        return DataBatch(data=[NDArray(h) for h in data], label=[NDArray(h) for h in label], pad=pad,
                         index=index, bucket_key=key,
                         provide_data=list(self._pd) if pd is None else [_desc_of(t) for t in pd],
                         provide_label=list(self._pl) if pl is None else [_desc_of(t) for t in pl])

    def has_next(self) -> bool:
        return self._h.has_next()

    def reset(self):
        self._h.reset()
        return self

    def __repr__(self):
        return f"<{self.kind} batch_size={self.batch_size} inputs={[d['name'] for d in [*self._pd, *self._pl]]}>"


def _arrays(fname, key, x, allow_none):
    """(handles, names or None) of an array, a list of arrays or a dict name -> array.

    numpy arrays and lists become float32 (MXNet's ``mx.nd.array`` default); NDArrays keep
    their dtype."""
    if x is None:
        if allow_none:
            return [], None
        raise MXFNError(f'{fname}: "{key}" is required (an array, a list of arrays or a dict)')
    if isinstance(x, Mapping):
        names = list(x.keys())
        bad = [k for k in names if not isinstance(k, str)]
        if bad:
            raise TypeError(f'{fname}: the names in "{key}" must be strings, got {bad[0]!r}')
        values = list(x.values())
    elif isinstance(x, (list, tuple)):
        names, values = None, list(x)
    else:
        names, values = None, [x]
    if not values and not allow_none:
        raise MXFNError(f'{fname}: "{key}" is empty; give at least one array (empty data)')

    def handle(v):
        if isinstance(v, NDArray):
            return v._h
        return array(v, dtype="float32")._h
    return [handle(v) for v in values], names


_NDARRAY_ITER_OPTS = {
    "label": opt(None, None, "label arrays: an array, a list of arrays or a dict name -> array"),
    "batch_size": opt(1, int, "samples per batch", aliases=("data_batch_size",)),
    "shuffle": opt(False, bool, "reshuffle at creation and at every reset"),
    "last_batch_handle": opt("pad", str, 'the last, incomplete batch: "pad", "discard" or "roll_over"'),
    "data_name": opt("data", str, "name of a single data array (k > 1 arrays: _0_data, _1_data, …)"),
    "label_name": opt("softmax_label", str, "name of a single label array (k > 1: _0_softmax_label, …)"),
    "seed": opt(None, int, "seed of the shuffling; None = from mx.random.seed"),
    **_PART_OPTS,
}


def _take_part(fname, x, n, i):
    """Part ``i`` of ``n`` of an array / list / dict of arrays (along axis 0)."""
    if n == 1 or x is None:
        return x
    if isinstance(x, Mapping):
        return {k: _take_part(fname, v, n, i) for k, v in x.items()}
    if isinstance(x, (list, tuple)) and x and not isinstance(x[0], numbers.Number) and \
            all(isinstance(v, (NDArray, np.ndarray)) for v in x):
        return [_take_part(fname, v, n, i) for v in x]
    a = x if isinstance(x, NDArray) else np.asarray(x)
    count = a.shape[0] if a.ndim else 0
    start, end = _part_rows(count, n, i)
    if end <= start:
        raise MXFNError(f'{fname}: "num_parts" must be at most the {count} samples, got {n}')
    return a[start:end]


@documented(_NDARRAY_ITER_OPTS)
def ndarray_iter(data, opts=None, /, **kw) -> NativeIter:
    """Batches over in-memory arrays, as MXNet's NDArrayIter.

    ``data`` (and ``label``) is an array, a list of arrays (named ``_0_data``, ``_1_data``, …
    when there are several) or a dict name -> array (its order kept). Axis 0 is the sample
    axis; all arrays need the same number of samples. numpy arrays and lists become float32;
    NDArrays keep their dtype.

    The last batch: ``"pad"`` fills it with the first samples of the epoch's order
    (wrapping as needed) and reports their count as ``pad``; ``"discard"`` drops it;
    ``"roll_over"`` keeps the left-over samples for the first batch of the next epoch, which
    reports their count as ``pad`` (MXNet's rule). Calling ``next`` again after the end
    loses nothing. Each batch's ``index`` holds its samples' positions in ``data``.

    %OPTIONS%

    Returns:
        The iterator. Empty data, data and label of different lengths, or batch_size 0
        raise MXFNError.

    Example:
        >>> it = ndarray_iter(np.arange(10).reshape(5, 2), label=np.arange(5), batch_size=2)
        >>> [(b["data"][0].shape, b["pad"]) for b in it]
        [((2, 2), 0), ((2, 2), 0), ((2, 2), 1)]
        >>> provide_label(it)
        [{'name': 'softmax_label', 'shape': (2,), 'dtype': 'float32', 'layout': 'N'}]
    """
    fname = "io.ndarray_iter"
    o = parse_opts(fname, _NDARRAY_ITER_OPTS, opts, kw)
    n, i = _parts(fname, o)
    d, dnames = _arrays(fname, "data", _take_part(fname, data, n, i), False)
    lab, lnames = _arrays(fname, "label", _take_part(fname, o["label"], n, i), True)
    h = _native.io_ndarray_iter(d, dnames, o["data_name"], lab, lnames, o["label_name"],
                                _int(fname, "batch_size", o["batch_size"]), o["shuffle"],
                                o["last_batch_handle"], _seed(fname, o["seed"]))
    return NativeIter(h, "NDArrayIter")


_MNIST_OPTS = {
    "image": opt("./train-images-idx3-ubyte", (str, os.PathLike), "the IDX image file (raw or .gz)"),
    "label": opt("./train-labels-idx1-ubyte", (str, os.PathLike), "the IDX label file (raw or .gz)"),
    "batch_size": opt(128, int, "samples per batch"),
    "shuffle": opt(True, bool, "reshuffle at creation and at every reset"),
    "flat": opt(False, bool, "samples of shape (784,) instead of (1, 28, 28)"),
    "input_shape": opt(None, (tuple, list), "the per-sample shape (784 elements), overriding flat"),
    "seed": opt(0, int, "seed of the shuffling; None = from mx.random.seed"),
    "data_name": opt("data", str, "name of the data input"),
    "label_name": opt("softmax_label", str, "name of the label input"),
    **_PART_OPTS,
    "silent": opt(False, bool, "do not log the loading at INFO level"),
}


@documented(_MNIST_OPTS)
def mnist_iter(opts=None, /, **kw) -> NativeIter:
    """MNIST batches from IDX files, as MXNet's MNISTIter: pixels scaled by 1/255 to [0, 1],
    labels as float32 digits of shape ``(batch,)``; the last batch is padded like
    ``ndarray_iter``'s (``pad``), and each batch's ``index`` holds the image numbers.

    %OPTIONS%

    Returns:
        The iterator. A missing file raises FileNotFoundError; a file that is not IDX
        (wrong magic number: 2051 for images, 2049 for labels) or whose sizes do not match
        raises MXFNError naming the file.

    Example:
        >>> d = os.path.join(os.path.dirname(__file__), "..", "..", "data", "mnist")
        >>> it = mnist_iter(image=os.path.join(d, "t10k-images-idx3-ubyte.gz"),
        ...                 label=os.path.join(d, "t10k-labels-idx1-ubyte.gz"), shuffle=False)
        >>> b = next(it)
        >>> b["data"][0].shape, b["label"][0].asnumpy()[:3].tolist()
        ((128, 1, 28, 28), [7.0, 2.0, 1.0])
    """
    fname = "io.mnist_iter"
    o = parse_opts(fname, _MNIST_OPTS, opts, kw)
    shape = None if o["input_shape"] is None else list(_shape(fname, "input_shape", o["input_shape"]))
    h = _native.io_mnist_iter(os.fspath(o["image"]), os.fspath(o["label"]),
                              _int(fname, "batch_size", o["batch_size"]), o["shuffle"], o["flat"], shape,
                              _seed(fname, o["seed"]), o["data_name"], o["label_name"],
                              *_parts(fname, o))
    it = NativeIter(h, "MNISTIter")
    if not o["silent"]:
        _LOG.info("MNISTIter: load %s images, shuffle=%s, shape=%s", os.fspath(o["image"]), o["shuffle"],
                  it._pd[0]["shape"])
    return it


_CSV_OPTS = {
    "data_csv": opt(REQUIRED, (str, os.PathLike), "the data file: one sample per line, comma-separated"),
    "data_shape": opt(REQUIRED, (tuple, list), "the per-sample shape of the data"),
    "label_csv": opt(None, (str, os.PathLike), 'the label file; None (or "NULL") = labels of 0'),
    "label_shape": opt((1,), (tuple, list), "the per-sample shape of the label; (1,) is batched as (batch,)"),
    "batch_size": opt(REQUIRED, int, "samples per batch"),
    "round_batch": opt(True, bool, "complete the last batch from the start of the data; the next "
                                   "epoch then starts after those rows (MXNet's rule)"),
    "dtype": opt("float32", None, 'element type: "float32", "int32", "int64", …'),
    "data_name": opt("data", str, "name of the data input"),
    "label_name": opt("softmax_label", str, "name of the label input"),
    **_PART_OPTS,
}


@documented(_CSV_OPTS)
def csv_iter(opts=None, /, **kw) -> NativeIter:
    """Batches from CSV files of numbers, as MXNet's CSVIter (no shuffling).

    With ``round_batch`` the last batch is completed with the first rows and reports their
    count as ``pad``; the next epoch starts after those rows. Without it the missing rows of
    the last batch repeat the previous batch's rows at those positions (MXNet's buffer
    reuse) and ``pad`` counts them.

    %OPTIONS%

    Returns:
        The iterator; a malformed line raises MXFNError naming the file and line.

    Example:
        >>> import tempfile
        >>> f = os.path.join(tempfile.mkdtemp(), "d.csv")
        >>> _ = open(f, "w").write("1,2\\n3,4\\n5,6\\n")
        >>> [(b["data"][0].asnumpy().tolist(), b["pad"]) for b in csv_iter(data_csv=f, data_shape=(2,), batch_size=2)]
        [([[1.0, 2.0], [3.0, 4.0]], 0), ([[5.0, 6.0], [1.0, 2.0]], 1)]
    """
    fname = "io.csv_iter"
    o = parse_opts(fname, _CSV_OPTS, opts, kw)
    label = o["label_csv"]
    label = None if label is None or label == "NULL" else os.fspath(label)
    h = _native.io_csv_iter(os.fspath(o["data_csv"]), list(_shape(fname, "data_shape", o["data_shape"])), label,
                            list(_shape(fname, "label_shape", o["label_shape"])),
                            _int(fname, "batch_size", o["batch_size"]), o["round_batch"],
                            dtype_name(o["dtype"], fname), o["data_name"], o["label_name"],
                            *_parts(fname, o))
    return NativeIter(h, "CSVIter")


_BUCKET_OPTS = {
    "buckets": opt(None, (list, tuple), "bucket lengths; None = every sentence length that at least "
                                        "batch_size sentences have"),
    "invalid_label": opt(-1, (int, float), "pads sentences and ends every label row"),
    "data_name": opt("data", str, "name of the data input"),
    "label_name": opt("softmax_label", str, "name of the label input"),
    "dtype": opt("float32", None, "element type of data and label"),
    "layout": opt("NT", str, '"NT" (batch, time) or "TN" (time, batch)'),
    "seed": opt(None, int, "seed of the shuffling; None = from mx.random.seed"),
}


@documented(_BUCKET_OPTS)
def bucket_sentence_iter(sentences, batch_size, opts=None, /, **kw) -> NativeIter:
    """Bucketed batches of token-id sentences for language models, as MXNet's
    BucketSentenceIter.

    Each sentence is padded with ``invalid_label`` to the smallest bucket that fits it
    (longer ones are discarded, with a warning); buckets that receive no sentence are
    dropped. A batch holds ``batch_size`` sentences of one bucket; its label is the data
    shifted one step left, ended by ``invalid_label``. Batches carry ``bucket_key`` (the
    bucket length) and their own ``provide_data`` / ``provide_label``; the iterator's descs
    and ``default_bucket_key`` are the largest bucket's. Every reset (creation included)
    shuffles the batch order and each bucket's sentences; a bucket's rows that do not fill
    a batch are left out of that epoch.

    %OPTIONS%

    Returns:
        The iterator.

    Example:
        >>> sents = [[1, 2], [3, 4], [5, 6, 7], [8, 9]]
        >>> it = bucket_sentence_iter(sents, 2, buckets=[2, 3], seed=0)
        >>> it.default_bucket_key, [(b["bucket_key"], b["data"][0].shape) for b in it]
        (3, [(2, (2, 2))])
    """
    fname = "io.bucket_sentence_iter"
    o = parse_opts(fname, _BUCKET_OPTS, opts, kw)
    bs = _int(fname, "batch_size", batch_size)
    sents = []
    for i, s in enumerate(sentences):
        try:
            sents.append([float(t) for t in s])
        except (TypeError, ValueError):
            raise MXFNError(f"{fname}: sentence {i} must be a sequence of token ids, got {s!r}") from None
    buckets = [] if o["buckets"] is None else [_int(fname, "buckets", b) for b in o["buckets"]]
    h, discarded, _ = _native.io_bucket_sentence_iter(sents, bs, buckets, float(o["invalid_label"]), o["data_name"],
                                                      o["label_name"], dtype_name(o["dtype"], fname), o["layout"],
                                                      _seed(fname, o["seed"]))
    if discarded:
        _LOG.warning("%s: discarded %d sentences longer than the largest bucket", fname, discarded)
    return NativeIter(h, "BucketSentenceIter")


# -- wrappers -------------------------------------------------------------------------------

class ResizeIter(DataIter):
    """An iterator resized to ``size`` batches per epoch (MXNet's ResizeIter)."""

    def __init__(self, it, size, reset_internal):
        self.it = it
        self.size = size
        self.reset_internal = reset_internal
        self.cur = 0
        self.batch_size = it.batch_size
        self.default_bucket_key = getattr(it, "default_bucket_key", None)

    @property
    def provide_data(self):
        return provide_data(self.it)

    @property
    def provide_label(self):
        return provide_label(self.it)

    def reset(self):
        self.cur = 0
        if self.reset_internal:
            reset(self.it)
        return self

    def has_next(self) -> bool:
        return self.cur < self.size

    def next(self):
        if self.cur >= self.size:
            raise StopIteration
        try:
            b = self.it.next()
        except StopIteration:
            reset(self.it)
            b = self.it.next()
        self.cur += 1
        return b


_RESIZE_OPTS = {"reset_internal": opt(True, bool, "reset the wrapped iterator at every reset")}


@documented(_RESIZE_OPTS)
def resize_iter(it, size, opts=None, /, **kw) -> ResizeIter:
    """``it`` resized to ``size`` batches per epoch: it restarts the wrapped iterator when that
    one ends early and stops after ``size`` batches.

    %OPTIONS%

    Returns:
        A new iterator over ``it``.

    Example:
        >>> it = resize_iter(ndarray_iter(np.ones((4, 2)), batch_size=2), 5)
        >>> len(list(it))
        5
    """
    fname = "io.resize_iter"
    o = parse_opts(fname, _RESIZE_OPTS, opts, kw)
    return ResizeIter(it, _int(fname, "size", size), o["reset_internal"])


class _Fetcher:
    """The state shared with a prefetching thread. The thread references this object and
    the wrapped iterators only, so the PrefetchingIter can be collected (which stops it)."""

    def __init__(self, iters):
        self.iters = iters
        self.cond = threading.Condition()
        self.wanted = False
        self.closed = False
        self.result = None  # ("ok", batches) | ("stop", None) | ("error", exception)
        self.thread = threading.Thread(target=self._run, name="mxfn-prefetch", daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            with self.cond:
                while not (self.wanted or self.closed):
                    self.cond.wait()
                if self.closed:
                    return
                self.wanted = False
            res = self._fetch()
            with self.cond:
                self.result = res
                self.cond.notify_all()

    def _fetch(self):
        try:
            batches = []
            for it in self.iters:
                try:
                    batches.append(it.next())
                except StopIteration:
                    batches.append(None)
            if all(b is None for b in batches):
                return ("stop", None)
            if any(b is None for b in batches):
                return ("error", MXFNError("io.prefetching_iter: the wrapped iterators have different "
                                           "numbers of batches"))
            return ("ok", batches)
        except Exception as e:  # handed to the consumer, raised there
            return ("error", e)

    def request(self):
        with self.cond:
            self.result = None
            self.wanted = True
            self.cond.notify_all()

    def wait(self):
        with self.cond:
            while True:
                if self.closed:
                    return ("error", MXFNError("io.prefetching_iter: the iterator is closed"))
                if self.result is not None:
                    return self.result
                if not self.thread.is_alive():
                    return ("error", MXFNError("io.prefetching_iter: the prefetching thread has stopped"))
                self.cond.wait(0.2)

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=10)


class PrefetchingIter(DataIter):
    """Batches of one or more iterators, fetched one step ahead on a background thread
    (MXNet's PrefetchingIter). Several iterators are merged: their data and labels are
    concatenated, in order."""

    def __init__(self, iters, rename_data, rename_label):
        self.iters = iters
        self._rename = (rename_data, rename_label)
        self._pd = self._descs(0, [provide_data(i) for i in iters])
        self._pl = self._descs(1, [provide_label(i) for i in iters])
        self.batch_size = iters[0].batch_size
        self.default_bucket_key = getattr(iters[0], "default_bucket_key", None)
        self._f = _Fetcher(iters)
        self._f.request()
        self._close = weakref.finalize(self, self._f.close)

    def _descs(self, which, per_iter):
        renames = self._rename[which]
        out = []
        for i, ds in enumerate(per_iter):
            r = renames[i] if renames else {}
            for d in map(as_data_desc, ds):
                out.append(DataDesc({**d, "name": r[d["name"]]}) if d["name"] in r else d)
        return out

    @property
    def provide_data(self):
        return list(self._pd)

    @property
    def provide_label(self):
        return list(self._pl)

    def next(self) -> DataBatch:
        kind, value = self._f.wait()
        if kind == "stop":
            raise StopIteration
        self._f.request()
        if kind == "error":
            raise value
        first = value[0]
        pads = {batch_pad(b) for b in value}
        if len(pads) > 1:
            raise MXFNError(f"io.prefetching_iter: the wrapped iterators' batches have different pads {sorted(pads)}")
        own = [_field(b, "provide_data") for b in value]
        own_l = [_field(b, "provide_label") for b in value]
        return DataBatch(data=[x for b in value for x in batch_data(b)],
                         label=[x for b in value for x in (batch_label(b) or [])],
                         pad=batch_pad(first), index=batch_index(first), bucket_key=batch_bucket_key(first),
                         provide_data=self._descs(0, own) if all(own) else list(self._pd),
                         provide_label=self._descs(1, own_l) if all(own_l) else list(self._pl))

    def has_next(self) -> bool:
        kind, value = self._f.wait()
        if kind == "error":
            raise value
        return kind == "ok"

    def reset(self):
        self._f.wait()  # the fetch under way finishes first
        for it in self.iters:
            reset(it)
        self._f.request()
        return self

    def close(self):
        """Stops the background thread (also done when the iterator is collected or at exit)."""
        self._close()
        return self


_PREFETCH_OPTS = {
    "rename_data": opt(None, list, "one map old name -> new name per iterator, for the data"),
    "rename_label": opt(None, list, "one map old name -> new name per iterator, for the labels"),
}


@documented(_PREFETCH_OPTS)
def prefetching_iter(it, opts=None, /, **kw) -> PrefetchingIter:
    """``it`` (or a list of iterators, merged) with the next batch fetched on a background
    thread while the current one is used. The batches are the wrapped iterator's; an error
    raised while fetching is raised by the ``next`` that would have returned that batch.
    The thread stops when the iterator is closed, collected, or the interpreter exits.

    %OPTIONS%

    Returns:
        A new iterator over ``it``.

    Example:
        >>> it = prefetching_iter(ndarray_iter(np.arange(6.0), batch_size=4))
        >>> [b["data"][0].asnumpy().tolist() for b in it]
        [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 0.0, 1.0]]
        >>> _ = it.close()
    """
    fname = "io.prefetching_iter"
    o = parse_opts(fname, _PREFETCH_OPTS, opts, kw)
    iters = list(it) if isinstance(it, (list, tuple)) else [it]
    if not iters:
        raise MXFNError(f"{fname}: give at least one iterator")
    for key in ("rename_data", "rename_label"):
        if o[key] is not None and len(o[key]) != len(iters):
            raise MXFNError(f'{fname}: "{key}" needs one map per iterator ({len(iters)}), got {len(o[key])}')
    return PrefetchingIter(iters, o["rename_data"], o["rename_label"])


# -- functions over iterators ---------------------------------------------------------------

def provide_data(it) -> list:
    """The descs (DataDesc) of the iterator's data inputs.

    Example:
        >>> provide_data(ndarray_iter({"x": np.zeros((4, 3))}, batch_size=2))
        [{'name': 'x', 'shape': (2, 3), 'dtype': 'float32', 'layout': 'NC'}]
    """
    return [as_data_desc(d) for d in it.provide_data]


def provide_label(it) -> list:
    """The descs (DataDesc) of the iterator's label inputs ([] without labels)."""
    return [as_data_desc(d) for d in (it.provide_label or [])]


def reset(it):
    """Starts the iterator's next epoch (reshuffling if it shuffles).

    Returns:
        ``it``.
    """
    it.reset()
    return it


def has_next(it) -> bool:
    """Whether ``next(it)`` would return a batch. When false, the epoch has ended as if
    ``next`` had raised StopIteration (roll-over samples are kept for the next epoch)."""
    if not hasattr(it, "has_next"):
        raise TypeError(f"io.has_next: {type(it).__name__} has no has_next method")
    return it.has_next()


def next(it):  # noqa: A001 - the SPEC's name
    """The iterator's next batch; raises StopIteration at the end of the epoch.

    Example:
        >>> it = ndarray_iter(np.zeros((3, 2)), batch_size=2)
        >>> next(it)["pad"], next(it)["pad"], has_next(it)
        (0, 1, False)
    """
    return it.next()


def do_batches(it, f):
    """Resets ``it`` and calls ``f(batch)`` on every batch of one epoch.

    Returns:
        ``it``.

    Example:
        >>> seen = []
        >>> _ = do_batches(ndarray_iter(np.zeros((5, 1)), batch_size=2), lambda b: seen.append(b["pad"]))
        >>> seen
        [0, 0, 1]
    """
    reset(it)
    while it.has_next():
        f(it.next())
    return it


def for_batches(it, f) -> list:
    """Resets ``it`` and returns ``[f(batch) for each batch of one epoch]``.

    Example:
        >>> for_batches(ndarray_iter(np.zeros((5, 1)), batch_size=2), lambda b: b["data"][0].shape)
        [(2, 1), (2, 1), (2, 1)]
    """
    reset(it)
    out = []
    while it.has_next():
        out.append(f(it.next()))
    return out


def reduce_batches(it, f, init=0):
    """Resets ``it`` and folds one epoch: ``acc = f(acc, batch)`` from ``init``.

    Example:
        >>> reduce_batches(ndarray_iter(np.zeros((5, 1)), batch_size=2), lambda n, b: n + 2 - b["pad"])
        5
    """
    reset(it)
    acc = init
    while it.has_next():
        acc = f(acc, it.next())
    return acc
