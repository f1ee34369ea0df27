"""BucketingModule (MXNet's ``mx.mod.BucketingModule``): one Module per bucket key sharing the
parameters by name, the optimizer and its states, and the dispatch that lets every
``mx.module`` function take a BucketingModule — most act on the current bucket's module.

``mxfn.module`` exposes ``DISPATCHING`` (function name → the version that also takes a
BucketingModule) in place of ``mxfn._module``'s Module-only functions.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import _module, _native
from ._errors import MXFNError
from ._module import (_BIND_OPTS, _MODULE_OPTS, Module, _descs, _flush, _log, data_names, label_names,
                      module, optimizer_initialized, params_initialized)
from ._opts import REQUIRED, documented, opt, parse_opts
from .io import batch_bucket_key, batch_data, batch_label

class BucketingModule:
    """A BucketingModule value (made by ``bucketing_module``): one Module per bucket key, made
    lazily by ``forward``/``switch_bucket``, all sharing the parameters (by name), the optimizer
    and its states. Every ``mx.module`` function accepts it; most act on the current bucket."""

    __slots__ = ("_sym_gen", "_default_key", "_mod_opts", "_buckets", "_cur_key", "_bind",
                 "_monitor", "__weakref__")

    def __init__(self, sym_gen, default_key, mod_opts):
        self._sym_gen = sym_gen
        self._default_key = default_key
        self._mod_opts = mod_opts
        self._buckets = {default_key: self._make(default_key)}
        self._cur_key = default_key
        self._bind = None
        self._monitor = None

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
    the bucket switched to adopts the previous bucket's arrays. ``save_checkpoint`` writes
    the default bucket's symbol with the shared params.

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
    """The Module of ``bucket_key`` (default: the current bucket) of a BucketingModule."""
    mod = _bm("bucket_module", mod)
    key = mod._cur_key if bucket_key is None else bucket_key
    if key not in mod._buckets:
        raise KeyError(f"module.bucket_module: no module for bucket {key!r} yet")
    return mod._buckets[key]


def switch_bucket(mod, bucket_key, data_shapes=None, label_shapes=None) -> BucketingModule:
    """Makes ``bucket_key`` current: binds a new bucket's module (on ``data_shapes`` /
    ``label_shapes``, with the default bucket's bind options) sharing the parameters and the
    optimizer; an existing bucket adopts the current parameters (no data copy)."""
    return _switch(_bm("switch_bucket", mod), bucket_key, data_shapes, label_shapes)


def _switch(mod, bucket_key, data_shapes, label_shapes, new=None):
    fname = "switch_bucket"
    if mod._bind is None:
        raise MXFNError("module.switch_bucket: call bind first")
    cur = mod._cur
    if bucket_key not in mod._buckets:
        if data_shapes is None:
            raise MXFNError(f"module.switch_bucket: bucket {bucket_key!r} is new; give its data_shapes")
        new = mod._make(bucket_key) if new is None else new
        _native.mod_bind(new._h, _descs(fname, "data_shapes", data_shapes),
                         _descs(fname, "label_shapes", label_shapes), *mod._bind)
        _flush(new)
        if mod._monitor is not None:
            _orig["install_monitor"](new, mod._monitor)
        mod._buckets[bucket_key] = new
        if params_initialized(cur):
            _native.mod_share_params(new._h, cur._h)
        if optimizer_initialized(mod._default):
            _orig["borrow_optimizer"](new, mod._default)
    elif bucket_key != mod._cur_key and params_initialized(cur):
        _native.mod_share_params(mod._buckets[bucket_key]._h, cur._h)
    mod._cur_key = bucket_key
    return mod


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
    if mod._bind is not None:  # force_rebind: keep the current params in the default bucket
        if mod._cur_key != mod._default_key and params_initialized(mod._cur):
            _native.mod_share_params(mod._default._h, mod._cur._h)
        mod._buckets = {mod._default_key: mod._default}
        mod._cur_key = mod._default_key
    _orig["bind"](mod._default, o)
    req = o["grad_req"]
    req = {"": req} if isinstance(req, str) else {str(k): str(v) for k, v in req.items()}
    mod._bind = (o["for_training"], o["inputs_need_grad"], False, req)
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
    d = mod._default
    if mod._cur_key != mod._default_key and params_initialized(mod._cur):
        _native.mod_share_params(d._h, mod._cur._h)
    _orig["init_optimizer"](d, opts, **kw)
    for k, b in mod._buckets.items():
        if k != mod._default_key:
            _orig["borrow_optimizer"](b, d)
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


def _bm_save_checkpoint(mod, opts=None, /, **kw):
    if mod._cur_key != mod._default_key and params_initialized(mod._cur):
        _native.mod_share_params(mod._default._h, mod._cur._h)
    _orig["save_checkpoint"](mod._default, opts, **kw)
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
}
# act on the current bucket's module, return the BucketingModule
_BM_EFFECT = ("init_params", "set_params", "backward", "update", "update_metric", "reshape",
              "save_params", "load_params", "save_optimizer_states")
# ask the current bucket's module
_BM_QUERY = ("data_names", "label_names", "output_names", "param_names", "aux_names", "data_shapes",
             "label_shapes", "output_shapes", "symbol", "contexts", "binded", "params_initialized",
             "optimizer_initialized", "outputs", "outputs_merged", "input_grads", "input_grads_merged",
             "grad_arrays", "get_params", "params", "arg_params", "aux_params")
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
