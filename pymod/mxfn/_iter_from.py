"""``mx.io.iter_from``: a DataIter over any Python iterable of batches (a list, a generator,
a zero-argument callable returning one, a torch-style DataLoader). ``mx.io`` re-exports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ._batch import DataBatch, DataIter, data_desc
from ._errors import MXFNError
from ._opts import documented, normalize_key, opt, parse_opts
from .ndarray import NDArray, array, dtype_name

__all__ = ["IterFrom", "iter_from"]

_ITER_FROM_OPTS = {
    "data_names": opt(["data"], (list, tuple, str), "names of the data arrays of a batch, in order (a dict "
                                                    "names its arrays itself)"),
    "label_names": opt(["softmax_label"], (list, tuple, str, type(None)),
                       "names of the label arrays, in order; None or [] = labels are dropped"),
    "last_batch_handle": opt("pad", str, 'a batch smaller than the first: "pad" (filled up from the '
                                         'epoch\'s first samples, pad = their count) or "discard"'),
}


def _name_list(fname, key, v):
    """An option's names as a list of str (a str is one name; None is [])."""
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    bad = [x for x in v if not isinstance(x, str)]
    if bad:
        raise TypeError(f'{fname}: option "{key}" expects a list of str, got {type(bad[0]).__name__} '
                        f'{bad[0]!r} in {list(v)!r}')
    if len(set(v)) != len(v):
        raise MXFNError(f'{fname}: option "{key}" names an input twice: {list(v)!r}')
    return list(v)


