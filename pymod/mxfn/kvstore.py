"""mx.kvstore: a single-process key-value store for parameters and gradients (MXNet's KVStore).

``"local"`` and ``"device"`` behave the same in mxfn (all devices are logical CPU devices):
values pushed for one key from several devices are summed; with an optimizer set, a push
applies the optimizer to the stored weight (MXNet's ``update_on_kvstore``), otherwise the
sum replaces the stored value. ``pull`` writes the stored values into the ``outs`` arrays, as
MXNet does, and also returns them.
"""

from __future__ import annotations

import threading

from . import optimizer
from ._errors import MXFNError
from .ndarray import NDArray, as_ndarray

__all__ = ["KVStore", "create", "init", "push", "pull", "set_optimizer", "kv_type", "rank",
           "num_workers", "barrier", "keys"]

KV_TYPES = ("local", "device")


class KVStore:
    """The store: its ``type``, the stored values by key and the optional optimizer/updater."""

    def __init__(self, kind):
        self.type = kind
        self.store = {}
        self.key_index = {}
        self.updater = None
        self.lock = threading.Lock()

    def __repr__(self):
        return f"<KVStore {self.type} keys={list(self.store)}>"


def create(name="local") -> KVStore:
    """A new key-value store: ``"local"`` or ``"device"`` (anything else raises MXFNError;
    distributed stores are not supported).

    Example:
        >>> kv_type(create("device")), rank(create()), num_workers(create())
        ('device', 0, 1)
    """
    if not isinstance(name, str):
        raise TypeError(f"kvstore.create: name must be a str, got {type(name).__name__} {name!r}")
    if name not in KV_TYPES:
        raise MXFNError(f'kvstore.create: unsupported kvstore type "{name}"; mxfn supports "local" and "device"')
    return KVStore(name)


def _kv(fname, kv) -> KVStore:
    if not isinstance(kv, KVStore):
        raise TypeError(f"{fname}: expected a KVStore (from kvstore.create), got {type(kv).__name__}")
    return kv


def _is_key(k):
    return isinstance(k, (str, int)) and not isinstance(k, bool)


def _key_list(fname, keys):
    """(list of keys, whether a single key was given)."""
    if _is_key(keys):
        return [keys], True
    if isinstance(keys, (list, tuple)) and keys and all(_is_key(k) for k in keys):
        return list(keys), False
    raise TypeError(f"{fname}: keys must be an int, a str, or a non-empty list of them, got {keys!r}")


def _per_key(fname, what, keys, single, values):
    """Values grouped by key: for a single key, ``values`` is an array or a list of arrays
    (one per device); for several keys, a list with one such entry per key."""
    if single:
        return [values]
    if not isinstance(values, (list, tuple)) or len(values) != len(keys):
        n = len(values) if isinstance(values, (list, tuple)) else 1
        raise MXFNError(f"{fname}: {what} needs one entry per key ({len(keys)} keys), got {n}")
    return list(values)


def _arrays(fname, key, v):
    vs = v if isinstance(v, (list, tuple)) else [v]
    if not vs:
        raise MXFNError(f"{fname}: no value given for key {key!r}")
    return [as_ndarray(x, fname) for x in vs]


def init(kv, keys, values) -> KVStore:
    """Stores the initial value of each key (for a list of device values, the first one).
    Initialising a key twice raises MXFNError.

    Returns:
        ``kv``.

    Example:
        >>> import mxfn as mx
        >>> kv = init(create(), "w", mx.nd.ones(2))
        >>> pull(kv, "w").asnumpy()
        array([1., 1.], dtype=float32)
    """
    fname = "kvstore.init"
    _kv(fname, kv)
    ks, single = _key_list(fname, keys)
    vals = _per_key(fname, "values", ks, single, values)
    with kv.lock:
        for k, v in zip(ks, vals):
            if k in kv.store:
                raise MXFNError(f"{fname}: key {k!r} is already initialised")
            kv.store[k] = _arrays(fname, k, v)[0].copy()
            kv.key_index[k] = k if isinstance(k, int) else len(kv.key_index)
    return kv


def push(kv, keys, values, priority=0) -> KVStore:
    """Pushes values: the values of one key (one per device) are summed; with an optimizer
    set the sum is applied as a gradient to the stored weight, else it replaces the stored
    value. ``priority`` is accepted for MXNet compatibility (pushes run in call order).

    Returns:
        ``kv``.

    Example:
        >>> import mxfn as mx
        >>> kv = init(create(), [3], [mx.nd.zeros(2)])
        >>> _ = push(kv, 3, [mx.nd.ones(2), mx.nd.ones(2) * 2])
        >>> pull(kv, 3).asnumpy()
        array([3., 3.], dtype=float32)
    """
    fname = "kvstore.push"
    _kv(fname, kv)
    ks, single = _key_list(fname, keys)
    vals = _per_key(fname, "values", ks, single, values)
    with kv.lock:
        for k, v in zip(ks, vals):
            if k not in kv.store:
                raise MXFNError(f"{fname}: key {k!r} is not initialised; call kvstore.init first")
            arrs = _arrays(fname, k, v)
            total = arrs[0]
            for a in arrs[1:]:
                total = total + a.as_in_context(total.context)
            stored = kv.store[k]
            if total.shape != stored.shape:
                raise MXFNError(f"{fname}: key {k!r} holds shape {stored.shape}, pushed {total.shape}")
            if kv.updater is not None:
                kv.store[k] = kv.updater(kv.key_index[k], total, stored.copy())
            else:
                kv.store[k] = total.copy() if len(arrs) == 1 else total
    return kv


