"""``mx.module``: MXNet's Module API as functions over a Module value (SPEC §2).

A Module is a symbol bound on one or more contexts (each gets its slice of the batch), with
parameters, an optimizer and the last outputs. Functions that act on a module for its effect
return it, so calls thread::

    >>> import mxfn as mx, numpy as np
    >>> from mxfn import module as m
    >>> net = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc")
    >>> mod = m.module(net, label_names=None)
    >>> mod = m.init_params(m.bind(mod, data_shapes=[("data", (4, 3))], for_training=False))
    >>> m.outputs_merged(m.forward(mod, {"data": [np.ones((4, 3))]}))[0].shape
    (4, 2)

The intermediate level is defined here (``mxfn._module``); ``fit``/``score``/``predict``
(``mxfn._fit``) build on it, and ``mxfn.module`` exports both.
"""
from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _native
from ._errors import MXFNError
from ._opts import REQUIRED, documented, opt, parse_opts
from . import _dist, initializer, kvstore, metric, monitor as mon_ns, optimizer as optim
from .context import Context
from .io import as_data_desc, batch_data, batch_label, batch_pad, data_desc
from .ndarray import NDArray, _handle, as_ndarray
from .symbol import Symbol

_log = logging.getLogger("mxfn")
_DEV_CODES = {"cpu": 1, "gpu": 2}
_DEV_NAMES = {1: "cpu", 2: "gpu", 3: "cpu_pinned", 5: "cpu_shared"}


class Module:
    """A Module value (made by ``module`` or ``load_checkpoint``). It is mutable like MXNet's
    Module: ``bind``, ``init_params``, ``forward``, ``update``… change it and return it."""

    __slots__ = ("_h", "_monitor", "_monitor_cb", "_opt", "_share", "_kv", "_dist", "__weakref__")

    def __init__(self, handle):
        if not isinstance(handle, _native.ModuleHandle):
            raise TypeError("Module(...) wraps a core handle; build modules with mx.module.module(sym)")
        self._h = handle
        self._monitor = None
        self._monitor_cb = None  # the core holds the monitor callback weakly: this keeps it
        self._opt = None
        self._share = None  # a _ShareGroup once bound with (or as) a shared_module
        self._kv = None  # a KVStore value given to init_optimizer, kept holding the params
        self._dist = None  # the workers (_dist.MPICollective) of a dist kvstore, when several
        _flush(self)

    def __repr__(self):
        d, l, o, _, _ = _native.mod_names(self._h)
        b, p, op, _ = _native.mod_state(self._h)
        return (f"Module(data_names={d}, label_names={l}, output_names={o}, bound={b}, "
                f"params_initialized={p}, optimizer_initialized={op})")


class _ShareGroup:
    """Modules bound with ``shared_module`` share their parameters, as in MXNet. Core arrays
    are values, not shared memory, so the group remembers which module changed them last
    (``owner``) and every other member adopts the owner's arrays — reference-counted
    handles, no copy — before it computes or reports anything."""

    __slots__ = ("owner",)

    def __init__(self, owner):
        self.owner = owner

    def __repr__(self):
        return f"_ShareGroup(owner={self.owner!r})"



def _flush(mod):
    for w in _native.mod_take_warnings(mod._h):
        _log.warning(w)


def _mod(fname, mod) -> Module:
    if not isinstance(mod, Module):
        raise TypeError(f"module.{fname}: expected a Module, got {type(mod).__name__}")
    share = mod._share
    if share is not None and share.owner is not mod:
        _native.mod_share_params(mod._h, share.owner._h)  # see _ShareGroup
    return mod


def _check_epoch(fname, epoch):
    # The file name is prefix-%04d: a negative epoch names no checkpoint MXNet writes.
    if epoch < 0:
        raise MXFNError(f'{fname}: option "epoch" must be >= 0, got {epoch}')


def _owns(mod) -> Module:
    """Marks ``mod`` as holding its share group's newest parameters (after it changed them)."""
    if mod._share is not None:
        mod._share.owner = mod
    return mod


def _names(fname, key, v, allow_none=False):
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise TypeError(f'module.{fname}: "{key}" must be a list of names, got {v!r}')
    return list(v)


