"""The high-level module API: fit, score, predict, fit_params, history (SPEC §2, §8).

``fit`` and ``score`` run the core's one fit loop and one score loop (shared with the Rust
``Module::fit`` / ``Module::score``, which fix MXNet's order of things) over steps written
here with the intermediate functions of ``mxfn.module`` (bind, init_params, init_optimizer,
forward_backward, update, update_metric, forward, outputs_merged, …), so Python iterators,
metrics, callbacks, logging (logger ``"mxfn"``) and monitors work as they are. ``mxfn.module``
re-exports them; ``plot_history`` is re-exported by ``mx.visualization``.
"""

from __future__ import annotations

import logging
import numbers
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._errors import MXFNError
from ._maps import FrozenMap
from . import _native, initializer, io, metric, monitor as mon_ns, ndarray as nd
from ._bucketing import MODULE_API
from ._opts import REQUIRED, documented, opt, parse_opts
from .callback import batch_end_param
from .ndarray import NDArray

_LOG = logging.getLogger("mxfn")

__all__ = ["FitParams", "fit_params", "fit", "score", "predict", "predict_every_batch", "predict_batch",
           "history", "plot_history"]


def _m():
    # The module namespace the loops drive (tests substitute a stand-in).
    return MODULE_API



def _callbacks(fname, key, cb) -> list:
    """A callback option as a list: None -> [], a function -> [f], a list stays."""
    if cb is None:
        return []
    cbs = list(cb) if isinstance(cb, (list, tuple)) else [cb]
    for c in cbs:
        if not callable(c):
            raise TypeError(f'{fname}: "{key}" must be a function or a list of functions, '
                            f"got {type(c).__name__}")
    return cbs


# -- fit_params -----------------------------------------------------------------------------

FIT_PARAMS_OPTS = {
    "eval_metric": opt("acc", None, "training metric: a metric value, a name such as \"acc\", or a list"),
    "validation_metric": opt(None, None, "metric for eval_data; None = eval_metric"),
    "kvstore": opt("local", None, 'kvstore name ("local", "device") or a kvstore value'),
    "optimizer": opt("sgd", None, 'optimizer name such as "adam", or an optimizer value'),
    "optimizer_params": opt({"learning_rate": 0.01}, Mapping,
                            "options of a named optimizer (ignored when left at the default "
                            "and optimizer is a value)"),
    "initializer": opt(None, None, "parameter initializer; None = init.uniform(0.01)"),
    "arg_params": opt(None, Mapping, "initial argument parameters name -> array"),
    "aux_params": opt(None, Mapping, "initial auxiliary states name -> array"),
    "allow_missing": opt(False, bool, "let the initializer fill params missing from arg_params"),
    "force_rebind": opt(False, bool, "rebind even if the module is bound"),
    "force_init": opt(False, bool, "re-initialise params even if initialised"),
    "begin_epoch": opt(0, int, "number of the first epoch (epochs run from begin_epoch to num_epoch - 1)"),
    "monitor": opt(None, None, "an mx.monitor value installed on the executors"),
    "batch_end_callback": opt(None, None, "f(BatchEndParam) or a list, after every training batch"),
    "epoch_end_callback": opt(None, None, "f(epoch, symbol, arg_params, aux_params) or a list"),
    "eval_end_callback": opt(None, None, "f(BatchEndParam) or a list, after each evaluation"),
    "eval_batch_end_callback": opt(None, None, "f(BatchEndParam) or a list, after every evaluation batch"),
    "rank0_reports": opt(True, bool, "with a dist kvstore of several workers, only rank 0 logs (logger "
                                     "\"mxfn\", INFO) and runs epoch_end_callback (checkpoints); "
                                     "False: every worker does"),
}

_DEFAULT_OPT_PARAMS = {"learning_rate": 0.01}


class FitParams(FrozenMap):
    """The read-only options map of ``fit`` (built by ``fit_params``)."""

    __slots__ = ()

    def __reduce__(self):
        return (FitParams, (dict(self),))


