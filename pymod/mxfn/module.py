"""``mx.module``: MXNet's Module API as functions over a Module value (SPEC §2) — the
intermediate level (``bind``, ``init_params``, ``forward``, ``update``, checkpoints, …, defined
in ``mxfn._module``; ``bucketing_module`` and friends in ``mxfn._bucketing``) and the high level built on it (``fit``, ``score``, ``predict``, defined
in ``mxfn._fit``). See ``mxfn._module`` for an example.
"""

from typing import TYPE_CHECKING

from . import _bucketing, _module
from ._fit import fit, fit_params, history, predict, predict_batch, predict_every_batch, score


def _defined(src):
    """The public names ``src`` defines (not what it imports)."""
    return [n for n, v in vars(src).items() if not n.startswith("_") and getattr(v, "__module__", None) == src.__name__]


# The intermediate level: mxfn._module's Module functions, mxfn._bucketing's BucketingModule
# ones, and — for every function a BucketingModule also takes — the dispatching version.
_INTERMEDIATE = sorted({*_defined(_module), *_defined(_bucketing)})
globals().update({n: getattr(_module, n) for n in _defined(_module)})
globals().update({n: getattr(_bucketing, n) for n in _defined(_bucketing)})
globals().update(_bucketing.DISPATCHING)
if TYPE_CHECKING:  # the names the updates above bind, for type checkers
    from ._bucketing import *  # noqa: F401,F403
    from ._module import *  # noqa: F401,F403
# Used as mx.module.Module / mx.module.BucketingModule.
_module.Module.__module__ = _bucketing.BucketingModule.__module__ = __name__

__all__ = sorted([*_INTERMEDIATE, "fit", "fit_params", "history", "predict", "predict_batch",
                  "predict_every_batch", "score"])
