"""mx.curried: the ``mx.module`` namespace with the module argument moved last.

Each function takes the other arguments and returns a function of the module, so that
``toolz.pipe(m.module(sym), c.bind(data_shapes=…), c.init_params(), c.fit(train, num_epoch=2))``
works: ``c.fit(train, num_epoch=2)(mod)`` is ``m.fit(mod, train, num_epoch=2)`` (plain
``toolz.curry`` would bind ``train`` to the module slot). Functions that take no module
(``module``, ``bucketing_module``, ``load_checkpoint``, ``fit_params``) are the same as in
``mx.module``. The namespace is built once, at import, from ``mxfn.module`` by ``module_last``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import module as _module

if TYPE_CHECKING:
    # The NO_MODULE functions, which _build() installs unchanged.
    from ._fit import fit_params  # noqa: F401
    from ._bucketing import bucketing_module  # noqa: F401
    from ._module import load_checkpoint, module  # noqa: F401

    # What _build() installs, for type checkers and editors: each MODULE_FIRST name takes the
    # arguments after the module and returns a function of the module.
    _Curried = Callable[..., Callable[[Any], Any]]
    data_names: _Curried
    label_names: _Curried
    output_names: _Curried
    data_shapes: _Curried
    label_shapes: _Curried
    output_shapes: _Curried
    symbol: _Curried
    contexts: _Curried
    bind: _Curried
    init_params: _Curried
    init_optimizer: _Curried
    forward: _Curried
    backward: _Curried
    forward_backward: _Curried
    update: _Curried
    update_metric: _Curried
    outputs: _Curried
    outputs_merged: _Curried
    input_grads: _Curried
    input_grads_merged: _Curried
    grad_arrays: _Curried
    get_params: _Curried
    params: _Curried
    arg_params: _Curried
    aux_params: _Curried
    set_params: _Curried
    reshape: _Curried
    install_monitor: _Curried
    borrow_optimizer: _Curried
    save_optimizer_states: _Curried
    load_optimizer_states: _Curried
    save_checkpoint: _Curried
    fit: _Curried
    score: _Curried
    predict: _Curried
    predict_every_batch: _Curried
    predict_batch: _Curried
    history: _Curried

# SPEC §2, in table order: functions whose first argument is the module.
MODULE_FIRST = (
    "data_names", "label_names", "output_names", "data_shapes", "label_shapes", "output_shapes",
    "symbol", "contexts", "bind", "init_params", "init_optimizer", "forward", "backward",
    "forward_backward", "update", "update_metric", "outputs", "outputs_merged", "input_grads",
    "input_grads_merged", "grad_arrays", "get_params", "params", "arg_params", "aux_params",
    "set_params", "reshape", "install_monitor", "borrow_optimizer", "save_optimizer_states",
    "load_optimizer_states", "save_checkpoint", "fit", "score", "predict", "predict_every_batch",
    "predict_batch", "history",
)
# SPEC §2: functions that take no module; curried gives them unchanged.
NO_MODULE = ("module", "bucketing_module", "load_checkpoint", "fit_params")
EXPECTED = MODULE_FIRST + NO_MODULE


def module_last(f: Callable[..., Any]) -> Callable[..., Callable[[Any], Any]]:
    """``f(mod, *args, **kw)`` as ``g(*args, **kw) -> (lambda mod: f(mod, *args, **kw))``.

    Example:
        >>> def scale(mod, k, shift=0):
        ...     return mod * k + shift
        >>> module_last(scale)(3, shift=1)(2)
        7
    """
    @functools.wraps(f)
    def curried(*args: Any, **kw: Any) -> Callable[[Any], Any]:
        def apply(mod: Any) -> Any:
            return f(mod, *args, **kw)
        apply.__name__ = getattr(f, "__name__", "apply")
        apply.__qualname__ = f"{curried.__qualname__}(...)"
        return apply
    # Only the summary of f's docstring: its examples call f with the module first.
    summary = (f.__doc__ or "").strip().split("\n\n")[0]
    curried.__doc__ = (f"Curried ``{getattr(f, '__name__', '?')}``: takes the arguments after the module "
                       f"and returns a function of the module.\n\n{summary}")
    del curried.__wrapped__  # its signature is not f's: the module comes last, in the returned function
    return curried


def _build() -> dict[str, Callable[..., Any]]:
    ns = {name: module_last(getattr(_module, name)) for name in MODULE_FIRST}
    ns.update((name, getattr(_module, name)) for name in NO_MODULE)
    return ns


globals().update(_build())
__all__ = list(EXPECTED)
