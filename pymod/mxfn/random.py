"""mx.random: the global seed and samplers (same seed, same numbers, at any thread count)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import _native
from ._errors import MXFNError
from .ndarray import NDArray, random_normal, random_uniform

if TYPE_CHECKING:
    from ._types import Shape


def seed(seed_state: int) -> None:
    """Seeds every mxfn random draw (samplers, initializers, shuffling).

    Example:
        >>> seed(7); a = uniform(shape=(3,)).asnumpy()
        >>> seed(7); bool((a == uniform(shape=(3,)).asnumpy()).all())
        True
    """
    if not isinstance(seed_state, numbers.Integral) or isinstance(seed_state, bool) or seed_state < 0:
        raise MXFNError(f"random.seed: seed_state must be a non-negative int, got {seed_state!r}")
    _native.random_seed(int(seed_state) & (2**64 - 1))


def uniform(low: float = 0.0, high: float = 1.0, shape: Shape | int = (1,),
            opts: Mapping[str, Any] | None = None, **kw: Any) -> NDArray:
    """Uniform samples in ``[low, high)``; options ``dtype``, ``ctx`` (see ``nd.zeros``)."""
    return random_uniform(low, high, shape, opts, **kw)


def normal(loc: float = 0.0, scale: float = 1.0, shape: Shape | int = (1,),
           opts: Mapping[str, Any] | None = None, **kw: Any) -> NDArray:
    """Normal samples; options ``dtype``, ``ctx`` (see ``nd.zeros``)."""
    return random_normal(loc, scale, shape, opts, **kw)
