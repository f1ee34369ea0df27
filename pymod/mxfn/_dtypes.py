"""The element types mxfn arrays and symbols take, by name (leaf module: ``mx.nd`` and
``mx.sym`` both read it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import MXFNError

DTYPES = ("float32", "float64", "float16", "uint8", "int8", "int32", "int64")


def dtype_name(dtype: Any, fname: str = "nd") -> str:
    """The mxfn dtype name of ``dtype`` (a name, numpy dtype or numpy scalar type).

    Returns:
        One of ``DTYPES``; anything else raises MXFNError naming the valid dtypes.

    Example:
        >>> dtype_name(np.float16), dtype_name("int32")
        ('float16', 'int32')
    """
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise MXFNError(f"{fname}: dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    return name
