"""mx.context: devices (cpu(i), gpu(i)) and the per-thread default context."""

from __future__ import annotations

import numbers
import re
import threading
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import MXFNError

# MXNet's device type codes, as stored in .params files.
_DEV_TYPE_CODES = {"cpu": 1, "gpu": 2}


@dataclass(frozen=True, repr=False)
class Context:
    """An immutable device: ``device_type`` ("cpu" or "gpu") and ``device_id`` (an int >= 0).

    Contexts compare and hash by value and print as ``cpu(0)``. ``with ctx:`` makes ``ctx``
    the default context inside the block, for the current thread only (as MXNet does).
    ``cpu(1)``, ``cpu(2)``, … are logical devices: each gets its own executor.

    Example:
        >>> Context("cpu", 1) == cpu(1), cpu(1)
        (True, cpu(1))
        >>> with gpu(0):
        ...     current_context()
        gpu(0)
        >>> current_context()
        cpu(0)
    """

    device_type: str
    device_id: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.device_type, str) or self.device_type not in _DEV_TYPE_CODES:
            raise MXFNError(f'context.Context: device_type must be "cpu" or "gpu", '
                            f"got {self.device_type!r}")
        # Frozen dataclass: object.__setattr__ is how __post_init__ stores the plain int.
        object.__setattr__(self, "device_id", _device_id("context.Context", self.device_id))

    def __repr__(self) -> str:
        return f"{self.device_type}({self.device_id})"

    def __enter__(self) -> Context:
        _default_stack().append(self)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        _default_stack().pop()
        return False


def cpu(device_id: int = 0) -> Context:
    """The CPU context number ``device_id`` (a logical device: each gets its own executor).

    Returns:
        ``Context("cpu", device_id)``. A negative or non-int ``device_id`` raises MXFNError.

    Example:
        >>> cpu(), cpu(1)
        (cpu(0), cpu(1))
    """
    return Context("cpu", _device_id("context.cpu", device_id))


def gpu(device_id: int = 0) -> Context:
    """The GPU context number ``device_id``; binding to it raises when there is no GPU backend.

    Returns:
        ``Context("gpu", device_id)``. A negative or non-int ``device_id`` raises MXFNError.

    Example:
        >>> gpu(1)
        gpu(1)
    """
    return Context("gpu", _device_id("context.gpu", device_id))


def current_context() -> Context:
    """The default context of this thread: the innermost ``with ctx:`` block's, else ``cpu(0)``.

    Returns:
        A Context.

    Example:
        >>> current_context()
        cpu(0)
        >>> with cpu(2):
        ...     current_context()
        cpu(2)
    """
    stack = _default_stack()
    return stack[-1] if stack else Context("cpu", 0)


def default_context() -> Context:
    """Same as ``current_context()``.

    Returns:
        A Context.

    Example:
        >>> default_context()
        cpu(0)
    """
    return current_context()


def num_gpus() -> int:
    """The number of GPUs this build can use: always 0 (there is no GPU backend).

    Returns:
        0.

    Example:
        >>> num_gpus()
        0
    """
    return 0


_CONTEXT_TEXT = re.compile(r"\s*(cpu|gpu)\s*(?:\(\s*(\d+)\s*\))?\s*")


def as_context(x: Context | str | None, fname: str = "context.as_context") -> Context:
    """Read ``x`` as a Context: a Context, ``"cpu"``, ``"cpu(1)"``, ``"gpu(0)"`` or None (default).

    ``fname`` names the calling function in the error message.

    Returns:
        The Context; None gives ``current_context()``. Anything else raises MXFNError.

    Example:
        >>> as_context("cpu(1)"), as_context("gpu"), as_context(None), as_context(cpu(3))
        (cpu(1), gpu(0), cpu(0), cpu(3))
    """
    if x is None:
        return current_context()
    if isinstance(x, Context):
        return x
    if isinstance(x, str):
        m = _CONTEXT_TEXT.fullmatch(x)
        if m:
            return Context(m.group(1), int(m.group(2) or 0))
    raise MXFNError(f'{fname}: expected a Context, "cpu", "cpu(i)", "gpu(i)" or None, '
                    f"got {type(x).__name__} {x!r}")


def dev_type_code(ctx: Context | str | None) -> int:
    """MXNet's device type code of ``ctx`` (cpu 1, gpu 2), as written in .params files.

    ``ctx`` is anything ``as_context`` accepts.

    Returns:
        The int code.

    Example:
        >>> dev_type_code(cpu(0)), dev_type_code(gpu(1))
        (1, 2)
    """
    return _DEV_TYPE_CODES[as_context(ctx, "context.dev_type_code").device_type]


def _device_id(fname: str, value: Any) -> int:
    """``value`` as a plain int device id, or MXFNError naming ``fname`` when it is not one."""
    # bool is an int subclass, but cpu(True) is a mistake; numpy ints are fine.
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 0:
        return int(value)
    raise MXFNError(f"{fname}: device_id must be a non-negative int, "
                    f"got {type(value).__name__} {value!r}")


# Each thread has its own stack of `with ctx:` blocks; a new thread starts at cpu(0).
_local = threading.local()


def _default_stack() -> list[Context]:
    """This thread's stack of contexts entered with ``with``."""
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack
