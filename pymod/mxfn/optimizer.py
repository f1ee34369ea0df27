"""mx.optimizer: MXNet 1.9.1's optimizers over the Rust core's fused update kernels.

An optimizer is made once (``sgd(learning_rate=0.1, momentum=0.9)``, ``create("adam")``) and
holds MXNet's mutable bookkeeping: per-index update counts, ``num_update``, the scheduler it
shares, the learning-rate and weight-decay multipliers. Updates are functional:
``create_state(opt, index, weight)`` gives a state shaped like MXNet's (None, an NDArray, or
a tuple of them) and ``update(opt, index, weight, grad, state)`` returns
``(new_weight, new_state)`` without changing its inputs; the optimizer's counters advance,
as in MXNet. Update rules, defaults, rescaling (before clipping), clipping, weight decay
and multipliers match MXNet 1.9.1 (see the conformance data's README).

    >>> import numpy as np
    >>> opt = sgd(learning_rate=0.1, momentum=0.9)
    >>> w = np.array([1.0, 2.0], dtype="float32")
    >>> state = create_state(opt, 0, w)
    >>> w1, state = update(opt, 0, w, np.array([1.0, -1.0]), state)
    >>> w1.asnumpy(), num_update(opt)
    (array([0.9, 2.1], dtype=float32), 1)
"""

from __future__ import annotations

import difflib
import numbers
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Union

from . import _native
from ._errors import MXFNError
from ._maps import FrozenMap
from ._opts import OptSpec, documented, opt, parse_opts
from .lr_scheduler import LRScheduler
from .ndarray import NDArray, _handle

if TYPE_CHECKING:
    from ._types import ArrayLike, OptimizerParams, SchedulerLike

    #: An optimizer state as MXNet shapes it: None, an NDArray, or a tuple of states.
    OptState = Union[NDArray, tuple["OptState", ...], None]

__all__ = [
    "Optimizer", "Updater", "sgd", "nag", "signum", "dcasgd", "sgld", "adam", "adamax", "nadam",
    "adagrad", "rmsprop", "adadelta", "ftrl", "create", "create_state", "update", "get_updater",
    "name", "learning_rate", "num_update", "update_count", "options", "lr_scheduler",
    "lr_mult", "wd_mult", "idx2name", "set_learning_rate", "set_rescale_grad", "set_lr_mult",
    "set_wd_mult", "set_idx2name", "OPTIMIZERS",
]


class Optimizer:
    """An optimizer: an update rule plus MXNet's bookkeeping (built by ``sgd``, ``adam``, …,
    or ``create(name)``).

    It is mutable like MXNet's: updates advance its per-index counts and ``num_update``,
    and ``set_lr_mult`` / ``set_wd_mult`` / ``set_learning_rate`` change it (and return it).
    Read it with the functions of this module (``learning_rate(opt)``, ``options(opt)``…).

    Example:
        >>> adam(learning_rate=0.01, wd=1e-4)
        Optimizer(adam, learning_rate=0.01, wd=0.0001, rescale_grad=1.0, clip_gradient=None, beta1=0.9, beta2=0.999, epsilon=1e-08, lazy_update=True)
    """

    __slots__ = ("_h", "_sched")
    _h: _native.OptimizerHandle
    _sched: SchedulerLike | None

    def __init__(self, handle: _native.OptimizerHandle, sched: SchedulerLike | None = None) -> None:
        if not isinstance(handle, _native.OptimizerHandle):
            raise TypeError("Optimizer(...) wraps a core handle; build optimizers with "
                            "mx.optimizer.sgd(...), adam(...) or create(name, ...)")
        self._h = handle
        self._sched = sched

    @property
    def name(self) -> str:
        return _native.opt_name(self._h)

    def __repr__(self) -> str:
        o = options(self)
        shown = ["learning_rate", "wd", "rescale_grad", "clip_gradient"]
        items = [f"{k}={o[k]!r}" for k in shown]
        items += [f"{k}={v!r}" for k, v in o.items() if k not in shown and k not in _BASE_KEYS]
        if self._sched is not None:
            items.append(f"lr_scheduler={self._sched!r}")
        return f"Optimizer({self.name}, {', '.join(items)})"


# ---------------------------------------------------------------------------- options

def _common(lr_default: float | None, lr_doc: str) -> dict[str, OptSpec]:
    return {
        "learning_rate": opt(lr_default, float, lr_doc),
        "wd": opt(0.0, float, "weight decay (L2), times the parameter's wd_mult"),
        "rescale_grad": opt(1.0, float, "gradient scale, applied before clipping "
                            "(module.init_optimizer sets 1/batch_size)"),
        "clip_gradient": opt(None, float, "clip the rescaled gradient to [-c, c]; None = no "
                             "clipping"),
        "lr_scheduler": opt(None, None, "an mx.lr_scheduler scheduler (its state is shared, "
                            "not copied), or any callable num_update -> lr"),
        "begin_num_update": opt(0, int, "the update count every index starts from"),
        "param_idx2name": opt(None, Mapping, "parameter index -> name: names not ending in "
                              "_weight or _gamma get wd_mult 0, and name-keyed multipliers "
                              "apply"),
        "sym": opt(None, None, "a Symbol whose variables' __lr_mult__ / __wd_mult__ attributes "
                   "give per-name multipliers (or its attr_dict)"),
        "lr_mult": opt(None, Mapping, "name -> learning-rate multiplier (over sym's)"),
        "wd_mult": opt(None, Mapping, "name -> weight-decay multiplier (over sym's)"),
        "multi_precision": opt(False, bool, "accepted for MXNet compatibility (float16 only; "
                               "mxfn updates float32 weights)"),
    }


_LR_WHEN_GIVEN = ("learning rate; None = 0.01, or the lr_scheduler's base_lr (a given rate "
                  "overwrites the scheduler's base_lr)")
_LR_CLASS = "learning rate (overwrites a differing lr_scheduler base_lr, as in MXNet)"
_BASE_KEYS = set(_common(None, ""))
_LAZY = opt(True, bool, "accepted for MXNet compatibility (it only changes sparse updates)")
_MOMENTUM = opt(0.0, float, "momentum in [0, 1); 0 = no momentum state")

SGD_OPTS = {**_common(None, _LR_WHEN_GIVEN), "momentum": _MOMENTUM, "lazy_update": _LAZY}
NAG_OPTS = {**_common(None, _LR_WHEN_GIVEN), "momentum": _MOMENTUM}
SIGNUM_OPTS = {
    **_common(0.01, _LR_CLASS),
    "momentum": opt(0.9, float, "momentum in [0, 1); 0 = signSGD"),
    "wd_lh": opt(0.0, float, "decoupled weight decay (needs momentum > 0)"),
}
DCASGD_OPTS = {
    **_common(None, _LR_WHEN_GIVEN),
    "momentum": _MOMENTUM,
    "lamda": opt(0.04, float, "delay-compensation strength"),
}
SGLD_OPTS = _common(None, _LR_WHEN_GIVEN)
ADAM_OPTS = {
    **_common(0.001, _LR_CLASS),
    "beta1": opt(0.9, float, "first-moment decay, in [0, 1)"),
    "beta2": opt(0.999, float, "second-moment decay, in [0, 1)"),
    "epsilon": opt(1e-8, float, "added to sqrt(v)"),
    "lazy_update": _LAZY,
}
ADAMAX_OPTS = {
    **_common(0.002, _LR_CLASS),
    "beta1": opt(0.9, float, "first-moment decay, in [0, 1)"),
    "beta2": opt(0.999, float, "infinity-norm decay, in [0, 1)"),
}
NADAM_OPTS = {
    **_common(0.001, _LR_CLASS),
    "beta1": opt(0.9, float, "first-moment decay, in [0, 1)"),
    "beta2": opt(0.999, float, "second-moment decay, in [0, 1)"),
    "epsilon": opt(1e-8, float, "added to sqrt(v_hat)"),
    "schedule_decay": opt(0.004, float, "decay of the momentum schedule"),
}
ADAGRAD_OPTS = {
    **_common(None, _LR_WHEN_GIVEN),
    "eps": opt(1e-7, float, "added inside the square root", aliases=("epsilon", "float_stable_eps")),
}
RMSPROP_OPTS = {
    **_common(0.001, _LR_CLASS),
    "gamma1": opt(0.9, float, "decay of the squared-gradient average, in [0, 1)"),
    "gamma2": opt(0.9, float, "momentum of the centered variant, in [0, 1)"),
    "epsilon": opt(1e-8, float, "added inside the square root"),
    "centered": opt(False, bool, "Graves' centered variant (state (n, g, delta))"),
    "clip_weights": opt(None, float, "clip weights to [-c, c] after each update; None or 0 = off"),
}
ADADELTA_OPTS = {
    **_common(None, "accepted, but AdaDelta has no learning rate (nor does it call a scheduler)"),
    "rho": opt(0.9, float, "decay of both running averages, in [0, 1)"),
    "epsilon": opt(1e-5, float, "added inside both square roots (> 0)"),
}
FTRL_OPTS = {
    **_common(0.1, "learning rate (> 0); Ftrl never overwrites an lr_scheduler's base_lr"),
    "lamda1": opt(0.01, float, "L1 regularisation strength"),
    "beta": opt(1.0, float, "added to sqrt(n) in the denominator"),
}

