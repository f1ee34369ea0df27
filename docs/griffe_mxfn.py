"""A griffe extension for mxfn's docstrings (used by mkdocstrings, see mkdocs.yml).

mxfn's docstrings follow the project's style (STYLE.md): an ``Options:`` section of
``key (type, default): meaning`` lines, ``Returns:``, and an ``Example:`` of doctests. Google
style, which mkdocstrings parses, calls the first "Other Parameters" and the last
"Examples"; this renames the two headers so options render as a table and doctests as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_HEADERS = [
    (re.compile(r"^(\s*)Options:\s*$", re.MULTILINE), r"\1Other Parameters:"),
    (re.compile(r"^(\s*)Example:\s*$", re.MULTILINE), r"\1Examples:"),
]


def rewrite(text: str) -> str:
    """``text`` with mxfn's section headers in Google style's names."""
    for pattern, repl in _HEADERS:
        text = pattern.sub(repl, text)
    return text


class MxfnDocstrings(griffe.Extension):
    """Rewrites every loaded object's docstring with ``rewrite``."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
