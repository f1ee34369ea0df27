"""mx.callback: batch-end and epoch-end callbacks for ``module.fit`` / ``module.score``.

A batch-end callback is called with a ``BatchEndParam`` map (``epoch``, ``nbatch``,
``eval_metric``, ``locals``; also readable as attributes, as in MXNet). An epoch-end
callback is called as ``f(epoch, symbol, arg_params, aux_params)``. Messages go to the
``logging`` logger ``"mxfn"``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._errors import MXFNError
from ._maps import FrozenMap
from . import _module, metric as mt, ndarray as nd, symbol as sym
from ._opts import doc_options, opt, parse_opts
from .context import cpu

if TYPE_CHECKING:
    from ._module import Module
    from ._types import PathLike
    from .metric import _Metric
    from .ndarray import NDArray
    from .symbol import Symbol

_LOG = logging.getLogger("mxfn")

__all__ = ["BatchEndParam", "batch_end_param", "speedometer", "progress_bar", "do_checkpoint",
           "save_checkpoint", "module_checkpoint", "log_train_metric"]


class BatchEndParam(FrozenMap):
    """What a batch-end callback receives: a read-only map with ``epoch``, ``nbatch`` (0-based
    index of the batch within the epoch), ``eval_metric`` (the metric being accumulated) and
    ``locals`` (the caller's local variables). The keys are also attributes (``p.nbatch``)."""

    __slots__ = ()

    epoch = property(lambda self: self["epoch"])
    nbatch = property(lambda self: self["nbatch"])
    eval_metric = property(lambda self: self["eval_metric"])
    locals = property(lambda self: self["locals"])

    def __reduce__(self) -> tuple[Any, ...]:
        return (BatchEndParam, (dict(self),))


def batch_end_param(epoch: int, nbatch: int, eval_metric: _Metric | None = None,
                    locals: dict[str, Any] | None = None) -> BatchEndParam:  # noqa: A002
    """Builds a ``BatchEndParam``.

    Example:
        >>> p = batch_end_param(0, 3)
        >>> p["nbatch"], p.epoch
        (3, 0)
    """
    return BatchEndParam(epoch=int(epoch), nbatch=int(nbatch), eval_metric=eval_metric,
                         locals={} if locals is None else locals)


def _field(p: Any, key: str) -> Any:
    """A field of a BatchEndParam, a plain map or an MXNet-style namedtuple."""
    return p.get(key) if isinstance(p, Mapping) else getattr(p, key, None)


def _name_values(metric: _Metric) -> list[tuple[str, float]]:
    return mt.get_name_value(metric)


def _positive_int(fname: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f'{fname}: "{key}" must be an int, got {type(value).__name__} {value!r}')
    if value < 1:
        raise MXFNError(f'{fname}: "{key}" must be >= 1, got {value}')
    return value


# -- speedometer ----------------------------------------------------------------------------

SPEEDOMETER_OPTS = {
    "auto_reset": opt(True, bool, "reset the metric's local values after each log line, so "
                      "each line shows the metric of the last `frequent` batches"),
}


class Speedometer:
    """MXNet's Speedometer: every ``frequent`` batches logs the speed and the metric."""

    def __init__(self, batch_size: int, frequent: int, auto_reset: bool) -> None:
        self.batch_size = batch_size
        self.frequent = frequent
        self.auto_reset = auto_reset
        self.init = False
        self.tic = 0.0
        self.last_count = 0

    def __call__(self, param: Any) -> None:
        count = _field(param, "nbatch")
        if self.last_count > count:  # a new epoch started
            self.init = False
        self.last_count = count
        if not self.init:
            self.init = True
            self.tic = time.time()
            return
        if count % self.frequent != 0:
            return
        elapsed = time.time() - self.tic
        speed = self.frequent * self.batch_size / elapsed if elapsed > 0 else float("inf")
        metric = _field(param, "eval_metric")
        epoch = _field(param, "epoch")
        if metric is not None:
            name_value = _name_values(metric)
            if self.auto_reset:
                mt.reset_local(metric)
            msg = "Epoch[%d] Batch [%d]\tSpeed: %.2f samples/sec" + "\t%s=%f" * len(name_value)
            _LOG.info(msg, epoch, count, speed, *[x for nv in name_value for x in nv])
        else:
            _LOG.info("Iter[%d] Batch [%d]\tSpeed: %.2f samples/sec", epoch, count, speed)
        self.tic = time.time()


def speedometer(batch_size: int, frequent: int = 50, opts: Mapping[str, Any] | None = None,
                **kw: Any) -> Speedometer:
    """A batch-end callback that logs the training speed and metric every ``frequent`` batches.

    The line is ``Epoch[0] Batch [50]\\tSpeed: 1234.56 samples/sec\\taccuracy=0.900000``
    (one ``\\tname=value`` per metric), logged at INFO on logger ``"mxfn"``. As in MXNet the
    first call of an epoch only starts the clock; ``Batch [n]`` is the 0-based ``nbatch``.
    MXNet 1.9.1 prints the range ``Batch [0-50]`` when ``auto_reset`` is on; mxfn prints the
    batch number alone in both cases (the SPEC's format).

    %OPTIONS%

    Returns:
        The callback (a callable object).

    Example:
        >>> cb = speedometer(32, frequent=2)
        >>> for i in range(3):
        ...     cb(batch_end_param(0, i))
    """
    fname = "callback.speedometer"
    o = parse_opts(fname, SPEEDOMETER_OPTS, opts, kw)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise MXFNError(f"{fname}: batch_size must be a positive int, got {batch_size!r}")
    return Speedometer(batch_size, _positive_int(fname, "frequent", frequent), o["auto_reset"])


speedometer.__doc__ = (speedometer.__doc__ or "").replace("%OPTIONS%", doc_options(SPEEDOMETER_OPTS, 4).lstrip())


# -- progress bar ---------------------------------------------------------------------------

PROGRESS_BAR_OPTS = {
    "total": opt(None, int, "batches per epoch (the bar's length); None = unknown"),
    "desc": opt("Epoch", str, 'label of the bar, followed by "[epoch]"'),
    "show_metric": opt(True, bool, "show the metric's current values after the bar"),
    "leave": opt(True, bool, "keep each epoch's finished bar on screen"),
    "file": opt(None, None, "stream to write to; None = sys.stderr"),
    "mininterval": opt(0.1, float, "minimum seconds between redraws"),
}


class ProgressBar:
    """A batch-end callback drawing one tqdm bar per epoch; ``close()`` ends the current bar."""

    def __init__(self, o: Mapping[str, Any]) -> None:
        self.o = o
        self.bar: Any = None  # the tqdm bar of the current epoch
        self.epoch: int | None = None
        self.last = -1

    def _open(self, epoch: int) -> None:
        from tqdm import tqdm
        self.close()
        self.epoch = epoch
        self.bar = tqdm(total=self.o["total"], desc=f"{self.o['desc']}[{epoch}]", leave=self.o["leave"],
                        file=self.o["file"], mininterval=self.o["mininterval"], unit="batch")

    def __call__(self, param: Any) -> None:
        epoch, nbatch = _field(param, "epoch"), _field(param, "nbatch")
        if self.bar is None or epoch != self.epoch or nbatch <= self.last:
            self._open(epoch)
            self.last = -1
        self.bar.update(nbatch - self.last)
        self.last = nbatch
        metric = _field(param, "eval_metric")
        if self.o["show_metric"] and metric is not None:
            self.bar.set_postfix({n: f"{v:.4f}" if isinstance(v, float) else v for n, v in _name_values(metric)},
                                 refresh=False)
        if self.o["total"] is not None and nbatch + 1 >= self.o["total"]:
            self.close()

    def close(self) -> ProgressBar:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        return self


def progress_bar(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> ProgressBar:
    """A batch-end callback showing a tqdm progress bar per epoch (MXNet's ``ProgressBar``).

    A new bar starts when the epoch changes or ``nbatch`` goes back; with ``total`` the bar
    closes itself after the last batch, otherwise call ``close()`` on the callback (or let the
    next epoch close it).

    %OPTIONS%

    Returns:
        The callback (a callable object with a ``close()`` method).

    Example:
        >>> import io as _io
        >>> out = _io.StringIO()
        >>> cb = progress_bar(total=2, file=out)
        >>> cb(batch_end_param(0, 0)); cb(batch_end_param(0, 1))
        >>> "2/2" in out.getvalue()
        True
    """
    o = parse_opts("callback.progress_bar", PROGRESS_BAR_OPTS, opts, kw)
    if o["total"] is not None:
        _positive_int("callback.progress_bar", "total", o["total"])
    try:
        import tqdm  # noqa: F401
    except ImportError:
        raise MXFNError("callback.progress_bar needs the package tqdm; pip install tqdm") from None
    return ProgressBar(o)


progress_bar.__doc__ = (progress_bar.__doc__ or "").replace("%OPTIONS%", doc_options(PROGRESS_BAR_OPTS, 4).lstrip())


# -- checkpoints ----------------------------------------------------------------------------

def save_checkpoint(prefix: PathLike, epoch: int, symbol: Symbol | None,
                    arg_params: Mapping[str, NDArray] | None,
                    aux_params: Mapping[str, NDArray] | None) -> None:
    """Writes ``prefix-symbol.json`` (when ``symbol`` is not None) and ``prefix-%04d.params``
    (``arg:name`` / ``aux:name`` entries) like MXNet's ``mx.model.save_checkpoint``; each file
    is written atomically.

    Example:
        >>> import tempfile, os, mxfn as mx
        >>> p = os.path.join(tempfile.mkdtemp(), "m")
        >>> save_checkpoint(p, 3, mx.sym.variable("x") * 2, {"w": mx.nd.ones(2)}, {})
        >>> sorted(os.listdir(os.path.dirname(p))), list(mx.nd.load(p + "-0003.params"))
        (['m-0003.params', 'm-symbol.json'], ['arg:w'])
    """
    if symbol is not None:
        sym.save(symbol, f"{os.fspath(prefix)}-symbol.json")
    save_dict = {f"arg:{k}": nd.as_in_context(v, cpu()) for k, v in (arg_params or {}).items()}
    save_dict.update({f"aux:{k}": nd.as_in_context(v, cpu()) for k, v in (aux_params or {}).items()})
    fname = "%s-%04d.params" % (os.fspath(prefix), int(epoch))
    nd.save(fname, save_dict)
    _LOG.info('Saved checkpoint to "%s"', fname)


def do_checkpoint(prefix: PathLike, period: int = 1) -> Callable[..., None]:
    """An epoch-end callback saving a checkpoint every ``period`` epochs.

    Epoch ``e`` (0-based) is saved as number ``e + 1`` — ``prefix-symbol.json`` and
    ``prefix-%04d.params`` — as MXNet's ``do_checkpoint`` does; only when ``(e + 1) % period
    == 0``. Files are written atomically.

    Returns:
        ``f(epoch, symbol, arg_params, aux_params)``.

    Example:
        >>> import tempfile, os, mxfn as mx
        >>> p = os.path.join(tempfile.mkdtemp(), "net")
        >>> cb = do_checkpoint(p, period=2)
        >>> for e in range(4):
        ...     cb(e, mx.sym.variable("x"), {"w": mx.nd.ones(2)}, {})
        >>> sorted(os.listdir(os.path.dirname(p)))
        ['net-0002.params', 'net-0004.params', 'net-symbol.json']
    """
    period = max(1, int(period))

    def _callback(epoch: int, symbol: Symbol | None = None, arg_params: Mapping[str, NDArray] | None = None,
                  aux_params: Mapping[str, NDArray] | None = None) -> None:
        if (epoch + 1) % period == 0:
            save_checkpoint(prefix, epoch + 1, symbol, arg_params, aux_params)

    return _callback


def module_checkpoint(mod: Module, prefix: str, period: int = 1,
                      save_optimizer_states: bool = False) -> Callable[..., None]:
    """An epoch-end callback calling ``module.save_checkpoint(mod, prefix=prefix, epoch=e + 1,
    save_opt_states=save_optimizer_states)`` when ``(e + 1) % period == 0`` (MXNet's
    ``module_checkpoint``); the callback's other arguments are ignored.

    Returns:
        ``f(epoch, symbol=None, arg_params=None, aux_params=None)``.
    """
    period = max(1, int(period))

    def _callback(epoch: int, symbol: Any = None, arg_params: Any = None, aux_params: Any = None) -> None:
        if (epoch + 1) % period == 0:
            _module.save_checkpoint(mod, prefix=prefix, epoch=epoch + 1, save_opt_states=bool(save_optimizer_states))

    return _callback


def log_train_metric(period: int, auto_reset: bool = False) -> Callable[[Any], None]:
    """A batch-end callback logging ``Iter[epoch] Batch[nbatch] Train-name=value`` every
    ``period`` batches (MXNet's ``log_train_metric``); ``auto_reset`` resets the metric's
    local values after logging.

    Example:
        >>> import mxfn as mx
        >>> acc = mx.metric.accuracy()
        >>> _ = mx.metric.update(acc, [mx.nd.array([1, 0])], [mx.nd.array([[0, 1], [0, 1]])])
        >>> log_train_metric(1)(batch_end_param(0, 0, acc))
    """
    period = _positive_int("callback.log_train_metric", "period", period)

    def _callback(param: Any) -> None:
        metric = _field(param, "eval_metric")
        if _field(param, "nbatch") % period == 0 and metric is not None:
            for name, value in _name_values(metric):
                _LOG.info("Iter[%d] Batch[%d] Train-%s=%f", _field(param, "epoch"), _field(param, "nbatch"),
                          name, value)
            if auto_reset:
                mt.reset_local(metric)

    return _callback