_SPECS = {
    "sgd": SGD_OPTS, "nag": NAG_OPTS, "signum": SIGNUM_OPTS, "dcasgd": DCASGD_OPTS,
    "sgld": SGLD_OPTS, "adam": ADAM_OPTS, "adamax": ADAMAX_OPTS, "nadam": NADAM_OPTS,
    "adagrad": ADAGRAD_OPTS, "rmsprop": RMSPROP_OPTS, "adadelta": ADADELTA_OPTS, "ftrl": FTRL_OPTS,
}
OPTIMIZERS = tuple(_SPECS)
_BOOL_PARAMS = {"centered", "lazy_update"}



# ---------------------------------------------------------------------------- construction

def _name_map(fname: str, key: str, m: Mapping[Any, Any] | None, value_type: type) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k, v in (m or {}).items():
        ok_key = isinstance(k, str) if value_type is float else (
            isinstance(k, numbers.Integral) and not isinstance(k, bool) and int(k) >= 0)
        if not ok_key:
            want = "parameter names (str)" if value_type is float else "indices (ints >= 0)"
            raise TypeError(f'{fname}: "{key}" keys must be {want}, got {k!r}')
        if value_type is float:
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise TypeError(f'{fname}: "{key}" values must be numbers, got {v!r} for {k!r}')
            out[k] = float(v)
        else:
            if not isinstance(v, str):
                raise TypeError(f'{fname}: "{key}" values must be names (str), got {v!r} for {k!r}')
            out[int(k)] = v
    return out


def _sym_mults(fname: str, sym: Any) -> tuple[dict[str, float], dict[str, float]]:
    """The ``__lr_mult__`` / ``__wd_mult__`` attributes of the symbol's arguments (MXNet's
    ``sym_info``); an attr dict ``{node: {key: value}}`` is accepted in place of a symbol."""
    if sym is None:
        return {}, {}
    if isinstance(sym, Mapping):
        attrs, names = sym, list(sym)
    elif hasattr(sym, "attr_dict") and hasattr(sym, "list_arguments"):
        attrs, names = sym.attr_dict(), sym.list_arguments()
    else:
        raise TypeError(f'{fname}: "sym" must be a Symbol or its attr_dict, got {type(sym).__name__}')
    lr, wd = {}, {}
    for n in names:
        a = attrs.get(n, {})
        try:
            if "__lr_mult__" in a:
                lr[n] = float(a["__lr_mult__"])
            if "__wd_mult__" in a:
                wd[n] = float(a["__wd_mult__"])
        except (TypeError, ValueError):
            raise MXFNError(f"{fname}: sym: variable {n!r} has a non-numeric multiplier "
                            f"attribute {dict(a)!r}") from None
    return lr, wd


def _make(name: str, fname: str, spec: Mapping[str, OptSpec], opts: Mapping[str, Any] | None,
          kw: Mapping[str, Any]) -> Optimizer:
    o = parse_opts(fname, spec, opts, kw)
    sched = o["lr_scheduler"]
    if sched is not None and not isinstance(sched, LRScheduler) and not callable(sched):
        raise TypeError(f'{fname}: "lr_scheduler" must be an mx.lr_scheduler scheduler or a '
                        f"callable num_update -> lr, got {type(sched).__name__}")
    idx2name = _name_map(fname, "param_idx2name", o["param_idx2name"], str)
    sym_lr, sym_wd = _sym_mults(fname, o["sym"])
    lr_mult = {**sym_lr, **_name_map(fname, "lr_mult", o["lr_mult"], float)}
    wd_mult = {**sym_wd, **_name_map(fname, "wd_mult", o["wd_mult"], float)}
    params = {k: v for k, v in o.items() if k not in ("lr_scheduler", "param_idx2name", "sym",
                                                      "lr_mult", "wd_mult")}
    handle = _native.opt_create(name, params, sched._h if isinstance(sched, LRScheduler) else sched,
                                idx2name, lr_mult, wd_mult)
    for w in _native.opt_warnings(handle):
        warnings.warn(f"{fname}: {w}", UserWarning, stacklevel=3)
    return Optimizer(handle, sched)


