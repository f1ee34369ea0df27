"""Option maps: options declared as data, then merged, normalised, checked and defaulted."""

from __future__ import annotations

import difflib
import numbers
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ._errors import MXFNError
from ._maps import FrozenMap


class _Required:
    """The type of ``REQUIRED``, the default of an option the caller must give."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self) -> str:
        # copy, deepcopy and pickle give back the one instance, so `is REQUIRED` keeps working.
        return "REQUIRED"


REQUIRED = _Required()

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True)
class OptSpec:
    """One declared option: its default, accepted types, one-line doc and extra input names.

    ``types`` is a tuple of accepted types or None (any value); ``float`` also accepts ints.
    A None ``default`` means None is accepted too. ``aliases`` are snake_case names that
    mean this option on input (``save_optimizer_states`` for ``save_opt_states``).
    """

    default: Any
    types: tuple[type, ...] | None
    doc: str
    aliases: tuple[str, ...]


def opt(default: Any, types: type | tuple[type, ...] | None = None, doc: str = "",
        aliases: str | Iterable[str] = ()) -> OptSpec:
    """Declare one option; ``default=REQUIRED`` makes it required.

    Returns:
        An OptSpec with ``types`` as a tuple (or None for any type) and ``aliases`` as a
        tuple of snake_case names. Raises ``TypeError`` when ``types`` holds a non-type.

    Example:
        >>> opt(32, int, "batch size", aliases=("data_batch_size",))
        OptSpec(default=32, types=(<class 'int'>,), doc='batch size', aliases=('data_batch_size',))
        >>> opt(REQUIRED, (list, tuple)).default
        REQUIRED
    """
    if types is not None:
        types = types if isinstance(types, tuple) else (types,)
        bad = [t for t in types if not isinstance(t, type)]
        if bad:
            raise TypeError(f"opt: types must be types or a tuple of types, got {bad[0]!r}")
    if isinstance(aliases, str):
        aliases = (aliases,)
    return OptSpec(default, types, doc, tuple(normalize_key(a) for a in aliases))


# A word boundary inside camelCase: "auxParams" -> "aux|Params", "HTTPServer" -> "HTTP|Server".
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def normalize_key(key: str) -> str:
    """Turn a kebab-case or camelCase option name into snake_case.

    Returns:
        The snake_case name; a snake_case name comes back unchanged.

    Example:
        >>> normalize_key("data-shapes"), normalize_key("auxParams"), normalize_key("for_training")
        ('data_shapes', 'aux_params', 'for_training')
    """
    return _CAMEL_BOUNDARY.sub("_", key.replace("-", "_")).lower()


def parse_opts(fname: str, spec: Mapping[str, OptSpec], opts: Mapping[str, Any] | None = None,
               kw: Mapping[str, Any] | None = None) -> FrozenMap:
    """Merge an options mapping and keywords, check them against ``spec`` and fill defaults.

    Keys may be snake_case, kebab-case, camelCase or a declared alias. Keywords win over the
    mapping; the same option spelled twice within one of them is an error. Checks run in
    this order: unknown keys, missing required keys (both ``MXFNError``), then value types
    (``TypeError``). A non-Mapping ``opts`` raises ``TypeError``. Inputs are not modified.

    Returns:
        A FrozenMap holding every key of ``spec`` in spec order, given value or default.

    Example:
        >>> spec = {"data_shapes": opt(REQUIRED, list), "for_training": opt(True, bool)}
        >>> parse_opts("module.bind", spec, {"data-shapes": [("x", (4,))]}, {"forTraining": False})
        {'data_shapes': [('x', (4,))], 'for_training': False}
        >>> parse_opts("f", spec, {"data_shape": []})
        Traceback (most recent call last):
        ...
        mxfn._errors.MXFNError: f: unknown option "data_shape"; did you mean "data_shapes"?
    """
    if opts is None:
        opts = {}
    elif not isinstance(opts, Mapping):
        raise TypeError(f"{fname}: options must be a mapping (such as a dict) or None, "
                        f"got {type(opts).__name__}")
    kw = {} if kw is None else kw
    # Every accepted input name (canonical or alias), normalised, to its canonical key.
    names = {}
    for key, s in spec.items():
        names[key] = key
        names.update((a, key) for a in s.aliases)

    for source in (opts, kw):
        for key in source:
            if not isinstance(key, str):
                raise TypeError(f"{fname}: option names must be strings, "
                                f"got {type(key).__name__} {key!r}")
            if normalize_key(key) not in names:
                raise MXFNError(_unknown_message(fname, key, names, spec))

    given = {}
    for source in (opts, kw):
        spelled: dict[str, str] = {}
        for key, value in source.items():
            canonical = names[normalize_key(key)]
            if canonical in spelled:
                raise MXFNError(f'{fname}: option "{canonical}" given twice, '
                                f'as "{spelled[canonical]}" and "{key}"')
            spelled[canonical] = key
            given[canonical] = value

    for key, s in spec.items():
        if s.default is REQUIRED and key not in given:
            raise MXFNError(f'{fname}: missing required option "{key}"')

    for key, value in given.items():
        s = spec[key]
        if not _accepts(s, value):
            raise TypeError(f'{fname}: option "{key}" expects {_type_text(s)}, '
                            f"got {type(value).__name__} {reprlib.repr(value)}")

    return FrozenMap((key, given.get(key, s.default)) for key, s in spec.items())


def doc_options(spec: Mapping[str, OptSpec], indent: int = 0) -> str:
    """Render ``spec`` as a docstring's ``Options:`` section: ``key (type, default): doc`` lines.

    Returns:
        The section text, every line prefixed by ``indent`` spaces, without a final newline,
        ready to append to a docstring.

    Example:
        >>> print(doc_options({
        ...     "prefix": opt(REQUIRED, str, "file name prefix"),
        ...     "save_opt_states": opt(False, bool, "save them", aliases=("save_states",)),
        ...     "label_shapes": opt(None, list, "shapes of the labels")}))
        Options:
            prefix (str, required): file name prefix
            save_opt_states (bool, default False): save them; also accepted as "save_states"
            label_shapes (list or None, default None): shapes of the labels
    """
    lines = ["Options:"]
    for key, s in spec.items():
        default = "required" if s.default is REQUIRED else f"default {s.default!r}"
        also = "; also accepted as " + _quoted(s.aliases, "or") if s.aliases else ""
        lines.append(f"    {key} ({_type_text(s)}, {default}): {s.doc}{also}")
    pad = " " * indent
    return "\n".join(pad + line for line in lines)



def documented(spec: Mapping[str, OptSpec]) -> Callable[[_F], _F]:
    """Decorator: puts ``spec``'s ``Options:`` section (``doc_options``, indented 4) where the
    function's docstring says ``%OPTIONS%``."""
    def deco(f: _F) -> _F:
        f.__doc__ = (f.__doc__ or "").replace("    %OPTIONS%", doc_options(spec, 4))
        return f
    return deco


