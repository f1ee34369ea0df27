"""The registry's operators as Python functions, generated once for both ``mx.nd`` and
``mx.sym``: their names (snake_case, MXNet's own and aliases), their docstrings from the
registry entry, and how parameter values are written into MXNet attributes. ``ndarray`` and
``symbol`` each give ``op_functions`` the maker of one function."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _native

# Every operator of the Rust registry: name, py_name, aliases, doc, params, variadic.
OPS = _native.op_list()


def attr_str(v: Any) -> str:
    """A parameter value as MXNet's Python frontend writes it into attrs."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if v is None:
        return "None"
    if isinstance(v, (list, tuple)):
        return str(tuple(_plain(x) for x in v))
    if isinstance(v, numbers.Number):
        return str(_plain(v))
    if isinstance(v, str):
        return v
    if isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic)):
        return np.dtype(v).name
    raise TypeError(f"operator parameter value must be a number, bool, str, tuple or None, got {type(v).__name__} {v!r}")


def _plain(x: Any) -> Any:
    # numpy scalars print like Python numbers in MXNet's attrs ("2", not "np.int64(2)").
    return x.item() if hasattr(x, "item") and not isinstance(x, (int, float)) else x


def op_doc(info: _native.OpInfo, imperative: bool = False) -> str:
    """The docstring of a generated operator function, from the registry entry."""
    lines = [info["doc"], "", "Parameters (MXNet attributes; snake_case or kebab-case keys):"]
    for pname, kind, default, pdoc in info["params"]:
        d = "required" if default is None else f"default {default}"
        lines.append(f"    {pname} ({kind}, {d}): {pdoc}")
    if not info["params"]:
        lines.append("    (none)")
    lines.append("")
    lines.append(f"MXNet operator: {info['name']}.")
    return "\n".join(lines)


# Python names beyond the derived ones (SPEC §3 spellings).
ALIASES = {"split": "SliceChannel"}


def op_functions(make: Callable[[_native.OpInfo], Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``{python name: function}`` for every registry op: its snake_case name, its MXNet
    name(s) (for MXNet habits: ``FullyConnected``) and ``ALIASES``; ``make(info)`` builds one."""
    out: dict[str, Callable[..., Any]] = {}
    for info in OPS:
        f = make(info)
        f.__name__ = info["py_name"]
        f.__doc__ = op_doc(info)
        names = [info["py_name"], info["name"], *info["aliases"]]
        names += [a for a, target in ALIASES.items() if target == info["name"]]
        for n in names:
            if n.isidentifier():
                out.setdefault(n, f)
    return out
