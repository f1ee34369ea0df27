"""mxfn: MXNet's Module API as a functional Python interface over a parallel Rust core.

    >>> import mxfn as mx
    >>> x = mx.nd.array([[1, 2], [3, 4]])
    >>> float(mx.nd.sum(x * x).asscalar())
    30.0
"""

import logging as _logging
from importlib import metadata as _metadata

from . import _native
from . import context, ndarray, random, symbol
from . import executor, initializer, io, lr_scheduler, metric, optimizer, visualization
from . import callback, kvstore, module, monitor
from . import curried  # built from module: import it after
from . import profiler  # mx.profiler; MXFN_PROFILE=1 starts it at import
from . import rnn  # mx.rnn: cells as values, unroll, pack/unpack, encode_sentences
from . import onnx  # mx.onnx.export_model; the onnx package itself is needed only when called
from ._errors import MXFNError
from .context import Context, cpu, current_context, gpu

# A library's logger gets only a NullHandler: the application decides whether the training
# log is shown (README, "The training log"), and Python's last-resort handler stays quiet.
_logging.getLogger("mxfn").addHandler(_logging.NullHandler())

# The SPEC's namespace names and MXNet's aliases for them.
nd = ndarray
sym = symbol
init = initializer
eval_metric = metric

# One version source, the workspace Cargo.toml: maturin writes it into the package metadata
# and compiles it into the extension (a source tree that was never installed has only that).
try:
    __version__ = _metadata.version("mxfn")
except _metadata.PackageNotFoundError:
    __version__ = _native.__version__

__all__ = ["MXFNError", "Context", "cpu", "gpu", "current_context", "context", "nd", "ndarray",
           "random", "sym", "symbol", "executor", "visualization", "io", "optimizer",
           "lr_scheduler", "initializer", "init", "eval_metric", "metric", "module", "callback",
           "kvstore", "monitor", "curried", "profiler", "rnn", "onnx"]