def _contexts(fname, v):
    if v is None:
        return [(1, 0)]
    if isinstance(v, Context):
        v = [v]
    if not isinstance(v, (list, tuple)):
        raise TypeError(f'module.{fname}: "contexts" must be a Context or a non-empty list of them, '
                        f'got {type(v).__name__}')
    if not v:
        raise MXFNError(f'module.{fname}: "contexts" must be a Context or a non-empty list of them, got []')
    out = []
    for c in v:
        if not isinstance(c, Context):
            raise TypeError(f'module.{fname}: "contexts" must hold Contexts, got {type(c).__name__}')
        out.append((_DEV_CODES[c.device_type], c.device_id))
    return out


def _workload(fname, w):
    if w is None:
        return None
    if not isinstance(w, (list, tuple)) or not all(isinstance(x, numbers.Real) for x in w):
        raise TypeError(f'module.{fname}: "workload_list" must be a list of numbers')
    return [float(x) for x in w]


_MODULE_OPTS = {
    "data_names": opt(("data",), (list, tuple), "data input names"),
    "label_names": opt(("softmax_label",), None,
                       "label input names (None or [] = no label)"),
    "contexts": opt(None, (Context, list, tuple), "a Context or a list of them (default [cpu()])",
                    aliases=("context",)),
    "workload_list": opt(None, (list, tuple), "share of each batch per context (None = uniform)"),
    "fixed_param_names": opt(None, (list, tuple), "params that are never updated"),
}


@documented(_MODULE_OPTS)
def module(sym, opts=None, /, **kw) -> Module:
    """A new, unbound Module over symbol ``sym`` (label names the symbol lacks are dropped
    with a warning, SPEC §8).

    %OPTIONS%

    Returns:
        A Module.

    Example:
        >>> import mxfn as mx
        >>> net = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc")
        >>> label_names(module(net))
        []
    """
    fname = "module"
    if not isinstance(sym, Symbol):
        raise TypeError(f"module.module: sym must be a Symbol, got {type(sym).__name__}")
    o = parse_opts("module.module", _MODULE_OPTS, opts, kw)
    h = _native.mod_new(sym._h, _names(fname, "data_names", o["data_names"]),
                        _names(fname, "label_names", o["label_names"]),
                        _contexts(fname, o["contexts"]), _workload(fname, o["workload_list"]),
                        _names(fname, "fixed_param_names", o["fixed_param_names"]))
    return Module(h)


# -- queries ----------------------------------------------------------------------------------

def data_names(mod) -> list:
    """The data input names."""
    return _native.mod_names(_mod("data_names", mod)._h)[0]


def label_names(mod) -> list:
    """The label input names the symbol has."""
    return _native.mod_names(_mod("label_names", mod)._h)[1]


def output_names(mod) -> list:
    """The output names."""
    return _native.mod_names(_mod("output_names", mod)._h)[2]


def param_names(mod) -> list:
    """The parameter names (``list_arguments`` minus data and label names)."""
    return _native.mod_names(_mod("param_names", mod)._h)[3]


def aux_names(mod) -> list:
    """The auxiliary state names."""
    return _native.mod_names(_mod("aux_names", mod)._h)[4]


def _desc_out(d):
    name, shape, dtype, layout = d
    return data_desc(name, tuple(shape), dtype=dtype, layout=layout) if layout else \
        data_desc(name, tuple(shape), dtype=dtype)


def data_shapes(mod) -> list:
    """The bound data descs (list of DataDesc)."""
    return [_desc_out(d) for d in _native.mod_shapes(_mod("data_shapes", mod)._h)[0]]


def label_shapes(mod) -> list:
    """The bound label descs (list of DataDesc; [] without labels)."""
    return [_desc_out(d) for d in _native.mod_shapes(_mod("label_shapes", mod)._h)[1]]


def output_shapes(mod) -> list:
    """``[(name, shape), …]`` of the outputs for the bound batch."""
    return [(n, tuple(s)) for n, s in _native.mod_shapes(_mod("output_shapes", mod)._h)[2]]


def symbol(mod) -> Symbol:
    """The module's symbol."""
    return Symbol(_native.mod_symbol(_mod("symbol", mod)._h))


def contexts(mod) -> list:
    """The module's contexts."""
    return [Context(_DEV_NAMES.get(t, "cpu"), i) for t, i in _native.mod_contexts(_mod("contexts", mod)._h)]


def binded(mod) -> bool:
    """Whether the module is bound."""
    return _native.mod_state(_mod("binded", mod)._h)[0]