@documented(FIT_PARAMS_OPTS)
def fit_params(opts=None, /, **kw) -> FitParams:
    """The training options of ``fit``, checked and defaulted.

    %OPTIONS%

    Returns:
        A read-only FitParams map with every key (``toolz.assoc`` gives a new dict).

    Example:
        >>> fp = fit_params(optimizer="adam", begin_epoch=2)
        >>> fp["optimizer"], fp["begin_epoch"], fp["eval_metric"], fp["optimizer_params"]
        ('adam', 2, 'acc', {'learning_rate': 0.01})
        >>> fp["num"] = 1
        Traceback (most recent call last):
        ...
        TypeError: 'FitParams' object does not support item assignment
    """
    fname = "module.fit_params"
    o = dict(parse_opts(fname, FIT_PARAMS_OPTS, opts, kw))
    if isinstance(o["begin_epoch"], numbers.Integral) and o["begin_epoch"] < 0:
        raise MXFNError(f'{fname}: "begin_epoch" must be >= 0, got {o["begin_epoch"]}')
    for key in ("batch_end_callback", "epoch_end_callback", "eval_end_callback", "eval_batch_end_callback"):
        _callbacks(fname, key, o[key])
    if o["initializer"] is None:
        o["initializer"] = initializer.uniform(0.01)
    o["optimizer_params"] = FrozenMap(o["optimizer_params"])
    return FitParams(o)


# -- history --------------------------------------------------------------------------------

_HISTORY: weakref.WeakKeyDictionary[Any, dict[str, list[float]]] = weakref.WeakKeyDictionary()
_HISTORY_BY_ID: dict[int, dict[str, list[float]]] = {}  # for modules that cannot be weakly referenced


def _history_of(mod) -> dict:
    try:
        return _HISTORY.setdefault(mod, {})
    except TypeError:
        return _HISTORY_BY_ID.setdefault(id(mod), {})


def _record(mod, key, value):
    _history_of(mod).setdefault(key, []).append(value)


def history(mod) -> dict:
    """Per-epoch metric values and times recorded by ``fit`` on ``mod``.

    Returns:
        A new dict ``{"train-accuracy": [...], "validation-accuracy": [...], "time": [...]}``:
        one entry per epoch run (validation only for epochs evaluated), accumulated across
        ``fit`` calls; ``{}`` before any.
    """
    h = _HISTORY.get(mod) if _weakrefable(mod) else _HISTORY_BY_ID.get(id(mod))
    return {k: list(v) for k, v in (h or {}).items()}


def _weakrefable(x) -> bool:
    try:
        weakref.ref(x)
        return True
    except TypeError:
        return False


# -- helpers over iterators and batches ---------------------------------------------------------

def _bound_batch_size(mod, fname) -> int:
    m = _m()
    try:
        shapes = m.data_shapes(mod)
    except MXFNError:
        shapes = None
    if not shapes:
        raise MXFNError(f"{fname}: the module is not bound; call bind first (an array eval_data "
                        f"is batched with the bound batch size)")
    d = io.as_data_desc(shapes[0])
    return int(d["shape"][io.batch_axis(d)])


def _as_iter(mod, data, fname):
    """An iterator over ``data``: iterators pass through; a numpy array / NDArray / list of
    arrays is batched with the bound batch size (the last batch padded)."""
    if isinstance(data, (np.ndarray, NDArray)) or (
            isinstance(data, (list, tuple)) and data and all(isinstance(x, (np.ndarray, NDArray)) for x in data)):
        arrays = [data] if isinstance(data, (np.ndarray, NDArray)) else list(data)
        names = list(_m().data_names(mod))
        if len(arrays) != len(names):
            raise MXFNError(f"{fname}: the module has {len(names)} data inputs {names}, got {len(arrays)} arrays")
        return io.ndarray_iter(dict(zip(names, arrays)), batch_size=_bound_batch_size(mod, fname),
                               last_batch_handle="pad")
    if data is None or not (hasattr(data, "next") or hasattr(data, "__next__")):
        raise TypeError(f"{fname}: eval_data must be a data iterator, a numpy array or an NDArray, "
                        f"got {type(data).__name__}")
    return data


def _batches(it, num_batch):
    """Up to ``num_batch`` batches of the rest of the epoch (None or -1 = all)."""
    n = 0
    for b in it:
        if num_batch is not None and num_batch >= 0 and n >= num_batch:
            break
        yield n, b
        n += 1