class IterFrom(DataIter):
    """Batches read from a Python iterable, a re-iterable or a zero-argument callable
    returning an iterable (``iter_from``). ``kind`` is ``"callable"``, ``"iterable"`` (re-iterated
    at every reset) or ``"iterator"`` (one pass only)."""

    _FNAME = "io.iter_from"

    def __init__(self, source, kind, first_iter, data_names, label_names, explicit, discard):
        self.source = source
        self.kind = kind
        self._data_names, self._label_names = data_names, label_names
        self._explicit = explicit  # {"data_names": bool, "label_names": bool}: given by the caller
        self._discard = discard
        self._sig = None  # ([(name, sample shape, dtype)] for data, the same for labels)
        self._start(first_iter if first_iter is not None else self._open())
        if not self._pull():
            raise MXFNError(f'{self._FNAME}: "source" is empty: it gave no batch (expected (data, label) '
                            f'batches, or data batches for predict)')

    # -- epochs ------------------------------------------------------------------------------

    def _start(self, it):
        self._it = it
        self._buf = None      # the next batch, read ahead (a DataBatch) or None
        self._done = False    # the source's iterator is exhausted
        self._nread = 0       # raw batches read from the source in this epoch
        self._consumed = 0    # batches returned by next in this epoch
        self._head = None     # the epoch's first full batch (data, label): rows to pad with

    def _open(self):
        if self.kind == "callable":
            got = self.source()
            if isinstance(got, (str, bytes, Mapping, np.ndarray, NDArray)) or not hasattr(got, "__iter__"):
                raise TypeError(f'{self._FNAME}: "source" is a callable, so it must return an iterable of '
                                f'batches; it returned {type(got).__name__}')
            return iter(got)
        return iter(self.source)

    def reset(self):
        """Starts the next epoch: calls a callable source again, re-iterates a re-iterable one.
        At the start of an epoch (nothing returned yet) it does nothing, so the batch read to
        learn the shapes is not lost. A one-shot iterator cannot restart: MXFNError."""
        if self._consumed == 0 and not self._done:
            return self
        if self.kind == "iterator":
            raise MXFNError(
                f'{self._FNAME}: "source" is a one-shot iterator (such as a generator) and {self._consumed} '
                f'batches of it have been used, so it cannot be reset for another epoch; pass a '
                f'zero-argument callable returning a fresh iterable instead (iter_from(lambda: '
                f'make_batches())), or a re-iterable such as a list or a DataLoader')
        self._start(self._open())
        return self

    # -- reading -----------------------------------------------------------------------------

    def has_next(self) -> bool:
        return self._pull()

    def next(self) -> DataBatch:
        if not self._pull():
            raise StopIteration
        b, self._buf = self._buf, None
        assert b is not None  # _pull filled the buffer
        self._consumed += 1
        return b

    def _pull(self) -> bool:
        """Reads ahead one batch into the buffer unless it holds one; False at the end."""
        while self._buf is None and not self._done:
            try:
                raw = self._it.__next__()
            except StopIteration:
                self._done = True
                break
            i = self._nread
            self._nread += 1
            self._buf = self._batch(raw, i)
        return self._buf is not None

    # -- one batch ---------------------------------------------------------------------------

    def _err(self, i, msg):
        return MXFNError(f'{self._FNAME}: "source" batch {i}: {msg}')

    def _named(self, part, key, i):
        """[(name, value)] of a batch's data or label part."""
        names = self._data_names if key == "data_names" else self._label_names
        what = "data" if key == "data_names" else "label"
        if isinstance(part, Mapping):
            keys = list(part)
            bad = [k for k in keys if not isinstance(k, str)]
            if bad:
                raise TypeError(f'{self._FNAME}: "source" batch {i}: the {what} names must be strings, '
                                f'got {bad[0]!r}')
            if self._explicit[key] and set(keys) != set(names):
                raise self._err(i, f'its {what} dict has the names {keys} but "{key}" is {names}')
            return list(part.items())
        values = list(part) if isinstance(part, (list, tuple)) else [part]
        if len(values) != len(names):
            raise self._err(i, f'it has {len(values)} {what} array(s) but "{key}" has {len(names)} '
                               f'name(s) {names}; give one name per array (or use dicts)')
        return list(zip(names, values))

    def _parts(self, raw, i):
        """(data, label) of a raw batch as lists of (name, value)."""
        if isinstance(raw, Mapping):  # one flat dict: the label names pick the labels
            keys = list(raw)
            bad = [k for k in keys if not isinstance(k, str)]
            if bad:
                raise TypeError(f'{self._FNAME}: "source" batch {i}: the names must be strings, got {bad[0]!r}')
            lab = [k for k in keys if k in self._label_names]
            dat = [k for k in keys if k not in self._label_names]
            if not dat:
                raise self._err(i, f'the dict has no data array, only labels {lab}')
            if self._explicit["data_names"] and set(dat) != set(self._data_names):
                raise self._err(i, f'the dict has the data names {dat} but "data_names" is {self._data_names}')
            return [(k, raw[k]) for k in dat], [(k, raw[k]) for k in lab]
        if isinstance(raw, (list, tuple)):
            if len(raw) == 2:
                data, label = raw
            elif len(raw) == 1:
                data, label = raw[0], None
            else:
                raise self._err(i, f'a {type(raw).__name__} of {len(raw)} items; expected (data, label), '
                                   f'(data,), a data array or a dict name -> array')
        else:
            data, label = raw, None
        if data is None:
            raise self._err(i, "its data is None")
        no_label = label is None or (isinstance(label, (list, tuple, Mapping)) and len(label) == 0)
        if no_label or not self._label_names:
            return self._named(data, "data_names", i), []
        return self._named(data, "data_names", i), self._named(label, "label_names", i)

    def _array(self, name, x, i):
        a: Any
        if isinstance(x, NDArray):
            a = x
        else:
            try:
                v = np.asarray(x)
            except Exception as e:  # ragged lists, tensors that refuse __array__, …
                raise self._err(i, f'"{name}" is not an array ({type(x).__name__}): {e}') from None
            if v.dtype.kind not in "biuf":
                raise self._err(i, f'"{name}" must hold numbers, got {type(x).__name__} of dtype {v.dtype}')
            a = array(v, dtype="float32") if v.ndim else v
        if a.ndim == 0:
            raise self._err(i, f'"{name}" is a scalar; arrays need a batch axis (axis 0)')
        return a

    def _match(self, got, sig, what, i):
        """``got`` ([(name, NDArray)]) ordered as the first batch's ``sig``, its shapes checked."""
        want = [n for n, _, _ in sig]
        have = dict(got)
        if len(have) != len(got) or set(have) != set(want):
            raise self._err(i, f"its {what} inputs are {[n for n, _ in got]} but the first batch's are {want}")
        out = []
        for name, shape, dt in sig:
            a = have[name]
            if tuple(a.shape[1:]) != shape or dtype_name(a.dtype) != dt:
                raise self._err(i, f'{what} "{name}" has shape {tuple(a.shape)} and dtype {dtype_name(a.dtype)}, '
                                   f'but the first batch gave per-sample shape {shape} and dtype {dt} '
                                   f'(provide_data / provide_label: {self._descs_text()})')
            out.append(a)
        return out

    def _descs_text(self):
        return [(d["name"], d["shape"]) for d in [*self._pd, *self._pl]]

    def _batch(self, raw, i) -> DataBatch | None:
        d, lab = self._parts(raw, i)
        d = [(n, self._array(n, x, i)) for n, x in d]
        lab = [(n, self._array(n, x, i)) for n, x in lab]
        sizes = {n: a.shape[0] for n, a in d + lab}
        if len(set(sizes.values())) > 1:
            raise self._err(i, f"its arrays have different numbers of samples (axis 0): {sizes}")
        n = list(sizes.values())[0]
        if n == 0:
            raise self._err(i, "it has no samples")
        if self._sig is None:  # the first batch: it fixes names, shapes, dtypes, batch size
            self._sig = tuple([(name, tuple(a.shape[1:]), dtype_name(a.dtype)) for name, a in part]
                              for part in (d, lab))
            self.batch_size = n
            self._pd = [data_desc(name, (n,) + shape, dtype=dt) for name, shape, dt in self._sig[0]]
            self._pl = [data_desc(name, (n,) + shape, dtype=dt) for name, shape, dt in self._sig[1]]
        if not lab and self._sig[1]:
            raise self._err(i, f"it has no label but the first batch had {[s[0] for s in self._sig[1]]}")
        if lab and not self._sig[1]:
            raise self._err(i, f"it has labels {[name for name, _ in lab]} but the first batch had none")
        data = self._match(d, self._sig[0], "data", i)
        label = self._match(lab, self._sig[1], "label", i)
        bs = self.batch_size
        if n > bs:
            raise self._err(i, f"it has {n} samples, more than the first batch's {bs}: the first batch "
                               f"sets the batch size, which fit binds once")
        pad = bs - n
        if pad and self._discard:
            return None
        if pad:
            rows = self._head if self._head is not None else (data, label)
            data = [_pad_rows(a, src, pad) for a, src in zip(data, rows[0])]
            label = [_pad_rows(a, src, pad) for a, src in zip(label, rows[1])]
        if self._head is None:
            self._head = (data, label)
        return DataBatch(data=data, label=label, pad=pad, index=None, bucket_key=None,
                         provide_data=list(self._pd), provide_label=list(self._pl))