def params_initialized(mod) -> bool:
    """Whether the module's parameters are initialised."""
    return _native.mod_state(_mod("params_initialized", mod)._h)[1]


def optimizer_initialized(mod) -> bool:
    """Whether the module has an optimizer."""
    return _native.mod_state(_mod("optimizer_initialized", mod)._h)[2]


# -- bind ---------------------------------------------------------------------------------------

def _descs(fname, key, v):
    if v is None:
        return []
    if isinstance(v, Mapping) and "name" not in v:
        v = list(v.items())  # {name: shape}
    elif isinstance(v, (Mapping, tuple)) and not isinstance(v, list) and (
            isinstance(v, Mapping) or (len(v) == 2 and isinstance(v[0], str))):
        v = [v]
    if not isinstance(v, (list, tuple)):
        raise TypeError(f'module.{fname}: "{key}" must be a list of DataDesc, maps or (name, shape) pairs')
    out = []
    for d in v:
        d = as_data_desc(d)
        out.append((d["name"], [int(x) for x in d["shape"]], np.dtype(d["dtype"]).name, d["layout"]))
    return out


_BIND_OPTS = {
    "data_shapes": opt(REQUIRED, (list, tuple, Mapping), "DataDesc, maps or (name, shape) pairs"),
    "label_shapes": opt(None, (list, tuple, Mapping), "label descs, like data_shapes"),
    "for_training": opt(True, bool, "bind for training"),
    "inputs_need_grad": opt(False, bool, "compute gradients of the data inputs"),
    "force_rebind": opt(False, bool, "rebind a bound module"),
    "shared_module": opt(None, None, "a bound, initialised Module whose parameters this one shares "
                                     "(same names and shapes; updates through either are seen by both)"),
    "grad_req": opt("write", (str, Mapping), '"write", "add", "null" or a map name -> req'),
}


@documented(_BIND_OPTS)
def bind(mod, opts=None, /, **kw) -> Module:
    """Binds one executor per context on its slice of the batch (SPEC §2). A bound module is
    left as it is unless ``force_rebind=True``.

    An inference bind (``for_training=False``, one context) of a graph whose ops all treat
    samples independently, and whose widest activation over the batch is larger than 12 MB,
    runs each forward pass in blocks of samples (MXNet runs the whole batch at once): the
    outputs are the same up to rounding, the pass is faster because each block's layers stay
    in the cache, and ``mx.profiler`` counts one call per block. A monitor sees whole-batch
    passes.

    %OPTIONS%

    Returns:
        The module.
    """
    fname = "bind"
    mod = _mod(fname, mod)
    o = parse_opts("module.bind", _BIND_OPTS, opts, kw)
    shared = o["shared_module"]
    if shared is not None:
        if not isinstance(shared, Module):
            raise TypeError(f"module.bind: shared_module must be a Module, got {type(shared).__name__}")
        if shared is mod:
            raise MXFNError("module.bind: shared_module must be another module, not the module being bound")
        if not (binded(shared) and params_initialized(shared)):
            raise MXFNError("module.bind: shared_module must be bound and initialised; call bind and "
                            "init_params on it first")
    req = o["grad_req"]
    req = {"": req} if isinstance(req, str) else {str(k): str(v) for k, v in req.items()}
    was_bound = binded(mod)
    _native.mod_bind(mod._h, _descs(fname, "data_shapes", o["data_shapes"]),
                     _descs(fname, "label_shapes", o["label_shapes"]), o["for_training"],
                     o["inputs_need_grad"], o["force_rebind"], req)
    _flush(mod)
    if shared is not None and (o["force_rebind"] or not was_bound):
        _native.mod_share_params(mod._h, _mod(fname, shared)._h)
        if shared._share is None:
            shared._share = _ShareGroup(shared)
        mod._share = shared._share
    if mod._monitor is not None:
        _install(mod, mod._monitor)  # also re-applied by the core; harmless
    return mod


# -- params -------------------------------------------------------------------------------------

def _init_spec(init):
    if init is None:
        return None
    return initializer.create(init).dumps()


def _param_dict(fname, key, d):
    if d is None:
        return None
    if not isinstance(d, Mapping):
        raise TypeError(f'module.{fname}: "{key}" must be a dict name -> array, got {type(d).__name__}')
    return {str(k): _handle(v) for k, v in d.items()}


