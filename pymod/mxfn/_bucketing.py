"""BucketingModule (MXNet's ``mx.mod.BucketingModule``): one Module per bucket key sharing the
parameters by name, the optimizer and its states, and the dispatch that lets every
``mx.module`` function take a BucketingModule — most act on the current bucket's module.

Buckets may differ in their parameters (SPEC §8): every name has one value, held by one
bucket's module. The bucket switched to adopts the names it has from whichever buckets hold
them (the arrays move, no data is copied; the buckets they left keep empty slots), and
names no bucket holds are created with the initializer ``init_params`` used. MXNet 1.9.1
raises a KeyError for a bucket parameter its default bucket lacks; going beyond it is intended.
With several workers (a dist kvstore) every bucket must have the default bucket's parameters:
one collective sums the current bucket's gradients on all workers.

``mxfn.module`` exposes ``DISPATCHING`` (function name → the version that also takes a
BucketingModule) in place of ``mxfn._module``'s Module-only functions.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import _module, _native, initializer
from . import ndarray as nd
from . import symbol as sym_ns
from ._errors import MXFNError
from ._module import (_BIND_OPTS, _INIT_OPTS, _MODULE_OPTS, _SAVE_OPTS, _SET_OPTS, Module, _check_epoch,
                      _descs, _flush, _log, aux_names, data_names, label_names, module,
                      optimizer_initialized, param_names, params_initialized, symbol)
from ._opts import REQUIRED, documented, opt, parse_opts
from .io import batch_bucket_key, batch_data, batch_label
from .ndarray import NDArray, _handle

class BucketingModule:
    """A BucketingModule value (made by ``bucketing_module``): one Module per bucket key, made
    lazily by ``forward``/``switch_bucket``, all sharing the parameters (by name), the optimizer
    and its states. Every ``mx.module`` function accepts it; most act on the current bucket."""

    __slots__ = ("_sym_gen", "_default_key", "_mod_opts", "_buckets", "_cur_key", "_bind",
                 "_monitor", "_ready", "_holder", "_pending", "_init", "_index", "_shape",
                 "__weakref__")

    def __init__(self, sym_gen, default_key, mod_opts):
        self._sym_gen = sym_gen
        self._default_key = default_key
        self._mod_opts = mod_opts
        self._buckets = {default_key: self._make(default_key)}
        self._cur_key = default_key
        self._bind = None
        self._monitor = None
        self._ready = False  # parameter values exist (init_params / set_params ran)
        self._holder: dict[str, Any] = {}  # name -> the bucket key whose module holds its value
        # name -> (is_aux, value): values given for names no bucket holds yet (set_params with
        # names of buckets not made yet, force_rebind's values of the dropped buckets)
        self._pending: dict[str, tuple[bool, NDArray]] = {}
        self._init: Any = None  # the initializer that creates names no bucket holds
        self._index: dict[str, int] = {}  # param name -> optimizer index (states are per name)
        self._shape: dict[str, tuple[tuple, Any]] = {}  # name -> (bound shape, first bucket key)

    def _make(self, key) -> Module:
        # A fresh name scope per call, as MXNet's BucketingModule runs sym_gen under
        # NameManager: unnamed ops get the same names in every bucket (SPEC §8).
        _native.sym_enter_name_scope()
        try:
            got = self._sym_gen(key)
        finally:
            _native.sym_exit_name_scope()
        if not (isinstance(got, tuple) and len(got) == 3):
            raise MXFNError(f"module.bucketing_module: sym_gen({key!r}) must return "
                            f"(symbol, data_names, label_names), got {type(got).__name__}")
        sym, dn, ln = got
        return module(sym, {**self._mod_opts, "data_names": dn, "label_names": ln})

    @property
    def _cur(self) -> Module:
        return self._buckets[self._cur_key]

    @property
    def _default(self) -> Module:
        return self._buckets[self._default_key]

    def __repr__(self):
        return (f"BucketingModule(default_bucket_key={self._default_key!r}, "
                f"buckets={list(self._buckets)}, current={self._cur_key!r}, current_module={self._cur!r})")


_BUCKETING_OPTS = {
    "default_bucket_key": opt(REQUIRED, None, "the bucket bound by bind (its shapes are the iterator's)"),
    "contexts": _MODULE_OPTS["contexts"],
    "workload_list": _MODULE_OPTS["workload_list"],
    "fixed_param_names": _MODULE_OPTS["fixed_param_names"],
}


@documented(_BUCKETING_OPTS)
def bucketing_module(sym_gen, opts=None, /, **kw) -> BucketingModule:
    """A new, unbound BucketingModule (MXNet's ``BucketingModule``). ``sym_gen(bucket_key)``
    returns ``(symbol, data_names, label_names)``; buckets share parameters by name (SPEC §8),
    so name the parameterised ops. ``bind`` binds the default bucket; ``forward`` switches to
    the batch's ``bucket_key`` (its ``provide_data``/``provide_label`` give the shapes),
    making the bucket's module on first use. Parameters are shared without copying data:
    the bucket switched to adopts the arrays from the buckets holding them. A bucket may have
    fewer or more parameters than the default one: names no bucket holds are created with
    ``init_params``' initializer (MXNet 1.9.1 raises a KeyError for them; this goes beyond it
    on purpose), and a name bound with two different shapes is an error. ``get_params``,
    ``save_params`` and ``save_checkpoint`` give the parameters of every bucket;
    ``save_checkpoint`` writes the default bucket's symbol.

    %OPTIONS%

    Returns:
        A BucketingModule.

    Example:
        >>> import mxfn as mx
        >>> from mxfn import module as m
        >>> def gen(k):
        ...     return mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc"), ["data"], []
        >>> bm = m.bucketing_module(gen, default_bucket_key=3)
        >>> bm = m.init_params(m.bind(bm, data_shapes=[("data", (4, 3))], for_training=False))
        >>> m.outputs_merged(m.forward(bm, {"data": [mx.nd.ones((2, 3))], "bucket_key": 5}))[0].shape
        (2, 2)
        >>> sorted(m.buckets(bm)), m.current_bucket_key(bm)
        ([3, 5], 5)
    """
    if not callable(sym_gen):
        raise TypeError(f"module.bucketing_module: sym_gen must be callable, got {type(sym_gen).__name__}")
    o = parse_opts("module.bucketing_module", _BUCKETING_OPTS, opts, kw)
    mod_opts = {k: o[k] for k in ("contexts", "workload_list", "fixed_param_names")}
    return BucketingModule(sym_gen, o["default_bucket_key"], mod_opts)


def _bm(fname, mod) -> BucketingModule:
    if not isinstance(mod, BucketingModule):
        raise TypeError(f"module.{fname}: expected a BucketingModule, got {type(mod).__name__}")
    return mod


def buckets(mod) -> list:
    """The bucket keys a BucketingModule has made modules for (the default first)."""
    return list(_bm("buckets", mod)._buckets)


def current_bucket_key(mod):
    """The BucketingModule's current bucket key."""
    return _bm("current_bucket_key", mod)._cur_key


