"""mx.monitor: statistics of op outputs, arguments and gradients every few steps (MXNet's Monitor).

Usage: ``mon = monitor(interval)``; ``install(mon, exe)`` for each executor (or
``module.install_monitor(mod, mon)``); then around every training step ``tic(mon)`` …
forward/backward … ``toc(mon)`` (or ``toc_print(mon)``). Every ``interval`` steps ``toc``
returns ``[(step, name, value_str), …]`` with entries named ``{node}_output`` (op outputs,
from the executor's monitor callback), ``{arg}`` (argument arrays, data and label included),
``{arg}_grad`` (only gradients a backward computed in that step) and auxiliary states,
filtered by ``pattern`` (``re.match``); values print as MXNet's do (see ``_value_str``).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import MXFNError
from . import executor
from ._opts import doc_options, opt, parse_opts
from .ndarray import NDArray, array

if TYPE_CHECKING:
    from .executor import Executor

#: ``stat_func(array)``: a statistic of an array (an NDArray, a list of them, or numpy).
StatFunc = Callable[[NDArray], Any]

_LOG = logging.getLogger("mxfn")

__all__ = ["Monitor", "monitor", "install", "add_source", "tic", "toc", "toc_print", "default_stat"]


def default_stat(x: Any) -> NDArray:
    """MXNet's default statistic: ``norm(x) / sqrt(size(x))`` as a one-element NDArray.

    Example:
        >>> default_stat(np.array([3.0, 4.0])).asnumpy()
        array([3.535534], dtype=float32)
    """
    a = np.asarray(x, dtype=np.float64)
    value = float(np.linalg.norm(a.ravel())) / math.sqrt(a.size) if a.size else 0.0
    return array([value])


def _value_str(v: Any) -> str:
    """The stat's values printed like MXNet's Monitor (SPEC §8): a one-element stat as a
    float32 scalar (``str(np.float32(x))``, what MXNet's ``asscalar`` prints), a larger one as
    numpy prints the array, each followed by a tab.

    Example:
        >>> _value_str([np.array([0.1]), np.array([1.0, 2.0])])
        '0.1\\t[1. 2.]\\t'
    """
    vs = v if isinstance(v, list) else [v]
    s = ""
    for x in vs:
        a = np.asarray(x)
        if a.size == 1 and a.ndim <= 1:
            s += str(np.float32(a.reshape(-1)[0])) + "\t"
        else:
            s += str(a) + "\t"
    return s


class Monitor:
    """The monitor state: ``interval``, ``stat_func``, compiled ``pattern``, ``sort``, the
    current ``step``, installed executors and the queued statistics. Use the module functions
    (``tic``, ``toc``, ``toc_print``, ``install``); the methods are there for MXNet habits
    (``module.install_monitor`` may call ``mon.install(exe)``)."""

    def __init__(self, interval: int, stat_func: StatFunc, pattern: str, sort: bool) -> None:
        self.interval = interval
        self.stat_func = stat_func
        self.re_prog = re.compile(pattern)
        self.sort = sort
        self.activated = False
        self.queue: list[tuple[int, str, Any]] = []
        self.step = 0
        self.exes: list[Executor] = []
        self.sources: dict[Any, Callable[[], Any]] = {}

    def stat_helper(self, name: str, array: NDArray) -> None:
        """The executor's monitor callback: queues the stat of an op output while active."""
        if not self.activated or not self.re_prog.match(name):
            return
        self.queue.append((self.step, name, self.stat_func(array)))

    def install(self, exe: Executor) -> Monitor:
        return install(self, exe)

    def tic(self) -> Monitor:
        return tic(self)

    def toc(self) -> list[tuple[int, str, str]]:
        return toc(self)

    def toc_print(self) -> Monitor:
        return toc_print(self)

    def __repr__(self) -> str:
        return (f"<Monitor interval={self.interval} pattern={self.re_prog.pattern!r} step={self.step} "
                f"executors={len(self.exes)}>")


MONITOR_OPTS = {
    "pattern": opt(".*", str, "regex (re.match) that names must match to be reported"),
    "sort": opt(False, bool, "sort each step's entries by name"),
}


def monitor(interval: int, stat_func: StatFunc | None = None, opts: Mapping[str, Any] | None = None,
            **kw: Any) -> Monitor:
    """A monitor that reports statistics every ``interval`` steps.

    ``stat_func(array) -> NDArray`` (or a list of them, or numpy) computes the statistic;
    the default is ``norm(x) / sqrt(size(x))``.

    %OPTIONS%

    Returns:
        A Monitor.

    Example:
        >>> import mxfn as mx
        >>> x = mx.sym.variable("x")
        >>> exe = mx.executor.simple_bind(mx.sym.relu(x, name="r"), mx.cpu(), x=(2,))
        >>> mon = install(monitor(1, pattern="r_.*|x"), exe)
        >>> _ = tic(mon)
        >>> _ = mx.executor.forward(exe, is_train=True, x=np.array([-3.0, 4.0]))
        >>> _ = mx.executor.backward(exe, [mx.nd.ones(2)])
        >>> [(step, name) for step, name, _ in toc(mon)]
        [(1, 'r_output'), (1, 'x'), (1, 'x_grad')]
    """
    fname = "monitor.monitor"
    o = parse_opts(fname, MONITOR_OPTS, opts, kw)
    if isinstance(interval, bool) or not isinstance(interval, int):
        raise TypeError(f"{fname}: interval must be an int, got {type(interval).__name__} {interval!r}")
    if interval < 1:
        raise MXFNError(f"{fname}: interval must be >= 1, got {interval}")
    if stat_func is not None and not callable(stat_func):
        raise TypeError(f"{fname}: stat_func must be callable, got {type(stat_func).__name__}")
    try:
        re.compile(o["pattern"])
    except re.error as e:
        raise MXFNError(f"{fname}: pattern {o['pattern']!r} is not a valid regex: {e}") from None
    return Monitor(interval, stat_func or default_stat, o["pattern"], o["sort"])


monitor.__doc__ = (monitor.__doc__ or "").replace("%OPTIONS%", doc_options(MONITOR_OPTS, 4).lstrip())


def _mon(fname: str, mon: Any) -> Monitor:
    if not isinstance(mon, Monitor):
        raise TypeError(f"{fname}: expected a Monitor (from monitor.monitor), got {type(mon).__name__}")
    return mon


def install(mon: Monitor, exe: Executor) -> Monitor:
    """Installs ``mon`` on executor ``exe`` (``mx.executor.set_monitor_callback``); a monitor
    may watch several executors (one per device).

    Returns:
        ``mon``.
    """
    _mon("monitor.install", mon)
    executor.set_monitor_callback(exe, mon.stat_helper)
    mon.exes.append(exe)
    return mon


def add_source(mon: Monitor, key: Any, f: Callable[[], Any]) -> Monitor:
    """Adds arrays that ``toc`` reports besides the installed executors' arguments: ``f()``
    returns ``[(name, array), …]`` (e.g. a module's params and ``{param}_grad`` gradients,
    whose executors live in the core). One source per ``key``: adding a key again replaces it.

    Returns:
        ``mon``.

    Example:
        >>> import mxfn as mx
        >>> mon = add_source(monitor(1), "w", lambda: [("w", mx.nd.ones(4))])
        >>> _ = tic(mon)
        >>> toc(mon) == [(1, "w", "1.0\\t")]
        True
    """
    _mon("monitor.add_source", mon)
    if not callable(f):
        raise TypeError(f"monitor.add_source: f must be callable, got {type(f).__name__}")
    mon.sources[key] = f
    return mon


def tic(mon: Monitor) -> Monitor:
    """Starts a step: every ``interval`` steps it clears the queue and activates collection.

    Returns:
        ``mon``.
    """
    _mon("monitor.tic", mon)
    if mon.step % mon.interval == 0:
        mon.queue = []
        mon.activated = True
    mon.step += 1
    return mon


def toc(mon: Monitor) -> list[tuple[int, str, str]]:
    """Ends a step: when active, adds the arguments, gradients and auxiliary states of every
    installed executor to the op outputs collected since ``tic``.

    Returns:
        ``[(step, name, value_str), …]`` (empty on steps that are not monitored); ``step`` is
        the number of ``tic`` calls so far.
    """
    _mon("monitor.toc", mon)
    if not mon.activated:
        return []
    for exe in mon.exes:
        # Gradients only when a backward computed them in this step (SPEC §8).
        grads = executor.grad_dict(exe) if exe._h.grads_fresh() else {}
        for name, arr in executor.arg_dict(exe).items():
            if mon.re_prog.match(name):
                mon.queue.append((mon.step, name, mon.stat_func(arr)))
            gname = name + "_grad"
            if name in grads and mon.re_prog.match(gname):
                mon.queue.append((mon.step, gname, mon.stat_func(grads[name])))
        for name, arr in executor.aux_dict(exe).items():
            if mon.re_prog.match(name):
                mon.queue.append((mon.step, name, mon.stat_func(arr)))
    for f in list(mon.sources.values()):
        for name, arr in f():
            if mon.re_prog.match(name):
                mon.queue.append((mon.step, name, mon.stat_func(arr)))
    mon.activated = False
    queue = sorted(mon.queue, key=lambda e: e[1]) if mon.sort else mon.queue
    res = [(n, k, _value_str(v)) for n, k, v in queue]
    mon.queue = []
    return res


def toc_print(mon: Monitor) -> Monitor:
    """``toc`` and log each entry at INFO on logger ``"mxfn"`` as MXNet does
    (``Batch:       1 fc1_output                     0.1234``).

    Returns:
        ``mon``.
    """
    for n, k, v in toc(mon):
        _LOG.info("Batch: {:7d} {:30s} {:s}".format(n, k, v))
    return mon