def _unpad(outs, pad):
    if not pad:
        return [o.copy() for o in outs]
    return [nd.slice_axis(o, 0, 0, o.shape[0] - pad) for o in outs]


def _num_batch(fname, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f'{fname}: option "num_batch" expects int or None, got {type(v).__name__}')
    return int(v)


def _metric(m):
    return metric.create(m)


# -- data parallelism -----------------------------------------------------------------------

def _dist_of(mod):
    """The workers (``_dist.MPICollective``) a module trains with, when there are several."""
    d = getattr(mod, "_dist", None)
    if d is None:  # a BucketingModule: its default bucket's module
        d = getattr(getattr(mod, "_default", None), "_dist", None)
    return d


def _metric_state(m):
    if isinstance(m, metric.EvalMetric):
        return _native.metric_state(m._h)
    if isinstance(m, metric.CompositeMetric):
        return [_metric_state(c) for c in m.metrics]
    return (list(m._local), list(m._global))  # CustomMetric: (sum, count) pairs


def _pool(m, states, global_):
    if isinstance(m, metric.EvalMetric):
        return _native.metric_pooled(m._h, states, global_)
    if isinstance(m, metric.CompositeMetric):
        return [pair for i, c in enumerate(m.metrics) for pair in _pool(c, [s[i] for s in states], global_)]
    k = 1 if global_ else 0
    total = sum(s[k][0] for s in states)
    count = sum(s[k][1] for s in states)
    return [(m.name, total / count if count else float("nan"))]


def pooled_name_value(eval_metric, dist, global_=False) -> list:
    """``[(name, value), …]`` of ``eval_metric`` pooled over the workers (their sums added, in
    rank order, as if one metric had seen every worker's batches): local values, or global
    ones with ``global_``. Every worker must call it at the same point."""
    m = metric.create(eval_metric)
    return _pool(m, dist.allgather(_metric_state(m)), global_)


class _RankZeroOnly(logging.Filter):
    """Drops the INFO (and lower) records of a worker other than rank 0."""

    def filter(self, record):
        return record.levelno >= logging.WARNING


# -- score ----------------------------------------------------------------------------------

SCORE_OPTS = {
    "eval_data": opt(REQUIRED, None, "data iterator, or a numpy array / NDArray (batched with the bound batch size)"),
    "eval_metric": opt(REQUIRED, None, "metric value or name (or a list)"),
    "num_batch": opt(None, int, "evaluate at most this many batches; None or -1 = all"),
    "batch_end_callback": opt(None, None, "f(BatchEndParam) or a list, after every batch"),
    "score_end_callback": opt(None, None, "f(BatchEndParam) or a list, once at the end (nbatch = batches run)"),
    "reset": opt(True, bool, "reset eval_data first"),
    "epoch": opt(0, int, "epoch number passed to the callbacks"),
}


@documented(SCORE_OPTS)
def score(mod, opts=None, /, **kw) -> list:
    """Runs the module over ``eval_data`` (forward, is_train=False) and evaluates the metric.

    The metric is reset first. Padded samples of the last batch are excluded from the metric.

    %OPTIONS%

    Returns:
        ``[(name, value), …]`` (the metric's ``get_name_value``).
    """
    fname = "module.score"
    m = _m()
    o = parse_opts(fname, SCORE_OPTS, opts, kw)
    batch_cbs = _callbacks(fname, "batch_end_callback", o["batch_end_callback"])
    end_cbs = _callbacks(fname, "score_end_callback", o["score_end_callback"])
    it = _as_iter(mod, o["eval_data"], fname)
    if o["reset"]:
        io.reset(it)
    eval_metric = _metric(o["eval_metric"])
    metric.reset(eval_metric)
    steps = _ScoreSteps(m, mod, it, eval_metric, o["epoch"], batch_cbs)
    num_batch = _num_batch(fname, o["num_batch"])
    actual = _native.score_loop(steps, None if num_batch is None or num_batch < 0 else num_batch)
    for cb in end_cbs:
        cb(batch_end_param(o["epoch"], actual, eval_metric, steps.locals(actual)))
    dist = _dist_of(mod)
    if dist is not None:
        # Every worker scored its part of the data: the value is the pooled one.
        return pooled_name_value(eval_metric, dist)
    return metric.get_name_value(eval_metric)