def bucket_module(mod, bucket_key=None) -> Module:
    """The Module of ``bucket_key`` (default: the current bucket) of a BucketingModule. A bucket
    that is not current may have lent its parameter arrays to the current one: use it through
    the BucketingModule (``switch_bucket``) to compute."""
    mod = _bm("bucket_module", mod)
    key = mod._cur_key if bucket_key is None else bucket_key
    if key not in mod._buckets:
        raise KeyError(f"module.bucket_module: no module for bucket {key!r} yet")
    return mod._buckets[key]


def switch_bucket(mod, bucket_key, data_shapes=None, label_shapes=None) -> BucketingModule:
    """Makes ``bucket_key`` current. A new bucket's module is bound on ``data_shapes`` /
    ``label_shapes`` with the default bucket's bind options (``for_training`` included, so a
    module bound for inference switches for inference); it shares the optimizer. The bucket
    adopts its parameters from the buckets holding them (no data copy); names no bucket holds
    are created with ``init_params``' initializer (and get their own optimizer state). A
    parameter name bound with another shape than in an earlier bucket raises MXFNError. The
    bucket left releases its last pass (its outputs and what its backward needed), so buckets
    share working memory; forward it again before reading its outputs."""
    return _switch(_bm("switch_bucket", mod), bucket_key, data_shapes, label_shapes)