@documented(SGD_OPTS)
def sgd(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Stochastic gradient descent, with optional momentum (MXNet's SGD).

    momentum 0: ``w = (1 - lr*wd)*w - lr*clip(rescale_grad*g)``; else
    ``m = momentum*m - lr*wd*w - lr*clip(rescale_grad*g)``, ``w = w + m``.
    State: the momentum array, or None when momentum is 0.

    %OPTIONS%

    Returns:
        An Optimizer. A NaN or negative learning rate, momentum outside [0, 1) and other
        nonsense raise MXFNError.

    Example:
        >>> learning_rate(sgd())
        0.01
        >>> options(sgd(momentum=0.9))["momentum"]
        0.9
    """
    return _make("sgd", "optimizer.sgd", SGD_OPTS, opts, kw)


@documented(NAG_OPTS)
def nag(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Nesterov accelerated gradient (MXNet's NAG).

    With momentum: ``m1 = momentum*m``, ``w' = w - m1 + (1 + momentum)*(m1 - lr*(g' + wd*w))``,
    ``m = m1 - lr*(g' + wd*w')`` with ``g' = clip(rescale_grad*g)``; momentum 0 is plain SGD.
    State: the momentum array, or None.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> name(nag(momentum=0.9))
        'nag'
    """
    return _make("nag", "optimizer.nag", NAG_OPTS, opts, kw)


@documented(SIGNUM_OPTS)
def signum(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Signum: steps along the sign of the momentum (MXNet's Signum; signSGD for momentum 0).

    ``m = momentum*m - (1 - momentum)*(wd*w + clip(rescale_grad*g))``,
    ``w = (1 - lr*wd_lh)*w + lr*sign(m)``; momentum 0:
    ``w = (1 - lr*wd)*w - lr*sign(clip(rescale_grad*g))``. State: the momentum array, or None.

    %OPTIONS%

    Returns:
        An Optimizer (``wd_lh`` with momentum 0 raises, as in MXNet).

    Example:
        >>> learning_rate(signum())
        0.01
    """
    return _make("signum", "optimizer.signum", SIGNUM_OPTS, opts, kw)


@documented(DCASGD_OPTS)
def dcasgd(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Delay-compensated asynchronous SGD (MXNet's DCASGD).

    ``step = -lr*(g' + wd*w + lamda*g'**2*(w - w_prev))``, ``w_prev = w``, ``w = w + step``
    (with momentum the step accumulates: ``m = momentum*m + step``; MXNet 1.9.1 raises for
    momentum > 0, mxfn applies it as documented). State: ``(momentum or None, w_prev)``.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> options(dcasgd())["lamda"]
        0.04
    """
    return _make("dcasgd", "optimizer.dcasgd", DCASGD_OPTS, opts, kw)


@documented(SGLD_OPTS)
def sgld(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Stochastic gradient Langevin dynamics (MXNet's SGLD).

    ``w = w - lr/2*(clip(rescale_grad*g) + wd*w) + noise``, noise ~ Normal(0, sqrt(lr)) from
    mxfn's global seeded stream (``mx.random.seed``). State: None.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> create_state(sgld(), 0, [1.0, 2.0]) is None
        True
    """
    return _make("sgld", "optimizer.sgld", SGLD_OPTS, opts, kw)


@documented(ADAM_OPTS)
def adam(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Adam (MXNet's Adam: L2 weight decay, bias correction folded into the learning rate).

    ``g' = clip(rescale_grad*g + wd*w)``, ``m = beta1*m + (1-beta1)*g'``,
    ``v = beta2*v + (1-beta2)*g'**2``, ``w = w - lr_t*m/(sqrt(v) + epsilon)`` with
    ``lr_t = lr*sqrt(1 - beta2**t)/(1 - beta1**t)`` (``t``: the index's update count).
    State: ``(mean, variance)``.

    %OPTIONS%

    Returns:
        An Optimizer. beta1/beta2 outside [0, 1) raise MXFNError.

    Example:
        >>> learning_rate(adam())
        0.001
    """
    return _make("adam", "optimizer.adam", ADAM_OPTS, opts, kw)


@documented(ADAMAX_OPTS)
def adamax(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Adamax: Adam with the infinity norm (MXNet's Adamax).

    ``lr_t = lr/(1 - beta1**t)``, ``g' = clip(rescale_grad*g + wd*w)``,
    ``m = beta1*m + (1-beta1)*g'``, ``u = max(beta2*u, |g'|)``, ``w = w - lr_t*m/u``.
    State: ``(mean, u)``.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> learning_rate(adamax())
        0.002
    """
    return _make("adamax", "optimizer.adamax", ADAMAX_OPTS, opts, kw)


@documented(NADAM_OPTS)
def nadam(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """Nesterov Adam (MXNet's Nadam).

    Uses MXNet's momentum schedule ``mu_t = beta1*(1 - 0.5*0.96**(t*schedule_decay))``; the
    running product ``m_schedule`` is one number per optimizer, advanced by every update of
    every index (as in MXNet). State: ``(mean, variance)``.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> options(nadam())["schedule_decay"]
        0.004
    """
    return _make("nadam", "optimizer.nadam", NADAM_OPTS, opts, kw)


@documented(ADAGRAD_OPTS)
def adagrad(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """AdaGrad (MXNet's AdaGrad).

    ``g' = clip(rescale_grad*g)``, ``h = h + g'**2``, ``w = w - lr*(g'/sqrt(h + eps) + wd*w)``.
    State: the history array.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> options(adagrad(epsilon=1e-6))["eps"]
        1e-06
    """
    return _make("adagrad", "optimizer.adagrad", ADAGRAD_OPTS, opts, kw)


@documented(RMSPROP_OPTS)
def rmsprop(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """RMSProp, plain or centered (MXNet's RMSProp).

    ``g' = clip(rescale_grad*g + wd*w)``, ``n = (1-gamma1)*g'**2 + gamma1*n``; plain:
    ``w = w - lr*g'/sqrt(n + epsilon)``; centered: ``gm = (1-gamma1)*g' + gamma1*gm``,
    ``delta = gamma2*delta - lr*g'/sqrt(n - gm**2 + epsilon)``, ``w = w + delta``; then
    ``clip_weights``. State: ``(n,)``, centered ``(n, g, delta)``.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> len(create_state(rmsprop(centered=True), 0, [1.0]))
        3
    """
    return _make("rmsprop", "optimizer.rmsprop", RMSPROP_OPTS, opts, kw)


@documented(ADADELTA_OPTS)
def adadelta(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """AdaDelta (MXNet's AdaDelta): no learning rate.

    ``g' = clip(rescale_grad*g)``, ``acc_g = rho*acc_g + (1-rho)*g'**2``,
    ``d = sqrt(acc_delta + epsilon)/sqrt(acc_g + epsilon)*g'``,
    ``acc_delta = rho*acc_delta + (1-rho)*d**2``, ``w = w - d - wd*w``. State:
    ``(acc_g, acc_delta)``. (MXNet also rescales the caller's gradient in place; mxfn does not.)

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> options(adadelta())["rho"]
        0.9
    """
    return _make("adadelta", "optimizer.adadelta", ADADELTA_OPTS, opts, kw)


@documented(FTRL_OPTS)
def ftrl(opts: OptimizerParams | Mapping[str, Any] | None = None, /, **kw: Any) -> Optimizer:
    """FTRL-proximal (MXNet's Ftrl).

    ``g' = clip(rescale_grad*g)``, ``z = z + g' - (sqrt(n + g'**2) - sqrt(n))*w/lr``,
    ``n = n + g'**2``, ``w = (sign(z)*lamda1 - z)/((beta + sqrt(n))/lr + wd)`` where
    ``|z| > lamda1``, else 0. State: ``(z, n)``.

    %OPTIONS%

    Returns:
        An Optimizer.

    Example:
        >>> learning_rate(ftrl())
        0.1
    """
    return _make("ftrl", "optimizer.ftrl", FTRL_OPTS, opts, kw)


_MAKERS = {
    "sgd": sgd, "nag": nag, "signum": signum, "dcasgd": dcasgd, "sgld": sgld, "adam": adam,
    "adamax": adamax, "nadam": nadam, "adagrad": adagrad, "rmsprop": rmsprop,
    "adadelta": adadelta, "ftrl": ftrl,
}


def create(name: str | Optimizer, opts: OptimizerParams | Mapping[str, Any] | None = None, /,
           **kw: Any) -> Optimizer:
    """An optimizer by name, case-insensitive like MXNet's registry (``"sgd"``, ``"Adam"``,
    ``"RMSProp"`` …), with that optimizer's options.

    An Optimizer value given as ``name`` is returned as it is (no options allowed then).

    Returns:
        An Optimizer. An unknown name raises MXFNError with the closest valid names.

    Example:
        >>> name(create("RMSProp", {"learning_rate": 0.01}))
        'rmsprop'
        >>> create("sdg")
        Traceback (most recent call last):
        ...
        mxfn._errors.MXFNError: optimizer.create: unknown optimizer "sdg"; did you mean "sgd" or "sgld"?
    """
    if isinstance(name, Optimizer):
        if opts or kw:
            raise MXFNError("optimizer.create: options cannot be given with an Optimizer value")
        return name
    if not isinstance(name, str):
        raise TypeError(f"optimizer.create: name must be a str, got {type(name).__name__}")
    key = name.lower()
    if key not in _MAKERS:
        close = difflib.get_close_matches(key, OPTIMIZERS, n=3, cutoff=0.5)
        hint = ("did you mean " + " or ".join(f'"{c}"' for c in close) + "?" if close else
                "valid names are " + ", ".join(OPTIMIZERS))
        raise MXFNError(f'optimizer.create: unknown optimizer "{name}"; {hint}')
    return _make(key, f"optimizer.{key}", _SPECS[key], opts, kw)


# ---------------------------------------------------------------------------- functional core

def _opt(fname: str, o: Any) -> Optimizer:
    if not isinstance(o, Optimizer):
        raise TypeError(f"{fname}: expected an Optimizer, got {type(o).__name__}")
    return o


def _index(fname: str, index: Any) -> int:
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise TypeError(f"{fname}: index must be an int, got {type(index).__name__} {index!r}")
    if index < 0:
        raise MXFNError(f"{fname}: index must be >= 0, got {index}")
    return int(index)


def _array(x: ArrayLike) -> _native.NDArrayHandle:
    # NDArrays keep their dtype (the core names a non-float32 one); numpy arrays and lists
    # become float32, mxfn's default.
    return x._h if isinstance(x, NDArray) else _handle(x, "float32")


def _state_in(fname: str, state: Any) -> Any:
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return tuple(_state_in(fname, s) for s in state)
    try:
        return _array(state)
    except (MXFNError, TypeError):
        raise TypeError(f"{fname}: state must be None, an array or a tuple of them (as "
                        f"create_state gives), got {type(state).__name__}") from None


def _state_out(h: Any) -> Any:
    if h is None:
        return None
    if isinstance(h, tuple):
        return tuple(_state_out(s) for s in h)
    return NDArray(h)


def create_state(opt: Optimizer, index: int, weight: ArrayLike) -> OptState:
    """A fresh optimizer state for parameter ``index`` shaped like ``weight`` (MXNet's
    ``create_state``): None, an NDArray, or a tuple of them (see each optimizer).

    Returns:
        The state; zeros, except DCASGD's previous weight, which starts as ``weight``.

    Example:
        >>> [s.shape for s in create_state(adam(), 0, [[1.0, 2.0]])]
        [(1, 2), (1, 2)]
    """
    fname = "optimizer.create_state"
    o = _opt(fname, opt)
    return _state_out(_native.opt_create_state(o._h, _index(fname, index), _array(weight)))


def update(opt: Optimizer, index: int, weight: ArrayLike, grad: ArrayLike,
           state: OptState) -> tuple[NDArray, OptState]:
    """One update of parameter ``index``: ``(new_weight, new_state)``.

    The inputs are left unchanged (the update works on copies where it must); the
    optimizer's update count for ``index`` and its ``num_update`` advance, as in MXNet, and
    its scheduler (if any) is called with ``num_update``. ``weight`` and ``grad`` must be
    float32 of one shape (numpy arrays and lists are converted to float32); ``state`` is
    what ``create_state`` (or the previous ``update``) gave.

    Returns:
        ``(new_weight, new_state)``: an NDArray and a state shaped like the input's.

    Example:
        >>> o = adam(learning_rate=0.1)
        >>> w, s = update(o, 0, [1.0], [0.5], create_state(o, 0, [1.0]))
        >>> round(float(w.asnumpy()[0]), 4), update_count(o, 0)
        (0.9, 1)
    """
    fname = "optimizer.update"
    o = _opt(fname, opt)
    w, s = _native.opt_update(o._h, _index(fname, index), _array(weight), _array(grad),
                              _state_in(fname, state))
    return NDArray(w), _state_out(s)


class Updater:
    """MXNet's updater: ``updater(index, grad, weight)`` creates the state of ``index`` at its
    first call and applies ``update``. It returns the new weight and, when ``weight`` is an
    mxfn NDArray, also rebinds it to the new value (``weight[:] = new``, as MXNet updates in
    place); numpy weights are never written. States are kept in ``updater.states``."""

    __slots__ = ("optimizer", "states")
    optimizer: Optimizer
    states: dict[int, OptState]

    def __init__(self, optimizer: Optimizer) -> None:
        self.optimizer = _opt("optimizer.get_updater", optimizer)
        self.states = {}

    def __call__(self, index: int, grad: ArrayLike, weight: ArrayLike) -> NDArray:
        if index not in self.states:
            self.states[index] = create_state(self.optimizer, index, weight)
        new, self.states[index] = update(self.optimizer, index, weight, grad, self.states[index])
        if isinstance(weight, NDArray):
            weight._h = new._h
        return new


def get_updater(opt: Optimizer) -> Updater:
    """An MXNet-style updater over ``opt`` (see ``Updater``).

    Returns:
        An Updater: ``updater(index, grad, weight) -> new weight``.

    Example:
        >>> import mxfn.ndarray as nd
        >>> u = get_updater(sgd(learning_rate=0.5))
        >>> w = nd.array([1.0, 1.0])
        >>> _ = u(0, nd.array([1.0, -1.0]), w)
        >>> w.asnumpy()
        array([0.5, 1.5], dtype=float32)
    """
    return Updater(opt)


# ---------------------------------------------------------------------------- asking

def name(opt: Optimizer) -> str:
    """The optimizer's registry name (``"sgd"``, ``"adam"``…).

    Example:
        >>> name(create("Adam"))
        'adam'
    """
    return _opt("optimizer.name", opt).name


def learning_rate(opt: Optimizer) -> float:
    """The current learning rate. With a scheduler this calls it with ``num_update`` (and so
    advances its state, exactly like MXNet's ``learning_rate`` property).

    Example:
        >>> learning_rate(adam(learning_rate=0.01))
        0.01
    """
    return _native.opt_learning_rate(_opt("optimizer.learning_rate", opt)._h)


def num_update(opt: Optimizer) -> int:
    """The largest update count of any index (MXNet's ``num_update``).

    Example:
        >>> num_update(sgd(begin_num_update=5))
        5
    """
    return _native.opt_num_update(_opt("optimizer.num_update", opt)._h)


def update_count(opt: Optimizer, index: int) -> int | None:
    """How many updates ``index`` has had (counted from ``begin_num_update``); None before its
    first update.

    Example:
        >>> update_count(sgd(), 0) is None
        True
    """
    fname = "optimizer.update_count"
    return _native.opt_update_count(_opt(fname, opt)._h, _index(fname, index))


def options(opt: Optimizer) -> FrozenMap:
    """The optimizer's effective constructor options, MXNet defaults filled in (MXNet's
    ``effective_kwargs``): ``learning_rate`` (None when a scheduler decides and none was
    given), ``wd``, ``rescale_grad``, ``clip_gradient``, ``begin_num_update``,
    ``multi_precision`` and the rule's own options.

    Returns:
        A read-only map.

    Example:
        >>> options(rmsprop(centered=True))["centered"]
        True
    """
    o = _opt("optimizer.options", opt)
    lr, wd, rescale, clip, begin, mp, _ = _native.opt_common(o._h)
    out: dict[str, Any] = {"learning_rate": lr, "wd": wd, "rescale_grad": rescale, "clip_gradient": clip,
           "begin_num_update": begin, "multi_precision": mp}
    for k, v in _native.opt_params(o._h):
        out[k] = bool(v) if k in _BOOL_PARAMS else v
    if o.name == "rmsprop" and "clip_weights" not in out:
        out["clip_weights"] = None
    return FrozenMap(out)


def lr_scheduler(opt: Optimizer) -> SchedulerLike | None:
    """The scheduler given at creation (None without one); it shares the optimizer's state.

    Example:
        >>> lr_scheduler(sgd()) is None
        True
    """
    return _opt("optimizer.lr_scheduler", opt)._sched


def lr_mult(opt: Optimizer) -> FrozenMap:
    """The effective learning-rate multipliers by name (the symbol's ``__lr_mult__`` and
    ``lr_mult`` option, then the last ``set_lr_mult``).

    Example:
        >>> lr_mult(sgd(lr_mult={"fc_weight": 2.0}))
        {'fc_weight': 2.0}
    """
    return FrozenMap(_native.opt_lr_mult(_opt("optimizer.lr_mult", opt)._h))


def wd_mult(opt: Optimizer) -> FrozenMap:
    """The effective weight-decay multipliers by name: 0 for named parameters not ending in
    ``_weight`` / ``_gamma``, then the symbol's ``__wd_mult__`` and ``wd_mult`` option, then the
    last ``set_wd_mult``.

    Example:
        >>> wd_mult(sgd(param_idx2name={0: "fc_weight", 1: "fc_bias"}))
        {'fc_bias': 0.0}
    """
    return FrozenMap(_native.opt_wd_mult(_opt("optimizer.wd_mult", opt)._h))


def idx2name(opt: Optimizer) -> FrozenMap:
    """Parameter names by index.

    Example:
        >>> idx2name(sgd(param_idx2name={0: "w"}))
        {0: 'w'}
    """
    return FrozenMap(_native.opt_idx2name(_opt("optimizer.idx2name", opt)._h))


# ---------------------------------------------------------------------------- acting

def set_learning_rate(opt: Optimizer, lr: float) -> Optimizer:
    """Sets the fixed learning rate; refused (MXFNError) when a scheduler decides, as in MXNet.

    Returns:
        ``opt``.

    Example:
        >>> learning_rate(set_learning_rate(sgd(), 0.5))
        0.5
    """
    fname = "optimizer.set_learning_rate"
    o = _opt(fname, opt)
    if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
        raise TypeError(f"{fname}: lr must be a number, got {type(lr).__name__}")
    _native.opt_set_learning_rate(o._h, float(lr))
    return o


def set_rescale_grad(opt: Optimizer, rescale_grad: float) -> Optimizer:
    """Sets the gradient scale (``module.init_optimizer`` sets 1/batch_size).

    Returns:
        ``opt``.

    Example:
        >>> options(set_rescale_grad(sgd(), 0.25))["rescale_grad"]
        0.25
    """
    fname = "optimizer.set_rescale_grad"
    o = _opt(fname, opt)
    if isinstance(rescale_grad, bool) or not isinstance(rescale_grad, numbers.Real):
        raise TypeError(f"{fname}: rescale_grad must be a number, got {type(rescale_grad).__name__}")
    _native.opt_set_rescale_grad(o._h, float(rescale_grad))
    return o


def set_lr_mult(opt: Optimizer, mults: Mapping[str, float]) -> Optimizer:
    """Sets learning-rate multipliers by parameter name. As in MXNet the map is rebuilt from
    the defaults (the symbol's ``__lr_mult__``, the ``lr_mult`` option) plus ``mults``; an
    earlier call's entries are dropped.

    Returns:
        ``opt``.

    Example:
        >>> lr_mult(set_lr_mult(sgd(), {"fc_bias": 2.0}))
        {'fc_bias': 2.0}
    """
    fname = "optimizer.set_lr_mult"
    o = _opt(fname, opt)
    _native.opt_set_lr_mult(o._h, _name_map(fname, "mults", mults, float))
    return o


def set_wd_mult(opt: Optimizer, mults: Mapping[str, float]) -> Optimizer:
    """Sets weight-decay multipliers by parameter name, rebuilt like ``set_lr_mult`` from the
    defaults (0 for named non-weights, the symbol's ``__wd_mult__``, the ``wd_mult`` option).

    Returns:
        ``opt``.

    Example:
        >>> wd_mult(set_wd_mult(sgd(), {"fc_weight": 0.5}))
        {'fc_weight': 0.5}
    """
    fname = "optimizer.set_wd_mult"
    o = _opt(fname, opt)
    _native.opt_set_wd_mult(o._h, _name_map(fname, "mults", mults, float))
    return o


def set_idx2name(opt: Optimizer, mapping: Mapping[int, str]) -> Optimizer:
    """Replaces the index -> name map and recomputes the weight-decay defaults from it (the
    module does this at ``init_optimizer``; SPEC §8).

    Returns:
        ``opt``.

    Example:
        >>> wd_mult(set_idx2name(sgd(), {0: "fc_bias"}))
        {'fc_bias': 0.0}
    """
    fname = "optimizer.set_idx2name"
    o = _opt(fname, opt)
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{fname}: expected a mapping index -> name, got {type(mapping).__name__}")
    _native.opt_set_idx2name(o._h, _name_map(fname, "mapping", mapping, str))
    return o


# MXNet's class names, for code written against mx.optimizer.
SGD, NAG, Signum, DCASGD, SGLD = sgd, nag, signum, dcasgd, sgld
Adam, Adamax, Nadam = adam, adamax, nadam
AdaGrad, RMSProp, AdaDelta, Ftrl = adagrad, rmsprop, adadelta, ftrl
