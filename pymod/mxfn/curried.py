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

from . import module as _module

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


def module_last(f):
    """``f(mod, *args, **kw)`` as ``g(*args, **kw) -> (lambda mod: f(mod, *args, **kw))``.

    Example:
        >>> def scale(mod, k, shift=0):
        ...     return mod * k + shift
        >>> module_last(scale)(3, shift=1)(2)
        7
    """
    @functools.wraps(f)
    def curried(*args, **kw):
        def apply(mod):
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


def _build():
    ns = {name: module_last(getattr(_module, name)) for name in MODULE_FIRST}
    ns.update((name, getattr(_module, name)) for name in NO_MODULE)
    return ns


globals().update(_build())
__all__ = list(EXPECTED)