def _accepts(s: OptSpec, value: Any) -> bool:
    """Whether ``value`` is allowed for option ``s``."""
    if s.types is None or (value is None and s.default is None):
        return True
    # bool is an int subclass in Python, but True for a count or a rate is a mistake.
    if isinstance(value, bool):
        return bool in s.types
    for t in s.types:
        # numbers.Integral / numbers.Real also admit numpy scalars such as np.int64, np.float32.
        if t is int and isinstance(value, numbers.Integral):
            return True
        if t is float and isinstance(value, numbers.Real):
            return True
        if isinstance(value, t):
            return True
    return False


def _type_text(s: OptSpec) -> str:
    """The accepted types of ``s`` in words: ``list or None``, ``any``."""
    if s.types is None:
        return "any"
    names = [t.__name__ for t in s.types]
    if s.default is None and type(None) not in s.types:
        names.append("None")
    return " or ".join(names)


def _unknown_message(fname: str, key: str, names: Mapping[str, str],
                     spec: Mapping[str, OptSpec]) -> str:
    """The error text for an unknown option, suggesting the closest valid names."""
    wanted = normalize_key(key)
    scores = {name: difflib.SequenceMatcher(None, wanted, name).ratio() for name in names}
    best = max(scores.values(), default=0.0)
    # Only names about as close as the best one: "data_shape" suggests "data_shapes", not
    # also "label_shapes"; ties ("shape_a", "shape_b") are all listed, in spec order.
    close = [name for name, score in scores.items() if score >= max(0.6, best - 0.1)][:3]
    if close:
        return f'{fname}: unknown option "{key}"; did you mean {_quoted(close, "or")}?'
    if spec:
        return f'{fname}: unknown option "{key}"; valid options are {_quoted(list(spec), "and")}'
    return f'{fname}: unknown option "{key}"; {fname} takes no options'


def _quoted(words: Iterable[str], conjunction: str) -> str:
    """``"a"``, ``"a" or "b"``, ``"a", "b" or "c"``."""
    quoted = [f'"{w}"' for w in words]
    if len(quoted) == 1:
        return quoted[0]
    return f"{', '.join(quoted[:-1])} {conjunction} {quoted[-1]}"
