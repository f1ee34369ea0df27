"""mxfn: MXNet's Module API as a functional Python interface over a parallel Rust core.

    >>> import mxfn as mx
    >>> x = mx.nd.array([[1, 2], [3, 4]])
    >>> float(mx.nd.sum(x * x).asscalar())
    30.0
"""

from . import context, ndarray, random
from ._errors import MXFNError
from .context import Context, cpu, current_context, gpu

nd = ndarray

__version__ = "0.1.0"

__all__ = ["MXFNError", "Context", "cpu", "gpu", "current_context", "context", "nd",
           "ndarray", "random"]
