"""mx.lr_scheduler: learning-rate schedulers, stateful exactly like MXNet 1.9.1's.

A scheduler is called as ``sched(num_update)`` and returns the learning rate. Like MXNet's
it keeps state between calls: ``factor_scheduler`` and ``multifactor_scheduler`` only ever
decay (a later call with a smaller ``num_update`` does not undo a decay), and
``poly_scheduler`` / ``cosine_scheduler`` store the last value computed for
``num_update <= max_update`` and return it beyond (initially ``base_lr``). Warmup: for
``num_update < warmup_steps`` every scheduler returns ``warmup_begin_lr`` rising linearly to
``base_lr`` (``warmup_mode="linear"``) or ``warmup_begin_lr`` (``"constant"``).

Passed as ``lr_scheduler=`` to an optimizer, the same scheduler state is used: the optimizer
calls it with its ``num_update`` (first update: ``sched(1)``), and an optimizer learning rate
(given, or a class default such as Adam's 0.001) overwrites a differing ``base_lr``.

    >>> s = factor_scheduler(10, 0.5, base_lr=0.1)
    >>> [s(n) for n in (0, 10, 11, 21, 5)]
    [0.1, 0.1, 0.05, 0.025, 0.025]
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from . import _native
from ._errors import MXFNError
from ._maps import FrozenMap
from ._opts import REQUIRED, OptSpec, documented, normalize_key, opt, parse_opts

__all__ = [
    "LRScheduler", "factor_scheduler", "multifactor_scheduler", "poly_scheduler",
    "cosine_scheduler", "base_lr", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler",
    "CosineScheduler",
]

_UNSET: Any = object()  # "not given" (typed Any: it stands in for any argument type)


class LRScheduler:
    """A learning-rate scheduler (built by ``factor_scheduler`` and friends).

    Call it with an update count to get the learning rate; the call advances its state, as
    in MXNet. ``base_lr`` reads (and, as in MXNet, sets) the current base rate. Optimizers
    holding this scheduler share its state.

    Example:
        >>> s = cosine_scheduler(10, base_lr=1.0)
        >>> s(5), s(10), s(20)
        (0.5, 0.0, 0.0)
        >>> s
        CosineScheduler(max_update=10, final_lr=0.0, base_lr=1.0, warmup_steps=0, warmup_begin_lr=0.0, warmup_mode='linear')
    """

    __slots__ = ("_h",)
    _h: _native.SchedulerHandle

    def __init__(self, handle: _native.SchedulerHandle) -> None:
        if not isinstance(handle, _native.SchedulerHandle):
            raise TypeError("LRScheduler(...) wraps a core handle; build schedulers with "
                            "factor_scheduler, multifactor_scheduler, poly_scheduler or "
                            "cosine_scheduler")
        self._h = handle

    def __call__(self, num_update: int) -> float:
        if isinstance(num_update, bool) or not isinstance(num_update, numbers.Integral):
            raise TypeError(f"lr_scheduler: num_update must be an int, got "
                            f"{type(num_update).__name__} {num_update!r}")
        if num_update < 0:
            raise MXFNError(f"lr_scheduler: num_update must be >= 0, got {num_update}")
        return _native.sched_call(self._h, int(num_update))

    @property
    def base_lr(self) -> float:
        # A core scheduler always has a base rate (None is for Python callables).
        return cast(float, _native.sched_base_lr(self._h))

    @base_lr.setter
    def base_lr(self, lr: float) -> None:
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
            raise TypeError(f"lr_scheduler: base_lr must be a number, got {type(lr).__name__}")
        _native.sched_set_base_lr(self._h, float(lr))

    def __repr__(self) -> str:
        cls, opts = _native.sched_describe(self._h)
        return f"{cls}({', '.join(f'{k}={v!r}' for k, v in opts.items())})"


_COMMON = {
    "base_lr": opt(0.01, float, "the learning rate after warmup, before any decay"),
    "warmup_steps": opt(0, int, "number of warmup updates (0 = no warmup)"),
    "warmup_begin_lr": opt(0.0, float, "the learning rate warmup starts from (<= base_lr)"),
    "warmup_mode": opt("linear", str, '"linear" (rise to base_lr in equal steps) or '
                       '"constant" (warmup_begin_lr throughout)'),
}

FACTOR_SCHEDULER_OPTS = {
    "step": opt(REQUIRED, int, "updates between decays (>= 1); the rate drops at "
                "num_update = step+1, 2*step+1, ..."),
    "factor": opt(1.0, float, "the decay factor, in [0, 1]"),
    "stop_factor_lr": opt(1e-8, float, "the rate never decays below this"),
    **_COMMON,
}
MULTIFACTOR_SCHEDULER_OPTS = {
    "step": opt(REQUIRED, (list, tuple), "strictly increasing update counts (>= 1); the rate "
                "is multiplied by factor once num_update passes each"),
    "factor": opt(1.0, float, "the decay factor, in [0, 1]"),
    **_COMMON,
}
POLY_SCHEDULER_OPTS = {
    "max_update": opt(REQUIRED, int, "the update at which final_lr is reached (> warmup_steps)"),
    "pwr": opt(2.0, float, "the power of the polynomial decay"),
    "final_lr": opt(0.0, float, "the learning rate from max_update on"),
    **_COMMON,
}
COSINE_SCHEDULER_OPTS = {
    "max_update": opt(REQUIRED, int, "the update at which final_lr is reached (> warmup_steps)"),
    "final_lr": opt(0.0, float, "the learning rate from max_update on"),
    **_COMMON,
}



def _options(fname: str, spec: Mapping[str, OptSpec], positional: Sequence[tuple[str, Any]],
             opts: Mapping[str, Any] | None, kw: Mapping[str, Any]) -> FrozenMap:
    """Merge positional values (by name), an options map and keywords; a map given in a
    positional slot is the options map (``factor_scheduler({"step": 10})``)."""
    given = {}
    for key, value in positional:
        if value is _UNSET:
            continue
        if isinstance(value, Mapping) and opts is None:
            opts = value
            continue
        given[key] = value
    for key in kw:
        if normalize_key(key) in given:
            raise MXFNError(f'{fname}: option "{normalize_key(key)}" given twice, '
                            f'as an argument and as "{key}"')
    return parse_opts(fname, spec, opts, {**given, **kw})


def _count(fname: str, key: str, value: Any) -> int:
    if value < 0:
        raise MXFNError(f'{fname}: "{key}" must be >= 0, got {value}')
    return int(value)


def _common(fname: str, o: Mapping[str, Any]) -> tuple[float, int, float, str]:
    return (float(o["base_lr"]), _count(fname, "warmup_steps", o["warmup_steps"]),
            float(o["warmup_begin_lr"]), o["warmup_mode"])


def _build(fname: str, make: Callable[..., _native.SchedulerHandle], *args: Any) -> LRScheduler:
    try:
        return LRScheduler(make(*args))
    except MXFNError as e:
        msg = str(e)
        raise MXFNError(fname + msg[len("lr_scheduler"):] if msg.startswith("lr_scheduler:")
                        else f"{fname}: {msg}") from None


@documented(FACTOR_SCHEDULER_OPTS)
def factor_scheduler(step: int | Mapping[str, Any] = _UNSET, factor: float = _UNSET, opts: Mapping[str, Any] | None = None, /,
                     **kw: Any) -> LRScheduler:
    """Multiply the learning rate by ``factor`` every ``step`` updates (MXNet's FactorScheduler).

    The rate is multiplied repeatedly, so it drops at ``num_update = step+1, 2*step+1, …``
    (counted from 0 even with warmup) and never goes back up.

    %OPTIONS%

    Returns:
        An LRScheduler. ``step < 1``, a factor outside [0, 1], ``warmup_begin_lr > base_lr``
        or a NaN/negative rate raise MXFNError.

    Example:
        >>> s = factor_scheduler(2, 0.5, {"base_lr": 1.0})
        >>> [s(n) for n in range(1, 8)]
        [1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.125]
    """
    fname = "lr_scheduler.factor_scheduler"
    o = _options(fname, FACTOR_SCHEDULER_OPTS, [("step", step), ("factor", factor)], opts, kw)
    return _build(fname, _native.sched_factor, _count(fname, "step", o["step"]), float(o["factor"]),
                  float(o["stop_factor_lr"]), *_common(fname, o))


@documented(MULTIFACTOR_SCHEDULER_OPTS)
def multifactor_scheduler(step: Sequence[int] | Mapping[str, Any] = _UNSET, factor: float = _UNSET,
                          opts: Mapping[str, Any] | None = None, /, **kw: Any) -> LRScheduler:
    """Multiply the learning rate by ``factor`` once past each of the steps (MXNet's
    MultiFactorScheduler).

    Each ``step[k]`` is passed at the first call with ``num_update > step[k]``.

    %OPTIONS%

    Returns:
        An LRScheduler. An empty or non-increasing ``step`` list raises MXFNError.

    Example:
        >>> s = multifactor_scheduler([2, 4], 0.1, base_lr=1.0)
        >>> [round(s(n), 6) for n in range(1, 7)]
        [1.0, 1.0, 0.1, 0.1, 0.01, 0.01]
    """
    fname = "lr_scheduler.multifactor_scheduler"
    o = _options(fname, MULTIFACTOR_SCHEDULER_OPTS, [("step", step), ("factor", factor)], opts, kw)
    steps = []
    for s in o["step"]:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral):
            raise TypeError(f'{fname}: "step" must be a list of ints, got {o["step"]!r}')
        steps.append(_count(fname, "step", s))
    return _build(fname, _native.sched_multifactor, steps, float(o["factor"]), *_common(fname, o))


@documented(POLY_SCHEDULER_OPTS)
def poly_scheduler(max_update: int | Mapping[str, Any] = _UNSET, opts: Mapping[str, Any] | None = None, /,
                   **kw: Any) -> LRScheduler:
    """Polynomial decay to ``final_lr`` at ``max_update`` (MXNet's PolyScheduler).

    For ``warmup_steps <= n <= max_update`` the rate is
    ``final_lr + (base_lr - final_lr) * (1 - (n - warmup_steps)/(max_update - warmup_steps))**pwr``
    and is stored; beyond ``max_update`` the last stored value is returned.

    %OPTIONS%

    Returns:
        An LRScheduler. ``max_update < 1`` or ``warmup_steps >= max_update`` raise MXFNError.

    Example:
        >>> s = poly_scheduler(4, base_lr=1.0, pwr=1)
        >>> [s(n) for n in range(6)]
        [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    """
    fname = "lr_scheduler.poly_scheduler"
    o = _options(fname, POLY_SCHEDULER_OPTS, [("max_update", max_update)], opts, kw)
    return _build(fname, _native.sched_poly, _count(fname, "max_update", o["max_update"]),
                  float(o["pwr"]), float(o["final_lr"]), *_common(fname, o))


@documented(COSINE_SCHEDULER_OPTS)
def cosine_scheduler(max_update: int | Mapping[str, Any] = _UNSET, opts: Mapping[str, Any] | None = None, /,
                     **kw: Any) -> LRScheduler:
    """Cosine decay to ``final_lr`` at ``max_update`` (MXNet's CosineScheduler).

    For ``warmup_steps <= n <= max_update`` the rate is ``final_lr + (base_lr - final_lr) *
    (1 + cos(pi * (n - warmup_steps)/(max_update - warmup_steps)))/2`` and is stored; beyond
    ``max_update`` the last stored value is returned.

    %OPTIONS%

    Returns:
        An LRScheduler. ``max_update < 1`` or ``warmup_steps >= max_update`` raise MXFNError.

    Example:
        >>> s = cosine_scheduler(100, base_lr=0.1, warmup_steps=10, warmup_begin_lr=0.01)
        >>> round(s(5), 6), round(s(55), 6), s(100)
        (0.055, 0.05, 0.0)
    """
    fname = "lr_scheduler.cosine_scheduler"
    o = _options(fname, COSINE_SCHEDULER_OPTS, [("max_update", max_update)], opts, kw)
    return _build(fname, _native.sched_cosine, _count(fname, "max_update", o["max_update"]),
                  float(o["final_lr"]), *_common(fname, o))


def base_lr(sched: LRScheduler) -> float:
    """The scheduler's current base rate (decayed in place by factor schedulers).

    Example:
        >>> s = factor_scheduler(1, 0.5, base_lr=1.0)
        >>> s(3), base_lr(s)
        (0.25, 0.25)
    """
    if not isinstance(sched, LRScheduler):
        raise TypeError(f"lr_scheduler.base_lr: expected an LRScheduler, got {type(sched).__name__}")
    return sched.base_lr


# MXNet's class names, for code written against mx.lr_scheduler.
FactorScheduler = factor_scheduler
MultiFactorScheduler = multifactor_scheduler
PolyScheduler = poly_scheduler
CosineScheduler = cosine_scheduler