def _switch(mod, bucket_key, data_shapes, label_shapes, new=None):
    fname = "switch_bucket"
    if mod._bind is None:
        raise MXFNError("module.switch_bucket: call bind first")
    if bucket_key not in mod._buckets:
        if data_shapes is None:
            raise MXFNError(f"module.switch_bucket: bucket {bucket_key!r} is new; give its data_shapes")
        new = mod._make(bucket_key) if new is None else new
        _native.mod_bind(new._h, _descs(fname, "data_shapes", data_shapes),
                         _descs(fname, "label_shapes", label_shapes), *mod._bind)
        _flush(new)
        shapes = _shapes_of(new)
        _check_shapes(mod, bucket_key, shapes)
        _check_workers_share(mod, bucket_key, new)
        _gather(mod, bucket_key, new)  # validates before it moves anything
        mod._buckets[bucket_key] = new
        for n, s in shapes.items():
            mod._shape.setdefault(n, (s, bucket_key))
        _set_indices(mod, new)
        if mod._monitor is not None:
            _orig["install_monitor"](new, mod._monitor)
        if optimizer_initialized(mod._default):
            _orig["borrow_optimizer"](new, mod._default)
    elif bucket_key != mod._cur_key:
        _gather(mod, bucket_key)
    if bucket_key != mod._cur_key:
        # Buckets share working memory: the pass the bucket left kept for backward goes back
        # to the allocator for this one's (MXNet's buckets share one memory pool).
        _native.mod_release_pass(mod._cur._h)
    mod._cur_key = bucket_key
    return mod


def _shapes_of(b: Module) -> dict[str, tuple]:
    """A bucket's bound parameter and auxiliary-state shapes by name (params first)."""
    args, aux = _native.mod_param_shapes(b._h)
    return {n: tuple(s) for n, s in [*args, *aux]}


def _check_shapes(mod, key, shapes):
    for n, s in shapes.items():
        seen = mod._shape.get(n)
        if seen is not None and seen[0] != s:
            raise MXFNError(f'module.switch_bucket: parameter "{n}" has shape {s} in bucket {key!r} '
                            f"but {seen[0]} in bucket {seen[1]!r}; buckets share parameters by name, "
                            f"so give it the same shape in every bucket or another name")


def _check_workers_share(mod, key, b: Module):
    """Several workers sum each update's gradients in one collective over the current bucket's
    parameters, so workers in different buckets must have the same parameter names: a bucket
    whose names differ from the default bucket's is refused (not left to a mismatched sum)."""
    if mod._default._dist is None or b is mod._default:
        return
    mine, default = set(param_names(b)), set(param_names(mod._default))
    if mine != default:
        raise MXFNError(f"module.switch_bucket: bucket {key!r} differs from the default bucket "
                        f"{mod._default_key!r} in its parameters (extra: {sorted(mine - default)}, "
                        f"missing: {sorted(default - mine)}); with several workers (a dist "
                        f"kvstore) every bucket must have the default bucket's parameters")


def _set_indices(mod, b: Module):
    """Gives ``b``'s parameters their optimizer indices: one per name for all buckets, the
    default bucket's in its order (MXNet's indices, so its ``.states`` files apply)."""
    names = param_names(b)
    for n in names:
        mod._index.setdefault(n, len(mod._index))
    _native.mod_set_param_indices(b._h, {n: mod._index[n] for n in names})


def _fresh(mod, key, b: Module, shapes, init=None) -> dict[str, Any]:
    """Values for names no bucket holds and none were given for, by ``init`` (default:
    ``init_params``' initializer) in sorted name order, as Module.init_params initialises."""
    if not shapes:
        return {}
    init = mod._init if init is None else init
    if init is None:
        raise MXFNError(f"module.switch_bucket: bucket {key!r} has parameters that no bucket holds "
                        f"and set_params was not given: {sorted(shapes)}; give them to set_params "
                        f"(or allow_missing) or call init_params, whose initializer creates them")
    attrs = symbol(b).attr_dict()
    return {n: initializer.apply(init, n, np.zeros(shapes[n], np.float32), attrs.get(n))
            for n in sorted(shapes)}


def _gather(mod, key, b: Module | None = None):
    """Makes bucket ``key``'s module whole: it adopts its names from the buckets holding them
    (their arrays move), takes values given for names no bucket held, and creates the rest."""
    if not mod._ready:
        return
    b = mod._buckets[key] if b is None else b
    shapes = _shapes_of(b)
    adopt: dict[Any, list[str]] = {}
    given: dict[str, Any] = {}
    new: dict[str, tuple] = {}
    for n, s in shapes.items():
        if n in mod._pending:
            given[n] = mod._pending[n][1]
        elif n in mod._holder:
            if mod._holder[n] != key:
                adopt.setdefault(mod._holder[n], []).append(n)
        else:
            new[n] = s
    if not (adopt or given or new) and params_initialized(b):
        return
    given.update(_fresh(mod, key, b, new))
    _native.mod_assemble_params(b._h, [(mod._buckets[k]._h, names) for k, names in adopt.items()],
                                {n: _handle(v) for n, v in given.items()})
    for n in shapes:
        mod._holder[n] = key
        mod._pending.pop(n, None)