class _ScoreSteps:
    """``score``'s steps of the core's one score loop (``mxfn_core::module::run_loop``, which
    fixes their order for Python and Rust alike)."""

    def __init__(self, m, mod, it, eval_metric, epoch, batch_cbs):
        self.m, self.mod, self.it, self.eval_metric = m, mod, it, eval_metric
        self.epoch, self.batch_cbs = epoch, batch_cbs
        self.batches = iter(it)
        self.batch = None

    def next_batch(self):
        return next(self.batches, None)

    def eval_batch(self, batch):
        m, mod = self.m, self.mod
        self.batch = batch
        m.forward(mod, batch, is_train=False)
        pad = io.batch_pad(batch)
        labels = io.batch_label(batch) or []
        if pad:
            metric.update(self.eval_metric, _unpad(labels, pad), _unpad(m.outputs_merged(mod), pad))
        else:
            m.update_metric(mod, self.eval_metric, labels)

    def batch_end(self, nbatch):
        for cb in self.batch_cbs:
            cb(batch_end_param(self.epoch, nbatch, self.eval_metric, self.locals(nbatch)))

    def locals(self, nbatch) -> dict:
        """What MXNet's callbacks find in ``BatchEndParam.locals``."""
        return {"self": self.mod, "eval_data": self.it, "eval_metric": self.eval_metric,
                "epoch": self.epoch, "nbatch": nbatch, "eval_batch": self.batch}


# -- predict --------------------------------------------------------------------------------

PREDICT_OPTS = {
    "eval_data": opt(REQUIRED, None, "data iterator, or a numpy array / NDArray (batched with the bound batch size)"),
    "num_batch": opt(None, int, "predict at most this many batches; None or -1 = all"),
    "reset": opt(True, bool, "reset eval_data first"),
    "merge_batches": opt(True, bool, "concatenate the batches (False = what predict_every_batch gives)"),
}
_EVERY_BATCH_OPTS = {k: v for k, v in PREDICT_OPTS.items() if k != "merge_batches"}


def predict_batch(mod, data_batch) -> list:
    """The outputs for one batch (forward with is_train=False).

    Returns:
        ``[out1, out2, …]`` merged over devices, with the batch's padded samples removed.
    """
    m = _m()
    m.forward(mod, data_batch, is_train=False)
    return _unpad(m.outputs_merged(mod), io.batch_pad(data_batch))


def _predict_batches(fname, mod, o, merge=False) -> list:
    """Every batch's outputs (``merge``: already concatenated, ``[[out1, out2, …]]``). A core
    iterator read from its start runs the whole loop in the core, in one call."""
    it = _as_iter(mod, o["eval_data"], fname)
    num_batch = _num_batch(fname, o["num_batch"])
    m = _m()
    module_cls: Any = getattr(m, "Module", ())
    if isinstance(it, io.NativeIter) and o["reset"] and isinstance(mod, module_cls):
        m._mod(fname.rsplit(".", 1)[-1], mod)
        n = None if num_batch is None or num_batch < 0 else num_batch
        return [[NDArray(h) for h in outs] for outs in _native.mod_predict(mod._h, it._h, n, merge)]
    if o["reset"]:
        io.reset(it)
    per_batch = [predict_batch(mod, b) for _, b in _batches(it, num_batch)]
    if not merge or not per_batch:
        return per_batch
    return [[nd.concat([b[i] for b in per_batch], dim=0) if len(per_batch) > 1 else per_batch[0][i]
             for i in range(len(per_batch[0]))]]


@documented(_EVERY_BATCH_OPTS)
def predict_every_batch(mod, opts=None, /, **kw) -> list:
    """The outputs of every batch of ``eval_data``, padding removed.

    %OPTIONS%

    Returns:
        ``[[out1_b1, out2_b1, …], [out1_b2, …], …]``.
    """
    fname = "module.predict_every_batch"
    return _predict_batches(fname, mod, parse_opts(fname, _EVERY_BATCH_OPTS, opts, kw))