_INIT_OPTS = {
    "initializer": opt(None, None, "an mx.initializer value, name or JSON spec (default uniform(0.01))"),
    "arg_params": opt(None, Mapping, "name -> array"),
    "aux_params": opt(None, Mapping, "name -> array"),
    "allow_missing": opt(False, bool, "initialise params missing from arg_params/aux_params"),
    "force_init": opt(False, bool, "re-initialise an initialised module"),
    "allow_extra": opt(False, bool, "ignore names that are not params of the module"),
}


@documented(_INIT_OPTS)
def init_params(mod, opts=None, /, **kw) -> Module:
    """Initialises the parameters (MXNet's name rules; given ``arg_params``/``aux_params`` are
    copied). Does nothing on an initialised module unless ``force_init=True``.

    %OPTIONS%

    Returns:
        The module.
    """
    fname = "init_params"
    mod = _mod(fname, mod)
    o = parse_opts("module.init_params", _INIT_OPTS, opts, kw)
    init = None if o["initializer"] is None else initializer.create(o["initializer"])
    if isinstance(init, (initializer.Mixed, initializer.Load)):
        return _init_params_by_name(mod, init, o)
    if _has_fused_rnn_init(mod):
        # The core has no fused RNN initializer (initializer.fused_rnn): Python applies it.
        return _init_params_by_name(mod, init if init is not None else initializer.uniform(0.01), o)
    _native.mod_init_params(mod._h, _init_spec(init),
                            _param_dict(fname, "arg_params", o["arg_params"]),
                            _param_dict(fname, "aux_params", o["aux_params"]),
                            o["allow_missing"], o["force_init"], o["allow_extra"], False)
    _flush(mod)
    return _owns(mod)


def _has_fused_rnn_init(mod) -> bool:
    """Whether a parameter of the module's symbol carries a fused RNN ``__init__`` (the
    ``parameters`` variable of ``rnn.fused_rnn_cell``)."""
    return any(initializer.is_fused_rnn(a.get("__init__")) for a in symbol(mod).attr_dict().values())


def _init_params_by_name(mod, init, o) -> Module:
    """``init_params`` with a ``mixed`` or ``load`` initializer, which have no JSON form for
    the core: as MXNet does, each parameter not taken from ``arg_params``/``aux_params`` goes
    through the initializer by name (``initializer.apply``, honouring the variable's
    ``__init__`` attribute); the given ones are copied, with the same ``allow_missing`` rules."""
    if params_initialized(mod) and not o["force_init"]:
        _log.warning("module.init_params: already initialised; ignoring (pass force_init to re-initialise)")
        return mod
    fname = "init_params"
    given_args = _param_dict(fname, "arg_params", o["arg_params"])
    given_aux = _param_dict(fname, "aux_params", o["aux_params"])
    attrs = symbol(mod).attr_dict()
    # Shapes, dtypes and the given values first (the core checks names and allow_missing),
    # then every other parameter by name. The core would apply a fused RNN __init__ here and
    # cannot: such parameters get zeros for now (they are filled by name below).
    first_args, allow_missing = given_args, o["allow_missing"]
    fused = [n for n, a in attrs.items()
             if initializer.is_fused_rnn(a.get("__init__")) and (given_args is None or n not in given_args)]
    if fused and (given_args is None or allow_missing):
        descs, label_descs, _ = _native.mod_shapes(mod._h)
        known = {d[0]: tuple(d[1]) for d in [*descs, *label_descs]}
        sym = symbol(mod)
        shapes = dict(zip(sym.list_arguments(), sym.infer_shape(known)[0]))
        first_args = {**(given_args or {}), **{n: _handle(as_ndarray(np.zeros(shapes[n], np.float32), fname)) for n in fused if n in shapes}}
        allow_missing = True
    _native.mod_init_params(mod._h, initializer.zero().dumps(), first_args, given_aux,
                            allow_missing, True, o["allow_extra"], False)
    args, aux = get_params(mod)

    def fill(current, given):
        return {n: _handle(a if given is not None and n in given else
                           initializer.apply(init, n, a, attrs.get(n)))
                for n, a in current.items()}
    _native.mod_init_params(mod._h, None, fill(args, given_args), fill(aux, given_aux),
                            False, True, False, True)
    _flush(mod)
    return _owns(mod)


