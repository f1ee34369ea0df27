"""mx.kvstore: a key-value store for parameters and gradients (MXNet's KVStore).

``"local"`` and ``"device"`` behave the same in mxfn (all devices are logical CPU devices):
values pushed for one key from several devices are summed; with an optimizer set, a push
applies the optimizer to the stored weight (MXNet's ``update_on_kvstore``), otherwise the
sum replaces the stored value. ``pull`` writes the stored values into the ``outs`` arrays, as
MXNet does, and also returns them.

``"dist_sync"`` (also ``"dist_device_sync"``, and ``"horovod"``) is the same store shared by
the workers of a program started with ``mpiexec -n N python train.py`` (SPEC §9.2, through
mpi4py): ``rank``, ``num_workers`` and ``barrier`` are MPI's; ``init`` checks that every worker
initialises the same keys and shapes and stores rank 0's values; ``push`` sums over devices
and workers (float32 in rank order, so every worker stores the same bits). Outside mpiexec it
is a single worker and needs no MPI. ``"dist_async"`` is refused: there is no parameter
server to let workers run ahead.
"""

from __future__ import annotations

import threading

import numpy as np

from . import _dist, optimizer
from ._errors import MXFNError
from .ndarray import NDArray, array, as_ndarray

__all__ = ["KVStore", "create", "init", "push", "pull", "set_optimizer", "kv_type", "rank",
           "num_workers", "barrier", "keys", "is_dist"]

KV_TYPES = ("local", "device")
DIST_TYPES = ("dist_sync", "dist_device_sync", "dist_sync_device", "horovod")


class KVStore:
    """The store: its ``type``, the stored values by key, the optional optimizer/updater and,
    for a distributed store of several workers, the collective (``_dist.MPICollective``)."""

    def __init__(self, kind, dist=None):
        self.type = kind
        self.store = {}
        self.key_index = {}
        self.updater = None
        self.lock = threading.Lock()
        self.dist = dist

    def __repr__(self):
        return f"<KVStore {self.type} keys={list(self.store)}>"


def create(name="local") -> KVStore:
    """A new key-value store: ``"local"``, ``"device"``, or a synchronous distributed store
    ``"dist_sync"`` / ``"dist_device_sync"`` / ``"horovod"`` (the workers of ``mpiexec``;
    one worker outside it). ``"dist_async"`` and unknown names raise MXFNError.

    Example:
        >>> kv_type(create("device")), rank(create()), num_workers(create())
        ('device', 0, 1)
        >>> num_workers(create("dist_sync"))  # not started by mpiexec: one worker
        1
    """
    if not isinstance(name, str):
        raise TypeError(f"kvstore.create: name must be a str, got {type(name).__name__} {name!r}")
    if name in DIST_TYPES:
        return KVStore(name, _dist.world("kvstore.create"))
    if name.startswith("dist") and "async" in name:
        raise MXFNError(f'kvstore.create: "{name}" is not supported: mxfn trains data-parallel with '
                        f"synchronous MPI allreduce and has no parameter server that would let "
                        f'workers run ahead of each other; use "dist_sync"')
    if name not in KV_TYPES:
        raise MXFNError(f'kvstore.create: unsupported kvstore type "{name}"; mxfn supports "local", '
                        f'"device", "dist_sync", "dist_device_sync" and "horovod"')
    return KVStore(name)


def is_dist(kv) -> bool:
    """Whether ``kv`` is a distributed store (a value, or a name of one)."""
    name = kv.type if isinstance(kv, KVStore) else kv
    return isinstance(name, str) and name in DIST_TYPES


def _collective(kv):
    """The store's collective when it joins several workers, else None."""
    return kv.dist if isinstance(kv, KVStore) and kv.dist is not None and kv.dist.size > 1 else None


def _dist_sum(dist, total):
    """``total`` (an NDArray) summed over the workers: float32 through the collective (fixed
    order), other dtypes gathered and summed in rank order."""
    a = np.ascontiguousarray(total.asnumpy())
    if a.dtype == np.float32:
        a = a.copy()
        dist.allreduce_sum(a.reshape(-1))
        out = a
    else:
        parts = dist.allgather(a)
        out = parts[0].copy()
        for x in parts[1:]:
            out = out + x
    return array(out, dtype=total.dtype).as_in_context(total.context)


def _dist_check_keys(fname, dist, ks, arrays):
    """Every worker must initialise the same keys with the same shapes and dtypes."""
    mine = [(repr(k), tuple(a.shape), str(a.dtype)) for k, a in zip(ks, arrays)]
    every = dist.allgather(mine)
    for r, theirs in enumerate(every[1:], start=1):
        if theirs == every[0]:
            continue
        ours = dict((k, (s, d)) for k, s, d in every[0])
        other = dict((k, (s, d)) for k, s, d in theirs)
        for k, (shape, dt) in ours.items():
            if k not in other:
                raise MXFNError(f"{fname}: key {k} is initialised on rank 0 but not on rank {r}; "
                                f"every worker must init the same keys")
            if other[k] != (shape, dt):
                raise MXFNError(f"{fname}: key {k} across workers: expected shape {shape} {dt} "
                                f"(as on rank 0), got shape {other[k][0]} {other[k][1]} on rank {r}")
        extra = next((k for k in other if k not in ours), None)
        raise MXFNError(f"{fname}: key {extra} is initialised on rank {r} but not on rank 0; "
                        f"every worker must init the same keys in the same order"
                        if extra is not None else
                        f"{fname}: keys across workers: rank {r} initialises them in another order "
                        f"than rank 0")


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
    firsts = [_arrays(fname, k, v)[0] for k, v in zip(ks, vals)]
    dist = _collective(kv)
    if dist is not None:
        # Every worker takes rank 0's values (MXNet's dist init), after checking the keys.
        _dist_check_keys(fname, dist, ks, firsts)
        firsts = [_dist_broadcast(dist, a) for a in firsts]
    with kv.lock:
        for k, first in zip(ks, firsts):
            if k in kv.store:
                raise MXFNError(f"{fname}: key {k!r} is already initialised")
            kv.store[k] = first.copy()
            kv.key_index[k] = k if isinstance(k, int) else len(kv.key_index)
    return kv


def _dist_broadcast(dist, a):
    """Rank 0's value of ``a`` on every worker."""
    x = np.ascontiguousarray(a.asnumpy())
    if x.dtype == np.float32:
        x = x.copy()
        dist.broadcast(x.reshape(-1), 0)
    else:
        x = dist.allgather(x)[0]
    return array(x, dtype=a.dtype).as_in_context(a.context)


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
    dist = _collective(kv)
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
            if dist is not None:
                total = _dist_sum(dist, total)
                arrs = [total, total]  # a new array: no copy below
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
    """The name the store was created with (``"local"``, ``"device"``, ``"dist_sync"``…)."""
    return _kv("kvstore.kv_type", kv).type


def rank(kv) -> int:
    """This worker's rank: MPI's for a distributed store of several workers, else 0."""
    d = _collective(_kv("kvstore.rank", kv))
    return 0 if d is None else d.rank


def num_workers(kv) -> int:
    """The number of workers: MPI's for a distributed store, else 1."""
    d = _collective(_kv("kvstore.num_workers", kv))
    return 1 if d is None else d.size


def barrier(kv) -> KVStore:
    """Waits until every worker has called it (a no-op with one worker). Returns ``kv``."""
    d = _collective(_kv("kvstore.barrier", kv))
    if d is not None:
        d.barrier()
    return kv


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