@documented(PREDICT_OPTS)
def predict(mod, opts=None, /, **kw) -> list:
    """Runs the module over ``eval_data`` (forward, is_train=False) and collects the outputs.

    %OPTIONS%

    Returns:
        ``[out1, out2, …]``, each the concatenation over batches (along axis 0) with the
        padded samples of the last batch removed — always a list, also for one output; ``[]``
        when no batch ran. With ``merge_batches=False``, what ``predict_every_batch`` gives.
    """
    fname = "module.predict"
    o = parse_opts(fname, PREDICT_OPTS, opts, kw)
    if not o["merge_batches"]:
        return _predict_batches(fname, mod, o)
    merged = _predict_batches(fname, mod, o, merge=True)
    return merged[0] if merged else []


# -- fit ------------------------------------------------------------------------------------

class _Unset:
    __slots__ = ()

    def __repr__(self):
        return "from fit_params"


_UNSET = _Unset()

FIT_OPTS = {
    "train_data": opt(None, None, "training data iterator, when not given positionally (Clojure form)"),
    "eval_data": opt(None, None, "validation data iterator; None = no validation"),
    "num_epoch": opt(1, int, "train until this epoch number (exclusive), starting at begin_epoch"),
    "fit_params": opt(None, Mapping, "a fit_params map; keys given directly win over it"),
    **{k: opt(_UNSET, None, s.doc) for k, s in FIT_PARAMS_OPTS.items()},
}