def _batch_descs(b, key, arrays, names):
    given = b.get(key) if isinstance(b, Mapping) else getattr(b, key, None)
    if given:
        return list(given)
    return [(n, tuple(np.shape(a))) for n, a in zip(names, arrays or [])]


def _bm_bind(mod, opts=None, /, **kw):
    o = parse_opts("module.bind", _BIND_OPTS, opts, kw)
    if o["shared_module"] is not None:
        raise MXFNError("module.bind: shared_module is not supported for a BucketingModule")
    if mod._bind is not None and not o["force_rebind"]:
        _log.warning("module.bind: already bound; ignoring (pass force_rebind to rebind)")
        return mod
    d, dk = mod._default, mod._default_key
    if mod._bind is not None:
        # force_rebind drops the other buckets (made again on use), keeping every value: the
        # default bucket takes its names back, the others' names wait in _pending.
        _gather(mod, dk)
        for key, b in mod._buckets.items():
            names = [n for n, k in mod._holder.items() if k == key and key != dk]
            if names:
                a, x = _native.mod_held_params(b._h, names)
                mod._pending.update({n: (False, NDArray(h)) for n, h in a})
                mod._pending.update({n: (True, NDArray(h)) for n, h in x})
        mod._holder = {n: k for n, k in mod._holder.items() if k == dk}
        mod._buckets = {dk: d}
        mod._cur_key = dk
    _orig["bind"](d, o)
    req = o["grad_req"]
    req = {"": req} if isinstance(req, str) else {str(k): str(v) for k, v in req.items()}
    mod._bind = (o["for_training"], o["inputs_need_grad"], False, req)
    mod._shape = {n: (s, dk) for n, s in _shapes_of(d).items()}
    _set_indices(mod, d)
    return mod


def _bm_forward(mod, data_batch, is_train=None):
    key = batch_bucket_key(data_batch)
    key = mod._default_key if key is None else key
    if key not in mod._buckets:
        try:
            data = batch_data(data_batch)
        except (KeyError, AttributeError):
            raise MXFNError("module.forward: data_batch must be a DataBatch or a map with \"data\"") from None
        new = mod._make(key)
        _switch(mod, key, _batch_descs(data_batch, "provide_data", data, data_names(new)),
                _batch_descs(data_batch, "provide_label", batch_label(data_batch), label_names(new)) or None,
                new)
    else:
        switch_bucket(mod, key)
    _orig["forward"](mod._cur, data_batch, is_train)
    return mod


def _bm_init_optimizer(mod, opts=None, /, **kw):
    d, cur = mod._default, mod._cur_key
    _gather(mod, mod._default_key)  # the default bucket installs it: it needs its values
    try:
        _orig["init_optimizer"](d, opts, **kw)
        for k, b in mod._buckets.items():
            if k != mod._default_key:
                _check_workers_share(mod, k, b)
                _orig["borrow_optimizer"](b, d)
    finally:
        _gather(mod, cur)
    return mod


def _bm_borrow_optimizer(mod, shared_module):
    src = shared_module._default if isinstance(shared_module, BucketingModule) else shared_module
    for b in mod._buckets.values():
        _orig["borrow_optimizer"](b, src)
    return mod


def _bm_install_monitor(mod, monitor):
    for b in mod._buckets.values():
        _orig["install_monitor"](b, monitor)
    mod._monitor = monitor
    return mod


def _bm_load_optimizer_states(mod, fname):
    _orig["load_optimizer_states"](mod._default, fname)
    return mod


# -- parameters of every bucket --------------------------------------------------------------

def _bm_get_params(mod):
    """``(arg_params, aux_params)`` of every bucket (copies): the default bucket's names in its
    order, then the names only other buckets have, then values given for buckets not made yet."""
    if not mod._ready:
        return _orig["get_params"](mod._cur)
    got: dict[str, tuple[bool, NDArray]] = {}
    for key, b in mod._buckets.items():
        names = [n for n, k in mod._holder.items() if k == key]
        if names:
            a, x = _native.mod_held_params(b._h, names)
            got.update({n: (False, NDArray(h)) for n, h in a})
            got.update({n: (True, NDArray(h)) for n, h in x})
    got.update(mod._pending)
    order = [n for b in mod._buckets.values() for n in [*param_names(b), *aux_names(b)]]
    order = list(dict.fromkeys([*order, *got]))
    args = {n: got[n][1] for n in order if n in got and not got[n][0]}
    aux = {n: got[n][1] for n in order if n in got and got[n][0]}
    return args, aux


