"""``mx.profiler``: time per operator type and per layer, from the executors' own clocks.

MXNet's names where they make sense: ``set_config`` (MXNet's keys accepted), ``set_state``
(``"run"`` / ``"stop"``), ``dumps(reset=False)`` (the aggregate table). While the profiler
runs, every executor times each node's forward and backward (an activation fused into the
convolution before it counts its calls with no time of its own); stopped, it costs nothing
measurable. The table is process-wide. ``MXFN_PROFILE=1`` in the environment starts it at
import and prints the table to stderr when the process exits.

Example:
    >>> import mxfn as mx
    >>> from mxfn import module as m, profiler
    >>> net = mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=4, name="fc")
    >>> mod = m.bind(m.module(net, label_names=[]), data_shapes=[("data", (2, 3))], for_training=False)
    >>> mod = m.init_params(mod)
    >>> _ = profiler.set_state("run")
    >>> mod = m.forward(mod, mx.io.data_batch(data=[mx.nd.ones((2, 3))]))
    >>> _ = profiler.set_state("stop")
    >>> [(op, calls) for op, p, calls, _ in profiler.rows()["operators"] if op == "FullyConnected"]
    [('FullyConnected', 1)]
    >>> "fc" in profiler.dumps(reset=True)
    True
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

from . import _native
from ._errors import MXFNError

# MXNet 1.9.1's profiler.set_config keys. mxfn always aggregates per operator and per layer
# and keeps no trace, so they are accepted (code written for MXNet runs) and change nothing.
_MXNET_CONFIG_KEYS = ("profile_all", "profile_symbolic", "profile_imperative", "profile_memory",
                      "profile_api", "filename", "continuous_dump", "dump_period", "aggregate_stats",
                      "profile_process")


def set_config(**kw: Any) -> None:
    """Accepts MXNet's ``set_config`` keys (``profile_all``, ``aggregate_stats``, ``filename``,
    …) for compatibility; mxfn's profiler always aggregates per operator and per layer, so they
    change nothing. An unknown key raises ``MXFNError``."""
    for k in kw:
        if k not in _MXNET_CONFIG_KEYS:
            raise MXFNError(f'profiler.set_config: unknown option "{k}"; MXNet\'s options are '
                            f"{', '.join(_MXNET_CONFIG_KEYS)}")


def set_state(state: str = "stop", profile_process: str = "worker") -> str:
    """Starts (``"run"``) or stops (``"stop"``) recording; stopping keeps the table. Returns
    the state. (``profile_process`` is MXNet's and only ``"worker"`` exists here.)"""
    if state not in ("run", "stop"):
        raise MXFNError(f'profiler.set_state: state must be "run" or "stop", got {state!r}')
    if profile_process != "worker":
        raise MXFNError(f'profiler.set_state: profile_process must be "worker", got {profile_process!r}')
    _native.profiler_set_running(state == "run")
    return state


def state() -> str:
    """``"run"`` while recording, else ``"stop"``."""
    return "run" if _native.profiler_running() else "stop"


def rows() -> dict[str, list[Any]]:
    """The table as data: ``{"operators": [(op, pass, calls, total_ms)], "layers": [(layer,
    op, pass, calls, total_ms)]}``, each sorted by total time, largest first."""
    ops, layers = _native.profiler_rows()
    return {"operators": sorted(ops, key=lambda r: (-r[3], r[0], r[1])),
            "layers": sorted(layers, key=lambda r: (-r[4], r[0], r[2]))}


def dumps(reset: bool = False, format: str = "table") -> str:
    """The aggregate table: per operator type and pass, then per layer (node name), sorted by
    total time, with calls, total and mean milliseconds and the share of all recorded time.
    ``format="json"`` gives ``rows()`` as JSON. With ``reset=True`` the counters are cleared
    after reading (as in MXNet)."""
    if format not in ("table", "json"):
        raise MXFNError(f'profiler.dumps: format must be "table" or "json", got {format!r}')
    if format == "json":
        out = json.dumps(rows())
        if reset:
            _native.profiler_reset()
        return out
    return _native.profiler_dumps(bool(reset))


def reset() -> None:
    """Clears the table (the state is unchanged)."""
    _native.profiler_reset()


def _print_at_exit() -> None:
    print(dumps(), file=sys.stderr)


if os.environ.get("MXFN_PROFILE", "") not in ("", "0"):
    set_state("run")
    atexit.register(_print_at_exit)