def _fill(fname, key, out, value):
    """Writes ``value`` into the NDArray ``out`` (MXNet's pull semantics: the array is
    updated in place, in its own dtype and on its own device) and returns ``out``."""
    if not isinstance(out, NDArray):
        raise TypeError(f"{fname}: outs for key {key!r} must be NDArrays, got {type(out).__name__}")
    if out.shape != value.shape:
        raise MXFNError(f"{fname}: outs for key {key!r} has shape {out.shape}, the stored value {value.shape}")
    v = value.as_in_context(out.context)
    if v.dtype != out.dtype:
        v = v.astype(out.dtype)
    out._h = v.copy()._h
    return out


def pull(kv, keys, outs=None, priority=0):
    """Pulls the stored values of ``keys`` into ``outs``, as MXNet does, and returns them.

    ``outs`` holds, per key, an NDArray or a list of NDArrays (one per device): each is
    overwritten with the stored value (in its own dtype, on its own device; shapes must
    match). ``outs=None`` (an mxfn convenience) only returns copies.

    Returns:
        For a single key its value (the ``outs`` array or list, filled; a copy when ``outs`` is
        None); for a list of keys, a list with one such entry per key.

    Example:
        >>> import mxfn as mx
        >>> kv = init(create(), ["a", "b"], [mx.nd.ones(1), mx.nd.zeros(1)])
        >>> [float(x.asnumpy()[0]) for x in pull(kv, ["a", "b"])]
        [1.0, 0.0]
        >>> outs = [mx.nd.zeros(1), mx.nd.zeros(1)]
        >>> _ = pull(kv, "a", outs)
        >>> [float(o.asnumpy()[0]) for o in outs]
        [1.0, 1.0]
    """
    fname = "kvstore.pull"
    _kv(fname, kv)
    ks, single = _key_list(fname, keys)
    outs_by_key = [None] * len(ks) if outs is None else _per_key(fname, "outs", ks, single, outs)
    res = []
    with kv.lock:
        for k, o in zip(ks, outs_by_key):
            if k not in kv.store:
                raise MXFNError(f"{fname}: key {k!r} is not initialised; call kvstore.init first")
            v = kv.store[k]
            if o is None:
                res.append(v.copy())
            elif isinstance(o, (list, tuple)):
                res.append([_fill(fname, k, x, v) for x in o])
            else:
                res.append(_fill(fname, k, o, v))
    return res[0] if single else res


def set_optimizer(kv, opt) -> KVStore:
    """Makes ``push`` apply ``opt`` to the stored weights (MXNet's ``update_on_kvstore``);
    the updater's index of an int key is the key, of a str key its order of ``init``.

    Returns:
        ``kv``.

    Example:
        >>> import mxfn as mx
        >>> kv = set_optimizer(init(create(), 0, mx.nd.ones(2)), mx.optimizer.sgd(learning_rate=0.5))
        >>> pull(kv, 0, None) is not None and pull(push(kv, 0, mx.nd.ones(2)), 0).asnumpy()
        array([0.5, 0.5], dtype=float32)
    """
    _kv("kvstore.set_optimizer", kv)
    kv.updater = optimizer.get_updater(opt)
    return kv


def kv_type(kv) -> str:
    """``"local"`` or ``"device"``."""
    return _kv("kvstore.kv_type", kv).type


def rank(kv) -> int:
    """This worker's rank: always 0 (single process)."""
    _kv("kvstore.rank", kv)
    return 0


def num_workers(kv) -> int:
    """The number of workers: always 1 (single process)."""
    _kv("kvstore.num_workers", kv)
    return 1


def barrier(kv) -> KVStore:
    """A no-op with one worker. Returns ``kv``."""
    return _kv("kvstore.barrier", kv)


def _hold(kv, pairs) -> KVStore:
    """Stores ``(key, array)`` pairs as they are, initialising new keys (how a Module keeps a
    kvstore given to ``init_optimizer`` holding its current parameters)."""
    with kv.lock:
        for k, v in pairs:
            kv.key_index.setdefault(k, len(kv.key_index))
            kv.store[k] = v
    return kv


def keys(kv) -> list:
    """The initialised keys, in ``init`` order."""
    return list(_kv("kvstore.keys", kv).store)