_SET_OPTS = {
    "arg_params": opt(REQUIRED, Mapping, "name -> array"),
    "aux_params": opt(None, Mapping, "name -> array (None leaves the aux states as they are)"),
    "allow_missing": opt(False, bool, "keep (or initialise) params missing from arg_params"),
    "force_init": opt(True, bool, "set even when initialised"),
    "allow_extra": opt(False, bool, "ignore names that are not params of the module"),
}


@documented(_SET_OPTS)
def set_params(mod, opts=None, /, **kw) -> Module:
    """Sets the parameters (SPEC §8).

    %OPTIONS%

    Returns:
        The module.
    """
    fname = "set_params"
    mod = _mod(fname, mod)
    o = parse_opts("module.set_params", _SET_OPTS, opts, kw)
    _native.mod_init_params(mod._h, None, _param_dict(fname, "arg_params", o["arg_params"]),
                            _param_dict(fname, "aux_params", o["aux_params"]),
                            o["allow_missing"], o["force_init"], o["allow_extra"], True)
    _flush(mod)
    return _owns(mod)


def get_params(mod) -> tuple:
    """``(arg_params, aux_params)``: dicts name -> NDArray (copies, synced across devices)."""
    a, x = _native.mod_get_params(_mod("get_params", mod)._h)
    return {k: NDArray(h) for k, h in a}, {k: NDArray(h) for k, h in x}


params = get_params


def arg_params(mod) -> dict:
    """The argument parameters (copies)."""
    return get_params(mod)[0]


def aux_params(mod) -> dict:
    """The auxiliary states (copies)."""
    return get_params(mod)[1]


# -- optimizer ----------------------------------------------------------------------------------

_OPT_OPTS = {
    "kvstore": opt("local", None, '"local", "device", "dist_sync" (also "dist_device_sync", '
                                  '"horovod"), None, or an mx.kvstore value: gradients are summed '
                                  "over the contexts (and, distributed, over the mpiexec workers, "
                                  "after rank 0's parameters are broadcast) before the update, and "
                                  "a kvstore value holds the updated parameters by name"),
    "optimizer": opt("sgd", None, "a name such as \"adam\", or an mx.optimizer value"),
    "optimizer_params": opt(None, Mapping, 'options of a named optimizer (default {"learning_rate": 0.01})'),
    "reset_optimizer": opt(True, bool, "set rescale_grad = 1/batch and the index->name map"),
    "force_init": opt(False, bool, "replace an installed optimizer"),
}


@documented(_OPT_OPTS)
def init_optimizer(mod, opts=None, /, **kw) -> Module:
    """Installs the optimizer (SPEC §2, §8). Does nothing when one is installed unless
    ``force_init=True``.

    %OPTIONS%

    Returns:
        The module.
    """
    fname = "module.init_optimizer"
    mod = _mod("init_optimizer", mod)
    o = parse_opts(fname, _OPT_OPTS, opts, kw)
    kv = o["kvstore"]
    if isinstance(kv, str):
        if kvstore.is_dist(kv) or kv.startswith("dist"):
            kv = kvstore.create(kv)  # a dist store of this process's workers; dist_async raises
        elif kv not in kvstore.KV_TYPES:
            raise MXFNError(f'{fname}: "kvstore" must be "local", "device", "dist_sync", '
                            f'"dist_device_sync", "horovod", None or an mx.kvstore value, got "{kv}"')
    elif kv is not None and not isinstance(kv, kvstore.KVStore):
        raise TypeError(f'{fname}: "kvstore" must be a name or an mx.kvstore value, got {type(kv).__name__}')
    b, p, has_opt, _ = _native.mod_state(mod._h)
    if has_opt and not o["force_init"]:
        _log.warning("module.init_optimizer: optimizer already initialised; ignoring (pass force_init)")
        return mod
    spec = o["optimizer"]
    if isinstance(spec, optim.Optimizer):
        if o["optimizer_params"] is not None:
            raise MXFNError(f"{fname}: optimizer_params cannot be given with an optimizer value "
                            f"(configure the value itself)")
        value = spec  # the core applies the symbol's __lr_mult__ / __wd_mult__ to it too
    elif isinstance(spec, str):
        if not b:
            raise MXFNError(f"{fname}: call bind first")
        if not p:
            raise MXFNError(f"{fname}: call init_params first")
        op = dict(o["optimizer_params"] if o["optimizer_params"] is not None else {"learning_rate": 0.01})
        op.setdefault("sym", symbol(mod))
        value = optim.create(spec, op)
    else:
        raise TypeError(f'{fname}: "optimizer" must be a name or an mx.optimizer value, '
                        f"got {type(spec).__name__}")
    # Several workers: the core checks their parameters, broadcasts rank 0's and sets
    # rescale_grad = 1 / (batch × workers) in init_optimizer, and sums every update's gradients.
    dist = kvstore._collective(kv)
    _native.mod_set_collective(mod._h, None if dist is None else dist.handle, _dist.bucket_bytes())
    _native.mod_init_optimizer(mod._h, value._h, o["reset_optimizer"], o["force_init"])
    mod._opt = value
    mod._dist = dist
    # A dist store named by a string is the module's own: it need not hold copies of the params.
    mod._kv = kv if isinstance(kv, kvstore.KVStore) and o["kvstore"] is kv else None
    _flush(mod)
    return _sync_kv(mod)