def _pad_rows(a, src, k):
    """``a`` with ``k`` more rows taken from the start of ``src`` (cyclically)."""
    rows = np.asarray(src)
    fill = rows[np.arange(k) % rows.shape[0]]
    return array(np.concatenate([np.asarray(a), fill]), dtype=dtype_name(a.dtype))


@documented(_ITER_FROM_OPTS)
def iter_from(source, opts=None, /, **kw) -> IterFrom:
    """A DataIter over batches you already have — a list, a generator, a torch-style
    DataLoader — for ``fit``, ``score`` and ``predict``.

    ``source`` is one of:

    - a **zero-argument callable** returning an iterable of batches: called now and again at
      every ``reset`` (the way to use a generator for several epochs);
    - a **re-iterable** (a list, a tuple, a DataLoader: ``iter(source)`` gives a fresh
      iterator each time): iterated again at every ``reset``;
    - a **one-shot iterator** (a generator object): one epoch only; ``reset`` after batches
      have been used raises MXFNError telling you to pass a callable.

    A batch is ``(data, label)``, ``(data,)`` or just ``data`` (no label: for ``predict``);
    ``data`` and ``label`` are each an array (numpy, NDArray, or anything ``np.asarray``
    takes, such as a CPU torch tensor), a list/tuple of arrays (named by ``data_names`` /
    ``label_names`` in order) or a dict name -> array (its keys are the names; if you give
    ``data_names`` / ``label_names`` the keys must be those names). A batch may also be one
    flat dict: keys in ``label_names`` are labels, the others data. Axis 0 is the sample axis.
    As MXNet's ``mx.nd.array`` and NDArrayIter do, numpy arrays (and tensors, lists)
    become float32; NDArrays keep their dtype.

    The first batch is read at once (and kept: it is still the first batch returned) to
    give ``provide_data`` / ``provide_label``: its names, its shapes (its length is the
    ``batch_size``) and dtypes; every later batch must have the same inputs, per-sample
    shapes and dtypes, and at most ``batch_size`` samples (MXFNError naming ``source`` and
    the batch number, counted from 0 in the epoch). A smaller batch — typically a
    DataLoader's last — is padded up to ``batch_size`` with the epoch's first samples and
    reports their count as ``pad``, as MXNet's NDArrayIter pads its last batch; ``score``
    and ``predict`` leave padded samples out (MXNet's ``pad`` contract), while ``fit``
    trains on the full batch as MXNet does. ``last_batch_handle="discard"`` drops such
    batches instead. Batches are DataBatch values with ``index=None``.

    %OPTIONS%

    Returns:
        The iterator. An empty source raises MXFNError naming ``source``; a source that is
        not iterable nor callable (or is a string, array or DataIter) raises TypeError.

    Example:
        >>> import mxfn as mx
        >>> from mxfn.io import provide_data, provide_label, reset
        >>> x = np.arange(10.0).reshape(5, 2)
        >>> y = np.array([0, 1, 0, 1, 0])
        >>> it = iter_from([(x[i:i + 2], y[i:i + 2]) for i in range(0, 5, 2)])
        >>> provide_data(it)
        [{'name': 'data', 'shape': (2, 2), 'dtype': 'float32', 'layout': 'NC'}]
        >>> provide_label(it)
        [{'name': 'softmax_label', 'shape': (2,), 'dtype': 'float32', 'layout': 'N'}]
        >>> [(b["data"][0].asnumpy().tolist(), b["pad"]) for b in it][-1]
        ([[8.0, 9.0], [0.0, 1.0]], 1)
        >>> gen = lambda: ({"x": x[i:i + 3]} for i in range(0, 5, 3))   # label-less, for predict
        >>> it = iter_from(gen)
        >>> [b["pad"] for b in reset(it)], [b["pad"] for b in reset(it)], provide_label(it)
        ([0, 1], [0, 1], [])
        >>> net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("x"), num_hidden=2), name="softmax")
        >>> mod = mx.module.module(net, data_names=["x"])
        >>> mod = mx.module.fit(mod, iter_from(lambda: ((x[i:i + 3], y[i:i + 3]) for i in range(0, 5, 3)),
        ...                                    data_names=["x"]), num_epoch=2)
        >>> [o.shape for o in mx.module.predict(mod, eval_data=it)]
        [(5, 2)]
    """
    fname = IterFrom._FNAME
    o = parse_opts(fname, _ITER_FROM_OPTS, opts, kw)
    given = {normalize_key(k) for src in (opts or {}, kw) for k in src}
    explicit = {k: k in given for k in ("data_names", "label_names")}
    data_names = _name_list(fname, "data_names", o["data_names"])
    label_names = _name_list(fname, "label_names", o["label_names"])
    if not data_names:
        raise MXFNError(f'{fname}: option "data_names" must name at least one input, got []')
    both = [n for n in data_names if n in label_names]
    if both:
        raise MXFNError(f'{fname}: {both} are in both "data_names" and "label_names"')
    if o["last_batch_handle"] not in ("pad", "discard"):
        raise MXFNError(f'{fname}: option "last_batch_handle" must be "pad" or "discard", got '
                        f'{o["last_batch_handle"]!r} (a stream cannot roll over)')
    if isinstance(source, (str, bytes, Mapping, np.ndarray, NDArray, DataIter)):
        hint = ("; for arrays use io.ndarray_iter" if isinstance(source, (np.ndarray, NDArray))
                else "; it is already a DataIter" if isinstance(source, DataIter) else "")
        raise TypeError(f'{fname}: "source" must be an iterable of batches or a callable returning one, '
                        f'got {type(source).__name__}{hint}')
    if hasattr(source, "__iter__"):
        first = iter(source)
        kind = "iterator" if first is source else "iterable"
    elif callable(source):
        kind, first = "callable", None
    else:
        raise TypeError(f'{fname}: "source" must be an iterable of batches or a zero-argument callable '
                        f'returning one, got {type(source).__name__}')
    return IterFrom(source, kind, first, data_names, label_names, explicit, o["last_batch_handle"] == "discard")