def _given(fname, o):
    """The given ``arg_params`` / ``aux_params`` as NDArrays (None when not given)."""
    out = []
    for key in ("arg_params", "aux_params"):
        d = o[key]
        if d is not None and not isinstance(d, Mapping):
            raise TypeError(f'module.{fname}: "{key}" must be a dict name -> array, got {type(d).__name__}')
        out.append(None if d is None else {str(k): NDArray(_handle(v)) for k, v in d.items()})
    return out


def _put_params(mod, fname, o, init):
    """``init_params`` (``init`` is its initializer) or ``set_params`` (``init`` None) of a
    BucketingModule: the current bucket's names go through the Module function (its checks
    of names, shapes and ``allow_missing``); names other buckets hold are set there; names of
    no bucket made yet are kept for the buckets that have them. So ``allow_extra`` is moot."""
    if mod._ready and not o["force_init"]:
        _log.warning(f"module.{fname}: parameters already initialised; ignoring (pass force_init)")
        return mod
    cur, key = mod._cur, mod._cur_key
    args, aux = _given(fname, o)
    mine = {*param_names(cur), *aux_names(cur)}
    others = {n: (False, v) for n, v in (args or {}).items() if n not in mine}
    others.update({n: (True, v) for n, v in (aux or {}).items() if n not in mine})
    for n, (_, v) in others.items():
        seen = mod._shape.get(n)
        if seen is not None and tuple(v.shape) != seen[0]:
            raise MXFNError(f'module.{fname}: parameter "{n}": expected shape {seen[0]} (its shape in '
                            f"bucket {seen[1]!r}), got {tuple(v.shape)}")

    def only_mine(d):
        return None if d is None else {n: v for n, v in d.items() if n in mine}

    # Re-initialising: the names only other buckets hold are made again too.
    remade: dict[Any, dict[str, Any]] = {}
    if init is not None and mod._ready:
        stale: dict[Any, dict[str, tuple]] = {}
        for n, k in mod._holder.items():
            if k != key and n not in others:
                stale.setdefault(k, {})[n] = mod._shape[n][0]
        remade = {k: _fresh(mod, k, mod._buckets[k], shapes, init) for k, shapes in stale.items()}
    spec = _INIT_OPTS if init is not None else _SET_OPTS
    call = {k: v for k, v in o.items() if k in spec}
    call.update(arg_params=only_mine(args), aux_params=only_mine(aux), force_init=True)
    if init is not None:
        call["initializer"] = init
    _orig["init_params" if init is not None else "set_params"](cur, call)
    if init is not None:
        mod._init = init
    elif mod._init is None and o["allow_missing"]:
        mod._init = initializer.uniform(0.01)  # what Module.set_params initialises missing names with
    mod._ready = True
    for n in mine:
        mod._holder[n] = key
        mod._pending.pop(n, None)
    if init is not None:
        mod._pending = {}
    for n, (is_aux, v) in others.items():
        k = mod._holder.get(n)
        if k is None:
            mod._pending[n] = (is_aux, v)
        else:
            remade.setdefault(k, {})[n] = v
    for k, vals in remade.items():
        if vals:
            _native.mod_set_held_params(mod._buckets[k]._h, {n: _handle(v) for n, v in vals.items()})
    return mod


def _bm_init_params(mod, opts=None, /, **kw):
    """Initialises the parameters: the current bucket's through ``init_params`` of its Module,
    with ``force_init`` also those only other buckets hold; the initializer is kept to create
    the names of buckets made later. Given values for names of other buckets go to them (or,
    for buckets not made yet, wait for them)."""
    o = parse_opts("module.init_params", _INIT_OPTS, opts, kw)
    init = initializer.create(o["initializer"]) if o["initializer"] is not None else initializer.uniform(0.01)
    return _put_params(mod, "init_params", o, init)


def _bm_set_params(mod, opts=None, /, **kw):
    """Sets parameters of any bucket: names of the current bucket as Module.set_params, names
    other buckets hold there, names of buckets not made yet when those are made."""
    o = parse_opts("module.set_params", _SET_OPTS, opts, kw)
    return _put_params(mod, "set_params", o, None)