def _sync_kv(mod) -> Module:
    """Lets a kvstore value given to ``init_optimizer`` hold the module's current parameters."""
    if mod._kv is not None:
        args, _ = _native.mod_get_params(mod._h)
        kvstore._hold(mod._kv, [(k, NDArray(h)) for k, h in args])
    return mod


def optimizer(mod):
    """The module's optimizer value (None before ``init_optimizer``)."""
    return _mod("optimizer", mod)._opt


def borrow_optimizer(mod, shared_module) -> Module:
    """Shares ``shared_module``'s optimizer and its states."""
    mod = _mod("borrow_optimizer", mod)
    _native.mod_borrow_optimizer(mod._h, _mod("borrow_optimizer", shared_module)._h)
    mod._opt = shared_module._opt
    mod._kv = shared_module._kv
    mod._dist = shared_module._dist  # the core shares the collective with the optimizer
    return mod


# -- computation --------------------------------------------------------------------------------

def _arrays(fname, key, xs):
    if xs is None:
        return []
    if isinstance(xs, (NDArray, np.ndarray)):
        xs = [xs]
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f'module.{fname}: "{key}" must be a list of arrays, got {type(xs).__name__}')
    return [_handle(x) for x in xs]


def forward(mod, data_batch, is_train=None) -> Module:
    """Runs forward on every device with its slice of the batch (a DataBatch or a map with
    ``data`` and optional ``label``, ``pad``). ``is_train=None`` means ``for_training``. A batch
    whose shapes differ from the bound ones reshapes the module first."""
    fname = "forward"
    mod = _mod(fname, mod)
    if is_train is not None and not isinstance(is_train, bool):
        raise TypeError(f"module.forward: is_train must be a bool or None, got {type(is_train).__name__}")
    _native.mod_forward(mod._h, *_batch_parts(fname, data_batch), is_train)
    return mod


def _batch_parts(fname: str, data_batch: Any) -> tuple[list[Any], list[Any], int]:
    """(data handles, label handles, pad) of a DataBatch or map, for the native calls."""
    try:
        data = batch_data(data_batch)
    except (KeyError, AttributeError):
        raise MXFNError(f"module.{fname}: data_batch must be a DataBatch or a map with \"data\"") from None
    return (_arrays(fname, "data", data), _arrays(fname, "label", batch_label(data_batch)),
            int(batch_pad(data_batch)))


def backward(mod, out_grads=None) -> Module:
    """Back-propagates; ``out_grads``: one array per output (only for non-loss outputs)."""
    mod = _mod("backward", mod)
    _native.mod_backward(mod._h, _arrays("backward", "out_grads", out_grads))
    return mod


def forward_backward(mod, data_batch) -> Module:
    """``forward(mod, data_batch, is_train=True)`` then ``backward(mod)``, in one call into the
    core (which runs a large pass on its thread pool as a whole)."""
    fname = "forward_backward"
    mod = _mod(fname, mod)
    _native.mod_forward_backward(mod._h, *_batch_parts(fname, data_batch))
    return mod


def update(mod) -> Module:
    """Applies the optimizer to every non-fixed parameter: gradients are summed over the
    contexts first (for every kvstore choice, ``None`` included — MXNet would let devices
    drift apart without a kvstore), so every device holds the same parameters afterwards."""
    mod = _mod("update", mod)
    _native.mod_update(mod._h)
    return _owns(_sync_kv(mod))