@documented(FIT_OPTS)
def fit(mod, train_data=None, opts=None, /, **kw):
    """Trains the module (MXNet's ``Module.fit``).

    Binds (for training, shapes from ``train_data``), installs the monitor, initialises the
    params and the optimizer, then per epoch: resets ``train_data`` (epoch 0 included) and the
    metric; for every batch ``forward_backward``, ``update``, ``update_metric``, monitor
    ``tic``/``toc_print`` and the batch-end callbacks (``BatchEndParam`` with 0-based
    ``nbatch``); logs ``Epoch[e] Train-<metric>=<value>`` and ``Epoch[e] Time cost=<s>`` on
    logger ``"mxfn"``; calls the epoch-end callbacks with ``(e, symbol, arg_params,
    aux_params)`` (checkpoint callbacks save it as number ``e + 1``); with ``eval_data``,
    ``score``s it (reset first) and logs ``Epoch[e] Validation-<metric>=<value>``; records
    the values in ``history(mod)``.

    %OPTIONS%

    Every ``fit_params`` key may be given directly; ``train_data`` may be given positionally
    or as ``opts["train_data"]`` (``fit(mod, {"train_data": it, "num_epoch": 2})``).

    Data parallel (SPEC §9.2): with ``kvstore="dist_sync"`` (or a dist kvstore value) in a
    program started by ``mpiexec -n N``, every worker starts from rank 0's parameters, sums
    its gradients with the others' (``rescale_grad = 1 / (batch_size × N)``) and keeps the same
    parameters; each reads its part of the data (``mnist_iter``, ``ndarray_iter`` and
    ``csv_iter`` default to ``num_parts=N, part_index=rank`` under mpiexec); the logged and
    recorded training metric and ``score``'s values are pooled over the workers; rank 0 alone
    logs and runs ``epoch_end_callback`` unless ``rank0_reports=False``.

    Returns:
        ``mod``.

    Example:
        >>> import mxfn as mx
        >>> net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2,
        ...                                                    name="fc"), name="softmax")
        >>> x = np.random.RandomState(0).normal(size=(20, 3)).astype("float32")
        >>> train = mx.io.ndarray_iter(x, label=(x[:, 0] > 0).astype("float32"), batch_size=8)
        >>> mod = fit(mx.module.module(net), train, num_epoch=2, optimizer_params={"learning_rate": 0.5})
        >>> sorted(history(mod)), len(history(mod)["time"])
        (['time', 'train-accuracy'], 2)
        >>> [o.shape for o in predict(mod, eval_data=x[:7])]
        [(7, 2)]
        >>> [name for name, _ in score(mod, eval_data=train, eval_metric="acc")]
        ['accuracy']
    """
    fname = "module.fit"
    m = _m()
    if isinstance(train_data, Mapping) and opts is None:
        train_data, opts = None, train_data
    o = parse_opts(fname, FIT_OPTS, opts, kw)
    if train_data is not None and o["train_data"] is not None:
        raise MXFNError(f'{fname}: train_data given twice, positionally and as option "train_data"')
    train = train_data if train_data is not None else o["train_data"]
    if train is None:
        raise MXFNError(f'{fname}: missing required option "train_data"')
    given = {k: o[k] for k in FIT_PARAMS_OPTS if o[k] is not _UNSET}
    fp = fit_params({**(o["fit_params"] or {}), **given})
    num_epoch = o["num_epoch"]
    if num_epoch < 0:
        raise MXFNError(f'{fname}: "num_epoch" must be >= 0, got {num_epoch}')
    batch_cbs = _callbacks(fname, "batch_end_callback", fp["batch_end_callback"])
    epoch_cbs = _callbacks(fname, "epoch_end_callback", fp["epoch_end_callback"])

    label_shapes = io.provide_label(train)
    m.bind(mod, data_shapes=io.provide_data(train), label_shapes=label_shapes or None,
           for_training=True, force_rebind=fp["force_rebind"])
    monitor = fp["monitor"]
    if monitor is not None:
        m.install_monitor(mod, monitor)
    m.init_params(mod, initializer=fp["initializer"], arg_params=fp["arg_params"], aux_params=fp["aux_params"],
                  allow_missing=fp["allow_missing"], force_init=fp["force_init"])
    opt_kw = {"kvstore": fp["kvstore"], "optimizer": fp["optimizer"]}
    if isinstance(fp["optimizer"], str) or dict(fp["optimizer_params"]) != _DEFAULT_OPT_PARAMS:
        opt_kw["optimizer_params"] = dict(fp["optimizer_params"])
    if fp["begin_epoch"] > 0 and isinstance(fp["optimizer"], str) \
            and "begin_num_update" not in opt_kw["optimizer_params"]:
        # Resuming: the updates of the epochs before begin_epoch count, so learning-rate
        # schedules (and Adam's bias correction) continue instead of restarting — MXNet 1.9.1
        # restarts them, a known bug not copied. One pass over the training data counts the
        # batches of an epoch; an optimizer given as a value keeps its own begin_num_update.
        per_epoch = io.reduce_batches(train, lambda n, _: n + 1)
        opt_kw["optimizer_params"]["begin_num_update"] = fp["begin_epoch"] * per_epoch
    m.init_optimizer(mod, **opt_kw)

    validation_metric = fp["validation_metric"] if fp["validation_metric"] is not None else fp["eval_metric"]
    eval_metric = _metric(fp["eval_metric"])

    dist = _dist_of(mod)
    quiet = dist is not None and dist.rank != 0 and fp["rank0_reports"]
    steps = _FitSteps(m, mod, train, o["eval_data"], fp, eval_metric, validation_metric, monitor,
                      batch_cbs, [] if quiet else epoch_cbs)
    steps.dist = dist
    mute = _RankZeroOnly() if quiet else None
    if mute is not None:
        _LOG.addFilter(mute)
    try:
        _native.fit_loop(steps, fp["begin_epoch"], max(num_epoch, fp["begin_epoch"]))
    finally:
        if mute is not None:
            _LOG.removeFilter(mute)
    return mod