def _bm_save_params(mod, fname):
    args, aux = _bm_get_params(mod)
    nd.save(fname, {**{f"arg:{n}": v for n, v in args.items()}, **{f"aux:{n}": v for n, v in aux.items()}})
    return mod


def _bm_load_params(mod, fname):
    d = nd.load(fname)
    if not isinstance(d, dict):
        raise MXFNError(f"module.load_params: {fname}: expected a dict of arg:/aux: arrays, got a list")
    args = {k[4:]: v for k, v in d.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in d.items() if k.startswith("aux:")}
    bad = [k for k in d if not k.startswith(("arg:", "aux:"))]
    if bad:
        raise MXFNError(f'module.load_params: {fname}: key "{bad[0]}" has neither the arg: nor the aux: prefix')
    return _bm_set_params(mod, arg_params=args, aux_params=aux, force_init=True)


def _bm_save_checkpoint(mod, opts=None, /, **kw):
    o = parse_opts("module.save_checkpoint", _SAVE_OPTS, opts, kw)
    _check_epoch("module.save_checkpoint", o["epoch"])
    if not mod._ready:
        raise MXFNError("module.save_checkpoint: call init_params first")
    sym_ns.save(symbol(mod._default), f"{o['prefix']}-symbol.json")
    _bm_save_params(mod, "%s-%04d.params" % (o["prefix"], o["epoch"]))
    if o["save_opt_states"]:
        _orig["save_optimizer_states"](mod._default, "%s-%04d.states" % (o["prefix"], o["epoch"]))
    return mod


def _bm_forward_backward(mod, data_batch):
    _bm_forward(mod, data_batch, True)
    _orig["backward"](mod._cur)
    return mod


_BM_CUSTOM: dict[str, Callable[..., Any]] = {
    "bind": _bm_bind, "forward": _bm_forward, "init_optimizer": _bm_init_optimizer,
    "borrow_optimizer": _bm_borrow_optimizer, "install_monitor": _bm_install_monitor,
    "load_optimizer_states": _bm_load_optimizer_states, "save_checkpoint": _bm_save_checkpoint,
    "optimizer": lambda mod: mod._default._opt, "forward_backward": _bm_forward_backward,
    "init_params": _bm_init_params, "set_params": _bm_set_params, "get_params": _bm_get_params,
    "params": _bm_get_params, "arg_params": lambda mod: _bm_get_params(mod)[0],
    "aux_params": lambda mod: _bm_get_params(mod)[1], "save_params": _bm_save_params,
    "load_params": _bm_load_params,
}
# act on the current bucket's module, return the BucketingModule
_BM_EFFECT = ("backward", "update", "update_metric", "reshape", "save_optimizer_states")
# ask the current bucket's module
_BM_QUERY = ("data_names", "label_names", "output_names", "param_names", "aux_names", "data_shapes",
             "label_shapes", "output_shapes", "symbol", "contexts", "binded", "params_initialized",
             "optimizer_initialized", "outputs", "outputs_merged", "input_grads", "input_grads_merged",
             "grad_arrays")
# The Module-only functions of mxfn._module, which the BucketingModule versions call.
_orig: dict[str, Callable[..., Any]] = {
    name: getattr(_module, name) for name in (*_BM_CUSTOM, *_BM_EFFECT, *_BM_QUERY)}


def _dispatching(name: str) -> Callable[..., Any]:
    f = _orig[name]
    impl: Callable[..., Any]
    if name in _BM_CUSTOM:
        impl = _BM_CUSTOM[name]
    elif name in _BM_EFFECT:
        def impl(mod, *a, **kw):
            f(mod._cur, *a, **kw)
            return mod
    else:
        def impl(mod, *a, **kw):
            return f(mod._cur, *a, **kw)

    @functools.wraps(f)
    def g(mod, *a, **kw):
        if name == "borrow_optimizer" and a and isinstance(a[0], BucketingModule):
            a = (a[0]._default, *a[1:])
        if isinstance(mod, BucketingModule):
            return impl(mod, *a, **kw)
        return f(mod, *a, **kw)
    del g.__wrapped__
    return g


# function name -> the version taking a Module or a BucketingModule (what mx.module exposes)
DISPATCHING: dict[str, Callable[..., Any]] = {name: _dispatching(name) for name in _orig}


# mxfn._module's namespace as the training loops (mxfn._fit) drive it: every function in the
# version that also takes a BucketingModule.
MODULE_API = types.SimpleNamespace(**{**vars(_module), **DISPATCHING, "BucketingModule": BucketingModule})