def update_metric(mod, eval_metric, labels) -> Module:
    """Accumulates ``eval_metric`` on the last outputs, device by device: ``labels`` (the
    batch's label arrays) are cut into each device's slice along each label's batch axis (its
    desc's layout; axis 0 without one), as MXNet does."""
    mod = _mod("update_metric", mod)
    labels = [as_ndarray(x) for x in ([labels] if isinstance(labels, (NDArray, np.ndarray)) else (labels or []))]
    handles = [x._h for x in labels]
    if type(eval_metric) is metric.EvalMetric:  # built-in: the whole update runs in the core
        _native.mod_update_metric(mod._h, eval_metric._h, handles)
        return mod
    outs = outputs(mod)
    for k, ls in enumerate(_native.mod_device_labels(mod._h, handles)):
        metric.update(eval_metric, [NDArray(h) for h in ls], [o[k] for o in outs])
    return mod


def outputs(mod) -> list:
    """``[[out1_dev1, out1_dev2, …], [out2_dev1, …]]``."""
    return [[NDArray(h) for h in per] for per in _native.mod_outputs(_mod("outputs", mod)._h, False)]


def outputs_merged(mod) -> list:
    """``[out1, out2, …]``, each concatenated over the devices along the batch axis."""
    return [NDArray(h) for h in _native.mod_outputs(_mod("outputs_merged", mod)._h, True)[0]]


def input_grads(mod) -> list:
    """Gradients of the data inputs per input, per device (needs ``inputs_need_grad=True``)."""
    return [[NDArray(h) for h in per] for per in _native.mod_input_grads(_mod("input_grads", mod)._h, False)]


def input_grads_merged(mod) -> list:
    """Gradients of the data inputs, merged over the devices."""
    return [NDArray(h) for h in _native.mod_input_grads(_mod("input_grads_merged", mod)._h, True)[0]]


def grad_arrays(mod) -> list:
    """Gradients per parameter (module parameter order), per device; [] for fixed params."""
    return [[NDArray(h) for h in per] for per in _native.mod_grad_arrays(_mod("grad_arrays", mod)._h)]


def reshape(mod, data_shapes, label_shapes=None) -> Module:
    """Rebinds for new input shapes, keeping the parameters (and the original rescale_grad)."""
    mod = _mod("reshape", mod)
    _native.mod_reshape(mod._h, _descs("reshape", "data_shapes", data_shapes),
                        _descs("reshape", "label_shapes", label_shapes))
    return mod


# -- monitor -------------------------------------------------------------------------------------

def _install(mod, mon):
    # The executors live in the core: the monitor's callback is installed on each of them
    # (op outputs); the core re-installs it after a rebind or reshape.
    # The core holds the callback weakly (a reference hidden in Rust would keep the cycle
    # module -> monitor -> callback -> module from ever being collected); the module keeps it.
    mod._monitor_cb = None if mon is None else (lambda n, h: mon.stat_helper(n, NDArray(h)))
    _native.mod_set_monitor(mod._h, mod._monitor_cb)


def install_monitor(mod, monitor) -> Module:
    """Installs ``monitor`` (an ``mx.monitor`` value, or None to remove it) on every executor
    of the module, now and after later binds: between ``tic`` and ``toc`` it collects the op
    outputs (``{node}_output``) of each forward, and ``toc`` adds the module's parameters and
    auxiliary states (``{name}``) and the gradients of every device (``{param}_grad``).

    Returns:
        The module.
    """
    mod = _mod("install_monitor", mod)
    if monitor is not None and not hasattr(monitor, "stat_helper"):
        raise TypeError(f"module.install_monitor: expected an mx.monitor value, got {type(monitor).__name__}")
    if mod._monitor is not None and mod._monitor is not monitor:
        mod._monitor.sources.pop(("module", id(mod)), None)
    mod._monitor = monitor
    _install(mod, monitor)
    if monitor is not None:
        mon_ns.add_source(monitor, ("module", id(mod)), lambda: _monitored_arrays(mod))
    return mod


def _monitored_arrays(mod) -> list:
    """What ``toc`` reports for a module, device by device as MXNet's Monitor walks the
    executors: every argument (data and label included), its ``{arg}_grad`` when a backward
    computed one in this step, and the auxiliary states."""
    if not binded(mod):
        return []
    return [(k, NDArray(h)) for k, h in _native.mod_monitored_arrays(mod._h)]