class _FitSteps:
    """``fit``'s steps of the core's one fit loop (``mxfn_core::module::run_loop``, which
    fixes their order — MXNet's — for Python and Rust alike)."""

    def __init__(self, m, mod, train, eval_data, fp, eval_metric, validation_metric, monitor,
                 batch_cbs, epoch_cbs):
        self.m, self.mod, self.train, self.eval_data, self.fp = m, mod, train, eval_data, fp
        self.eval_metric, self.validation_metric = eval_metric, validation_metric
        self.monitor, self.batch_cbs, self.epoch_cbs = monitor, batch_cbs, epoch_cbs
        self.batches: Any = None
        self.data_batch = None
        self.eval_name_vals = []
        self.dist = None  # the workers, when several train together

    def begin_epoch(self, epoch):
        io.reset(self.train)
        metric.reset(self.eval_metric)
        self.batches = iter(self.train)
        self.eval_name_vals = metric.get_global_name_value(self.eval_metric)

    def next_batch(self):
        return next(self.batches, None)

    def train_batch(self, epoch, data_batch):
        m, mod = self.m, self.mod
        self.data_batch = data_batch
        if self.monitor is not None:
            mon_ns.tic(self.monitor)
        m.forward_backward(mod, data_batch)
        m.update(mod)
        m.update_metric(mod, self.eval_metric, io.batch_label(data_batch) or [])

    def batch_end(self, epoch, nbatch, last):
        if self.monitor is not None:
            mon_ns.toc_print(self.monitor)
        if last:
            self.eval_name_vals = (metric.get_global_name_value(self.eval_metric) if self.dist is None
                                   else pooled_name_value(self.eval_metric, self.dist, global_=True))
        if self.batch_cbs:
            param = batch_end_param(epoch, nbatch, self.eval_metric, self.locals(epoch, nbatch, last))
            for cb in self.batch_cbs:
                cb(param)

    def locals(self, epoch, nbatch, last) -> dict:
        """What MXNet's callbacks find in ``BatchEndParam.locals`` (its fit's local variables)."""
        return {"self": self.mod, "train_data": self.train, "eval_data": self.eval_data,
                "eval_metric": self.eval_metric, "validation_metric": self.validation_metric,
                "monitor": self.monitor, "epoch": epoch, "nbatch": nbatch,
                "data_batch": self.data_batch, "end_of_batch": last}

    def end_epoch(self, epoch, seconds):
        m, mod = self.m, self.mod
        for name, val in self.eval_name_vals:
            _LOG.info("Epoch[%d] Train-%s=%f", epoch, name, val)
            _record(mod, f"train-{name}", val)
        _LOG.info("Epoch[%d] Time cost=%.3f", epoch, seconds)
        _record(mod, "time", seconds)
        if self.epoch_cbs or _num_contexts(m, mod) > 1:
            arg_params, aux_params = m.get_params(mod)
            if _num_contexts(m, mod) > 1:
                # MXNet syncs the (averaged) aux states back to every device after each epoch.
                m.set_params(mod, arg_params=arg_params, aux_params=aux_params)
            for cb in self.epoch_cbs:
                cb(epoch, m.symbol(mod), arg_params, aux_params)

    def validate(self, epoch):
        if self.eval_data is None:
            return
        fp = self.fp
        res = score(self.mod, eval_data=self.eval_data, eval_metric=self.validation_metric,
                    score_end_callback=fp["eval_end_callback"],
                    batch_end_callback=fp["eval_batch_end_callback"], epoch=epoch)
        for name, val in res:
            _LOG.info("Epoch[%d] Validation-%s=%f", epoch, name, val)
            _record(self.mod, f"validation-{name}", val)


def _num_contexts(m, mod) -> int:
    try:
        ctxs = m.contexts(mod)
    except Exception:  # noqa: BLE001 - a module without the accessor has one context
        return 1
    return len(ctxs) if isinstance(ctxs, (list, tuple)) else 1


# -- plot_history ---------------------------------------------------------------------------

def plot_history(history, fname):  # noqa: A002 - SPEC's name
    """Draws a ``history(mod)`` map with matplotlib: one panel with every metric series per
    epoch (train and validation), one with the epoch times. Saves the figure to ``fname``
    (format from its extension).

    Raises MXFNError naming matplotlib when it is not installed.

    Returns:
        ``fname``.
    """
    import os
    if not isinstance(history, Mapping):
        raise TypeError(f"visualization.plot_history: history must be a map (from module.history), "
                        f"got {type(history).__name__}")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise MXFNError("visualization.plot_history needs the package matplotlib, which is not "
                        "installed; pip install matplotlib") from None
    metrics = {k: v for k, v in history.items() if k != "time"}
    panels = [p for p in (metrics, {"time": history["time"]} if "time" in history else {}) if p]
    fig = Figure(figsize=(7, 3.5 * max(1, len(panels))))
    FigureCanvasAgg(fig)
    for i, panel in enumerate(panels or [{}]):
        ax = fig.add_subplot(max(1, len(panels)), 1, i + 1)
        for key, values in panel.items():
            ax.plot(range(len(values)), list(values), marker="o", label=key)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("seconds" if "time" in panel else "value")
        if panel:
            ax.legend()
    fig.tight_layout()
    fig.savefig(os.fspath(fname))
    return fname
