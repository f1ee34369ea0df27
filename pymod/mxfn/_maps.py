"""Read-only mappings for the maps mxfn builds (options, data descs, batches, fit params)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NoReturn


class FrozenMap(Mapping[Any, Any]):
    """A read-only dict: reading works like a dict, every kind of writing raises TypeError.

    Built like ``dict`` (from a mapping, from ``(key, value)`` pairs and/or keywords) and
    holding its own shallow copy, so later changes to the source do not show through. It
    compares equal to a dict with the same items and prints like one. To "change" it, use
    ``toolz.assoc`` / ``toolz.merge`` / ``toolz.dissoc``: they return new plain dicts.
    Values are not frozen themselves (a list value stays a list).

    Example:
        >>> import toolz
        >>> m = FrozenMap({"a": 1})
        >>> m["a"], m == {"a": 1}, m
        (1, True, {'a': 1})
        >>> m["b"] = 2
        Traceback (most recent call last):
        ...
        TypeError: 'FrozenMap' object does not support item assignment
        >>> toolz.assoc(m, "b", 2)
        {'a': 1, 'b': 2}
    """

    # __slots__ leaves no instance __dict__ to write into; __setattr__ guards the slot.
    __slots__ = ("_d",)
    _d: dict[Any, Any]

    def __init__(self, items: Any = (), /, **kw: Any) -> None:
        object.__setattr__(self, "_d", dict(items, **kw))

    def __getitem__(self, key: Any) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __repr__(self) -> str:
        return repr(self._d)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise TypeError(f"'FrozenMap' object is read-only; cannot set attribute {name!r}")

    def __delattr__(self, name: str) -> NoReturn:
        raise TypeError(f"'FrozenMap' object is read-only; cannot delete attribute {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # The default slot-based pickling would restore state through __setattr__.
        return (FrozenMap, (self._d,))


def frozen(mapping: Mapping[Any, Any] | None = None) -> FrozenMap:
    """Return ``mapping`` as a FrozenMap (None gives an empty one; a FrozenMap is returned as is).

    Returns:
        A FrozenMap with the items of ``mapping``. Raises ``TypeError`` for anything that is
        neither a ``Mapping`` nor None.

    Example:
        >>> frozen({"x": 1}), frozen(None)
        ({'x': 1}, {})
        >>> m = frozen({"x": 1})
        >>> frozen(m) is m
        True
    """
    if mapping is None:
        return FrozenMap()
    if isinstance(mapping, FrozenMap):
        return mapping
    if not isinstance(mapping, Mapping):
        raise TypeError(f"frozen: expected a mapping or None, got {type(mapping).__name__}")
    return FrozenMap(mapping)