# -- checkpoints ---------------------------------------------------------------------------------

_SAVE_OPTS = {
    "prefix": opt(REQUIRED, str, "file prefix"),
    "epoch": opt(REQUIRED, int, "epoch number (file name prefix-%04d.params)"),
    "save_opt_states": opt(False, bool, "also write prefix-%04d.states", aliases=("save_optimizer_states",)),
}


@documented(_SAVE_OPTS)
def save_checkpoint(mod, opts=None, /, **kw) -> Module:
    """Writes ``prefix-symbol.json`` and ``prefix-%04d.params`` (atomically), and with
    ``save_opt_states=True`` ``prefix-%04d.states``.

    %OPTIONS%

    Returns:
        The module.
    """
    mod = _mod("save_checkpoint", mod)
    o = parse_opts("module.save_checkpoint", _SAVE_OPTS, opts, kw)
    _check_epoch("module.save_checkpoint", o["epoch"])
    _native.mod_save_checkpoint(mod._h, o["prefix"], o["epoch"])
    if o["save_opt_states"]:
        save_optimizer_states(mod, "%s-%04d.states" % (o["prefix"], o["epoch"]))
    return mod


def save_params(mod, fname) -> Module:
    """Writes the params as MXNet's ``arg:``/``aux:`` dict (atomically)."""
    _native.mod_save_params(_mod("save_params", mod)._h, str(fname))
    return mod


def load_params(mod, fname) -> Module:
    """Loads a ``.params`` file into the bound module (``set_params`` with its contents)."""
    _native.mod_load_params(_mod("load_params", mod)._h, str(fname))
    return _owns(mod)


_LOAD_OPTS = {
    "prefix": opt(REQUIRED, str, "file prefix"),
    "epoch": opt(REQUIRED, int, "epoch number"),
    "load_optimizer_states": opt(False, bool, "also read prefix-%04d.states (applied at init_optimizer)"),
    **_MODULE_OPTS,
}


@documented(_LOAD_OPTS)
def load_checkpoint(prefix=None, epoch=None, opts=None, /, **kw) -> Module:
    """A new Module from ``prefix-symbol.json`` + ``prefix-%04d.params`` (params applied at
    ``bind``). Called as ``load_checkpoint(prefix, epoch, opts)`` or ``load_checkpoint(opts)``.

    %OPTIONS%

    Returns:
        A new Module.
    """
    fname = "load_checkpoint"
    if isinstance(prefix, Mapping):
        prefix, opts = None, {**prefix, **(opts or {})} if isinstance(opts, Mapping) else prefix
    given = dict(opts or {})
    if prefix is not None:
        given["prefix"] = prefix
    if epoch is not None:
        given["epoch"] = epoch
    o = parse_opts("module.load_checkpoint", _LOAD_OPTS, given, kw)
    _check_epoch("module.load_checkpoint", o["epoch"])
    h = _native.mod_load(o["prefix"], o["epoch"], _names(fname, "data_names", o["data_names"]),
                         _names(fname, "label_names", o["label_names"]),
                         _contexts(fname, o["contexts"]), _workload(fname, o["workload_list"]),
                         _names(fname, "fixed_param_names", o["fixed_param_names"]))
    mod = Module(h)
    if o["load_optimizer_states"]:
        load_optimizer_states(mod, "%s-%04d.states" % (o["prefix"], o["epoch"]))
    return mod


# -- optimizer states (.states, FORMAT.md §3) ----------------------------------------------------

def load_optimizer_states(mod, fname) -> Module:
    """Reads MXNet's ``.states`` pickle (``{index: NDArray | tuple | None}``) with the core's
    restricted reader, which runs no pickle code and accepts no other globals; the states apply
    to the module's optimizer (now, or at ``init_optimizer``)."""
    _native.mod_load_states(_mod("load_optimizer_states", mod)._h, str(fname))
    return mod


def save_optimizer_states(mod, fname) -> Module:
    """Writes the optimizer states as MXNet's ``.states`` pickle (protocol 4, what MXNet 1.9.1
    writes and loads): ``{index: NDArray | tuple | None}``. Written atomically."""
    _native.mod_save_states(_mod("save_optimizer_states", mod)._h, str(fname))
    return mod
