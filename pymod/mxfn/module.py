"""``mx.module``: MXNet's Module API as functions over a Module value (SPEC §2) — the
intermediate level (``bind``, ``init_params``, ``forward``, ``update``, checkpoints, …, defined
in ``mxfn._module``) and the high level built on it (``fit``, ``score``, ``predict``, defined
in ``mxfn._fit``). See ``mxfn._module`` for an example.
"""

from typing import TYPE_CHECKING

from . import _module
from ._fit import fit, fit_params, history, predict, predict_batch, predict_every_batch, score

# The intermediate level: what mxfn._module defines (not what it imports).
_INTERMEDIATE = sorted(n for n, v in vars(_module).items()
                       if not n.startswith("_") and getattr(v, "__module__", None) == _module.__name__)
globals().update({n: getattr(_module, n) for n in _INTERMEDIATE})
if TYPE_CHECKING:  # the names the update above binds, for type checkers
    from ._module import *  # noqa: F401,F403
# Used as mx.module.Module / mx.module.BucketingModule.
_module.Module.__module__ = _module.BucketingModule.__module__ = __name__

__all__ = sorted([*_INTERMEDIATE, "fit", "fit_params", "history", "predict", "predict_batch",
                  "predict_every_batch", "score"])
