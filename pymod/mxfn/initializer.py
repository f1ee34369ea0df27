"""mx.initializer (also mx.init): initializers as immutable values, applied by name rules.

An initializer is a value (``xavier(magnitude=2)``, ``constant(0.5)``); ``apply(init, name,
arr)`` returns a NEW array shaped like ``arr``, filled by MXNet's name rules: names ending in
``weight`` get the initializer's own rule; ``bias``, ``beta``, ``min``, ``moving_mean``,
``running_mean``, ``moving_inv_var``, ``moving_avg`` get 0; ``gamma``, ``max``,
``moving_var``, ``running_var`` get 1; a variable's ``__init__`` attribute (from
``sym.variable(..., init=...)``) wins; any other name raises MXFNError naming it. Random
draws come from the global stream, so ``mx.random.seed(n)`` makes them reproducible.
``dumps()`` gives MXNet's JSON spec (the ``__init__`` attribute's text).

    >>> import numpy as np
    >>> w = apply(xavier(), "fc1_weight", np.zeros((4, 3)))
    >>> w.shape, bool(abs(w.asnumpy()).max() <= (3 / 3.5) ** 0.5)
    ((4, 3), True)
    >>> apply(xavier(), "fc1_bias", np.ones(2)).asnumpy()
    array([0., 0.])
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from . import _native
from ._errors import MXFNError
from ._maps import FrozenMap
from ._opts import REQUIRED, documented, normalize_key, opt, parse_opts
from .ndarray import NDArray, array, as_ndarray, dtype_name, load as nd_load

if TYPE_CHECKING:
    from ._opts import OptSpec
    from ._types import ArrayLike, InitializerLike

__all__ = [
    "Initializer", "Mixed", "Load", "uniform", "normal", "xavier", "msra_prelu", "constant",
    "zero", "one", "orthogonal", "bilinear", "lstm_bias", "fused_rnn", "mixed", "load", "apply",
    "create", "dumps",
]

_UNSET: Any = object()  # "not given" (typed Any: it stands in for any argument type)

UNIFORM_OPTS = {"scale": opt(0.07, float, "values are drawn uniformly from [-scale, scale)")}
NORMAL_OPTS = {"sigma": opt(0.01, float, "standard deviation of the normal draws (mean 0)")}
XAVIER_OPTS = {
    "rnd_type": opt("uniform", str, '"uniform" (on [-s, s)) or "gaussian" (std s)',
                    aliases=("rand_type",)),
    "factor_type": opt("avg", str, '"avg", "in" or "out": the fan dividing the magnitude'),
    "magnitude": opt(3, float, "s = sqrt(magnitude / factor)"),
}
MSRA_PRELU_OPTS = {
    "factor_type": opt("avg", str, '"avg", "in" or "out" (as xavier)'),
    "slope": opt(0.25, float, "PReLU slope: magnitude = 2 / (1 + slope²)"),
}
CONSTANT_OPTS = {"value": opt(REQUIRED, float, "the value of every weight element")}
ORTHOGONAL_OPTS = {
    "scale": opt(1.414, float, "the orthogonal matrix is multiplied by this"),
    "rand_type": opt("uniform", str, '"uniform" or "normal": the draws before orthogonalising'),
}
LSTM_BIAS_OPTS = {"forget_bias": opt(1.0, float, "value of the forget gate's block (the "
                                     "second quarter); the rest is 0")}
FUSED_RNN_OPTS = {
    "init": opt(None, None, "initializer of each layer's per-gate weights and biases (a value, name or "
                "JSON spec); None = the initializer given to init_params, by the pieces' names"),
    "num_hidden": opt(REQUIRED, int, "the cell's hidden size"),
    "num_layers": opt(REQUIRED, int, "the cell's number of layers"),
    "mode": opt(REQUIRED, str, '"lstm", "gru", "rnn_relu" or "rnn_tanh"'),
    "bidirectional": opt(False, bool, "the cell runs both directions"),
    "forget_bias": opt(1.0, float, "lstm: value of every forget-gate bias (i2h and h2h alike, as MXNet)"),
}


class Initializer:
    """A registered MXNet initializer as an immutable value: its MXNet name and keyword
    arguments. Made by ``uniform()``, ``xavier()``…; ``dumps()`` gives MXNet's JSON.

    Example:
        >>> normal(0.5)
        normal(sigma=0.5)
        >>> normal(0.5).dumps()
        '["normal", {"sigma": 0.5}]'
    """

    __slots__ = ("_kind", "_kwargs")
    _kind: str
    _kwargs: FrozenMap

    def __init__(self, kind: str, kwargs: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_kwargs", FrozenMap(kwargs))

    @property
    def kind(self) -> str:
        """MXNet's (lower-case class) name: ``"xavier"``, ``"msraprelu"``…"""
        return self._kind

    @property
    def kwargs(self) -> FrozenMap:
        """MXNet's keyword arguments (read-only)."""
        return self._kwargs

    def dumps(self) -> str:
        """MXNet's JSON spec, ``'["xavier", {"rnd_type": "uniform", ...}]'``."""
        return json.dumps([self._kind, dict(self._kwargs)])

    def __repr__(self) -> str:
        return f"{self._kind}({', '.join(f'{k}={v!r}' for k, v in self._kwargs.items())})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Initializer) and self.dumps() == other.dumps()

    def __hash__(self) -> int:
        return hash(self.dumps())

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise TypeError(f"'Initializer' object is read-only; cannot set attribute {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Initializer, (self._kind, dict(self._kwargs)))


class Mixed:
    """The first initializer whose pattern matches the name (``re.match``, anchored at the
    start) applies. Made by ``mixed``; immutable.

    Example:
        >>> mixed([".*"], [zero()])
        mixed(['.*'], [zero()])
    """

    __slots__ = ("_rules",)
    _rules: tuple[tuple[re.Pattern[str], Initializer | Mixed | Load], ...]

    def __init__(self, rules: Iterable[tuple[re.Pattern[str], Initializer | Mixed | Load]]) -> None:
        object.__setattr__(self, "_rules", tuple(rules))

    @property
    def patterns(self) -> tuple[str, ...]:
        """The patterns, in order."""
        return tuple(p.pattern for p, _ in self._rules)

    @property
    def initializers(self) -> tuple[Initializer | Mixed | Load, ...]:
        """The initializers, in pattern order."""
        return tuple(i for _, i in self._rules)

    def dumps(self) -> NoReturn:
        """Always raises: MXNet's Mixed has no JSON form (give each variable its own init)."""
        raise MXFNError("initializer.dumps: a mixed initializer has no JSON form (neither has "
                        "MXNet's Mixed); give each variable its own initializer")

    def __repr__(self) -> str:
        return f"mixed({list(self.patterns)!r}, {list(self.initializers)!r})"

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise TypeError(f"'Mixed' object is read-only; cannot set attribute {name!r}")


class Load:
    """Values loaded by name (``arg:``/``aux:`` prefixes stripped), other names through
    ``default_init``. Made by ``load``; immutable.

    Example:
        >>> sorted(load({"arg:w": np.ones(2)}).params)
        ['w']
    """

    __slots__ = ("_params", "_default")
    _params: FrozenMap
    _default: Initializer | Mixed | Load | None

    def __init__(self, params: Mapping[str, NDArray], default: Initializer | Mixed | Load | None) -> None:
        object.__setattr__(self, "_params", FrozenMap(params))
        object.__setattr__(self, "_default", default)

    @property
    def params(self) -> FrozenMap:
        """The loaded arrays by parameter name."""
        return self._params

    @property
    def default_init(self) -> Initializer | Mixed | Load | None:
        """The initializer for names not loaded (None: they are an error)."""
        return self._default

    def dumps(self) -> NoReturn:
        """Always raises: loaded arrays have no JSON form."""
        raise MXFNError("initializer.dumps: a load initializer has no JSON form (neither has "
                        "MXNet's Load)")

    def __repr__(self) -> str:
        return f"load({sorted(self._params)!r}, default_init={self._default!r})"

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise TypeError(f"'Load' object is read-only; cannot set attribute {name!r}")


def _json_value(v: Any) -> Any:
    if isinstance(v, bool) or isinstance(v, str):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    return v


def _make(kind: str, fname: str, spec: Mapping[str, OptSpec], opts: Mapping[str, Any] | None,
          kw: Mapping[str, Any], key: Any = None, value: Any = _UNSET) -> Initializer:
    """Parse options (``value`` given positionally for option ``key``), check them in the core."""
    if value is not _UNSET:
        if isinstance(value, Mapping):
            if opts is not None:
                raise TypeError(f"{fname}: options given twice (as the first argument and as opts)")
            opts = value
        else:
            given = [k for src in (opts or {}, kw) for k in src if normalize_key(k) == key]
            if given:
                raise MXFNError(f'{fname}: option "{key}" given twice, positionally and as '
                                f'"{given[0]}"')
            opts = {**(opts or {}), key: value}
    o = parse_opts(fname, spec, opts, kw)
    init = Initializer(kind, {k: _json_value(v) for k, v in o.items()})
    _native.init_check(init.dumps())
    return init


def uniform(scale: float | Mapping[str, Any] = _UNSET, opts: Mapping[str, Any] | None = None, /,
            **kw: Any) -> Initializer:
    """Uniform on [−scale, scale) for weights (MXNet's ``Uniform``).

    Options:
        scale (float, default 0.07): values are drawn uniformly from [-scale, scale); also
            accepted positionally

    Returns:
        An Initializer.

    Example:
        >>> uniform(0.1).dumps()
        '["uniform", {"scale": 0.1}]'
    """
    return _make("uniform", "initializer.uniform", UNIFORM_OPTS, opts, kw, "scale", scale)


def normal(sigma: float | Mapping[str, Any] = _UNSET, opts: Mapping[str, Any] | None = None, /,
           **kw: Any) -> Initializer:
    """Normal(0, sigma) for weights (MXNet's ``Normal``).

    Options:
        sigma (float, default 0.01): standard deviation of the normal draws (mean 0); also
            accepted positionally

    Returns:
        An Initializer.

    Example:
        >>> normal().dumps()
        '["normal", {"sigma": 0.01}]'
    """
    return _make("normal", "initializer.normal", NORMAL_OPTS, opts, kw, "sigma", sigma)


def xavier(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Initializer:
    """Xavier/Glorot for weights: for shape (d0, d1, d2, …), hw = d2·d3·…, fan_in = d1·hw,
    fan_out = d0·hw, s = sqrt(magnitude / factor); uniform on [−s, s) or normal with std s.
    A weight with fewer than 2 dimensions raises.

    Options:
        rnd_type (str, default "uniform"): "uniform" (on [-s, s)) or "gaussian" (std s); also
            accepted as "rand_type"
        factor_type (str, default "avg"): "avg" ((fan_in + fan_out) / 2), "in" or "out"
        magnitude (float, default 3): s = sqrt(magnitude / factor)

    Returns:
        An Initializer.

    Example:
        >>> xavier(rand_type="gaussian", magnitude=2).dumps()
        '["xavier", {"rnd_type": "gaussian", "factor_type": "avg", "magnitude": 2}]'
    """
    return _make("xavier", "initializer.xavier", XAVIER_OPTS, opts, kw)


def msra_prelu(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Initializer:
    """He/MSRA initialisation for PReLU nets: xavier("gaussian", factor_type, magnitude =
    2 / (1 + slope²)) (MXNet's ``MSRAPrelu``; note the default factor_type is "avg").

    Options:
        factor_type (str, default "avg"): "avg", "in" or "out" (as xavier)
        slope (float, default 0.25): PReLU slope: magnitude = 2 / (1 + slope²)

    Returns:
        An Initializer.

    Example:
        >>> msra_prelu(factor_type="in").dumps()
        '["msraprelu", {"factor_type": "in", "slope": 0.25}]'
    """
    return _make("msraprelu", "initializer.msra_prelu", MSRA_PRELU_OPTS, opts, kw)


def constant(value: float | Mapping[str, Any] = _UNSET, opts: Mapping[str, Any] | None = None, /,
             **kw: Any) -> Initializer:
    """Every weight element ``value`` (biases still 0 and gammas 1 by the name rules).

    Options:
        value (float, required): the value of every weight element; also accepted
            positionally

    Returns:
        An Initializer.

    Example:
        >>> apply(constant(0.5), "w_weight", np.zeros(2)).asnumpy()
        array([0.5, 0.5])
    """
    return _make("constant", "initializer.constant", CONSTANT_OPTS, opts, kw, "value", value)


def zero() -> Initializer:
    """Weights 0 (MXNet's ``Zero``, alias "zeros").

    Example:
        >>> zero().dumps()
        '["zero", {}]'
    """
    return Initializer("zero", {})


def one() -> Initializer:
    """Weights 1 (MXNet's ``One``, alias "ones"); biases still 0 by the name rules.

    Example:
        >>> apply(one(), "fc_bias", np.ones(2)).asnumpy()
        array([0., 0.])
    """
    return Initializer("one", {})


def orthogonal(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Initializer:
    """A random orthogonal weight times ``scale``: reshaped to (d0, d1·d2·…), its rows (if
    d0 ≤ the rest) or columns are orthonormal. mxfn orthogonalises the draws with a
    sign-corrected QR (MXNet uses numpy's SVD): the same kind of matrix, faster.

    Options:
        scale (float, default 1.414): the orthogonal matrix is multiplied by this
        rand_type (str, default "uniform"): "uniform" or "normal": the draws before
            orthogonalising

    Returns:
        An Initializer.

    Example:
        >>> w = apply(orthogonal(scale=1.0), "q_weight", np.zeros((3, 5))).asnumpy()
        >>> bool(np.allclose(w @ w.T, np.eye(3), atol=1e-6))
        True
    """
    return _make("orthogonal", "initializer.orthogonal", ORTHOGONAL_OPTS, opts, kw)


def bilinear() -> Initializer:
    """Bilinear upsampling kernels for 4-D (deconvolution) weights (MXNet's ``Bilinear``).

    Example:
        >>> apply(bilinear(), "up_weight", np.zeros((1, 1, 4, 4))).asnumpy()[0, 0, 1]
        array([0.1875, 0.5625, 0.5625, 0.1875])
    """
    return Initializer("bilinear", {})


def lstm_bias(forget_bias: float | Mapping[str, Any] = _UNSET,
              opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Initializer:
    """LSTM bias: 0 except the forget gate's block (the second quarter along axis 0),
    ``forget_bias``. Its rule applies to names ending in ``weight`` or through a variable's
    ``__init__`` (a ``…bias`` name otherwise gets 0 by the name rules, as in MXNet).

    Options:
        forget_bias (float, default 1.0): value of the forget gate's block (the second
            quarter); the rest is 0; also accepted positionally

    Returns:
        An Initializer.

    Example:
        >>> apply(lstm_bias(), "b", np.zeros(8), {"__init__": lstm_bias().dumps()}).asnumpy()
        array([0., 0., 1., 1., 0., 0., 0., 0.])
    """
    return _make("lstmbias", "initializer.lstm_bias", LSTM_BIAS_OPTS, opts, kw,
                 "forget_bias", forget_bias)


@documented(FUSED_RNN_OPTS)
def fused_rnn(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Initializer:
    """The flat parameter vector of a fused RNN cell (MXNet's ``FusedRNN``; ``fused_rnn_cell``
    puts it on its ``parameters`` variable as ``__init__``).

    The vector is cut into each layer's and direction's per-gate weights and biases
    (``rnn.unpack_weights``, pieces named like ``l0_i2h_f_weight``), each piece is initialised
    on its own — by ``init``, or when it is None by the initializer given to ``init_params``,
    through the name rules (weights drawn, biases 0) — the lstm forget-gate biases are set to
    ``forget_bias``, and the pieces are packed again. The core has no such initializer: it runs
    here, in Python, when ``apply`` meets it.

    %OPTIONS%

    Returns:
        An Initializer (kind ``"fusedrnn"``).

    Example:
        >>> f = fused_rnn(num_hidden=2, num_layers=1, mode="lstm")
        >>> b = apply(xavier(), "lstm_parameters", np.zeros(4 * 2 * (3 + 2) + 2 * 4 * 2),
        ...           {"__init__": f.dumps()}).asnumpy()
        >>> b[-16:].tolist()  # the biases: i2h then h2h, gates i f c o
        [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    """
    fname = "initializer.fused_rnn"
    o = parse_opts(fname, FUSED_RNN_OPTS, opts, kw)
    inner = o["init"]
    if inner is not None:
        # MXNet keeps the inner initializer as its JSON text.
        inner = create(inner).dumps()
    from .rnn.cells import MODES  # the cells import this module
    if o["mode"] not in MODES:
        raise MXFNError(f'{fname}: option "mode" expects one of {", ".join(map(repr, MODES))}, got {o["mode"]!r}')
    for key in ("num_hidden", "num_layers"):
        if o[key] < 1:
            raise MXFNError(f'{fname}: option "{key}" expects a positive int, got {o[key]!r}')
    return Initializer("fusedrnn", {"init": inner, "num_hidden": o["num_hidden"], "num_layers": o["num_layers"],
                                    "mode": o["mode"], "bidirectional": o["bidirectional"],
                                    "forget_bias": float(o["forget_bias"])})


def is_fused_rnn(spec: Any) -> bool:
    """Whether ``spec`` (an initializer value or an ``__init__`` attribute's text) is a fused
    RNN initializer, which only the Python layer applies."""
    if isinstance(spec, Initializer):
        return spec.kind == "fusedrnn"
    if isinstance(spec, str) and spec.lstrip().startswith("["):
        try:
            parsed = json.loads(spec)
        except json.JSONDecodeError:
            return False
        return isinstance(parsed, list) and bool(parsed) and str(parsed[0]).lower() == "fusedrnn"
    return isinstance(spec, str) and spec.strip().lower() == "fusedrnn"


def _apply_fused(fused: Initializer, outer: Initializer | Mixed | Load | None, name: str, a: NDArray) -> NDArray:
    """``fused_rnn``'s rule: unpack, initialise each piece, pack (MXNet's FusedRNN._init_weight)."""
    from .rnn import fused_rnn_cell, pack_weights, unpack_weights  # the cells import this module
    k = fused.kwargs
    piece_init = outer if k["init"] is None else create(k["init"])
    if piece_init is None:
        raise MXFNError(f'initializer.apply: parameter "{name}": its fused RNN initializer has no inner '
                        'init and no initializer was given to apply to its pieces')
    cell = fused_rnn_cell(k["num_hidden"], num_layers=k["num_layers"], mode=k["mode"],
                          bidirectional=k["bidirectional"], forget_bias=k["forget_bias"], prefix="")
    try:
        pieces = unpack_weights(cell, {"parameters": a})
    except MXFNError as e:
        raise MXFNError(f'initializer.apply: parameter "{name}" does not fit its fused RNN initializer '
                        f'{fused!r}: {e}') from None
    filled = {}
    for n, p in pieces.items():
        if k["mode"] == "lstm" and n.endswith("_f_bias"):
            filled[n] = np.full(p.shape, k["forget_bias"], dtype=a.dtype)
        else:
            filled[n] = apply(piece_init, n, p).asnumpy()
    return array(pack_weights(cell, filled)["parameters"], dtype=a.dtype.name, ctx=a.context)


def mixed(patterns: Iterable[str], initializers: Iterable[InitializerLike]) -> Mixed:
    """The first initializer whose pattern matches the parameter name applies; patterns are
    regular expressions matched with Python's ``re.match`` (anchored at the start: ``"bias"``
    does not match ``"fc_bias"``; use ``".*bias"``). The chosen initializer then applies its
    own name rules. A name matching no pattern raises MXFNError; end with ``".*"`` for a
    default.

    Returns:
        A Mixed initializer.

    Example:
        >>> init = mixed(["fc1_", ".*"], [constant(2.0), zero()])
        >>> apply(init, "fc1_weight", np.zeros(2)).asnumpy(), apply(init, "fc2_weight", np.ones(2)).asnumpy()
        (array([2., 2.]), array([0., 0.]))
    """
    fname = "initializer.mixed"
    patterns, initializers = list(patterns), list(initializers)
    if len(patterns) != len(initializers):
        raise MXFNError(f"{fname}: patterns and initializers must have the same length, got "
                        f"{len(patterns)} and {len(initializers)}")
    rules = []
    for p, init in zip(patterns, initializers):
        try:
            rules.append((re.compile(p), create(init)))
        except re.error as e:
            raise MXFNError(f"{fname}: pattern {p!r} is not a valid regular expression: {e}") from None
    return Mixed(rules)


def load(params: Mapping[str, ArrayLike] | str,
         default_init: InitializerLike | None = None) -> Load:
    """Initialise from saved values: ``params`` maps names to arrays (NDArray or numpy), or is
    a file name of ``nd.save``'s format; a leading ``arg:`` / ``aux:`` of a key is dropped.
    Other names go to ``default_init`` (None makes them an error); a loaded value of another
    shape raises MXFNError naming the parameter.

    Returns:
        A Load initializer.

    Example:
        >>> init = load({"arg:fc_weight": np.full((2,), 7.0)}, default_init=zero())
        >>> apply(init, "fc_weight", np.zeros(2)).asnumpy(), apply(init, "fc2_weight", np.ones(1)).asnumpy()
        (array([7., 7.]), array([0.]))
    """
    fname = "initializer.load"
    src: Any = nd_load(params) if isinstance(params, str) else params
    if not isinstance(src, Mapping):
        raise TypeError(f"{fname}: params must be a dict name -> array or a file name, got "
                        f"{type(src).__name__}")
    table: dict[str, NDArray] = {}
    for k, v in src.items():
        key = k[4:] if k.startswith(("arg:", "aux:")) else k
        table[key] = as_ndarray(v, fname)
    return Load(table, None if default_init is None else create(default_init))


def create(spec: InitializerLike, opts: Mapping[str, Any] | None = None, /,
           **kw: Any) -> Initializer | Mixed | Load:
    """An initializer from a value (returned as is), a name (``"xavier"``, ``"zeros"``,
    ``"msraprelu"``…, with options as for its function) or MXNet's JSON spec
    (``'["xavier", {"magnitude": 2}]'``).

    Returns:
        The initializer.

    Example:
        >>> create('["xavier", {"magnitude": 2}]')
        xavier(rnd_type='uniform', factor_type='avg', magnitude=2)
        >>> create("ones")
        one()
    """
    if isinstance(spec, (Initializer, Mixed, Load)):
        if opts or kw:
            raise MXFNError(f"initializer.create: {spec!r} is already an initializer; options "
                            f"cannot be applied to it")
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"initializer.create: expected an initializer, a name or a JSON spec, "
                        f"got {type(spec).__name__}")
    text = spec.strip()
    if text.startswith("["):
        if opts or kw:
            raise MXFNError("initializer.create: a JSON spec carries its own arguments; "
                            "options cannot be added")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as e:
            raise MXFNError(f"initializer.create: spec {spec!r} is not valid JSON: {e}") from None
        if not (isinstance(parsed, list) and 1 <= len(parsed) <= 2 and isinstance(parsed[0], str)):
            raise MXFNError(f'initializer.create: expected a spec like \'["xavier", '
                            f'{{"magnitude": 2}}]\', got {spec!r}')
        text, opts = parsed[0], (parsed[1] if len(parsed) == 2 else None)
    maker = _MAKERS.get(text.lower())
    if maker is None:
        # The core raises for an unknown name, suggesting the closest registered names.
        _native.init_check(json.dumps([text, {}]))
        raise MXFNError(f"initializer.create: unknown initializer {text!r}")
    return maker(**kw) if opts is None else maker(opts, **kw)


def _no_args(make: Callable[[], Initializer], fname: str) -> Callable[..., Initializer]:
    def f(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> Initializer:
        parse_opts(fname, {}, opts, kw)
        return make()
    return f


# MXNet's registry names and aliases (and the mxfn function names), lower case.
_MAKERS: dict[str, Callable[..., Initializer]] = {
    "uniform": uniform, "normal": normal, "xavier": xavier,
    "msraprelu": msra_prelu, "msra_prelu": msra_prelu,
    "constant": lambda opts=None, /, **kw: constant(_UNSET, opts, **kw),
    "orthogonal": orthogonal, "lstmbias": lstm_bias, "lstm_bias": lstm_bias,
    "zero": _no_args(zero, "initializer.zero"), "zeros": _no_args(zero, "initializer.zero"),
    "one": _no_args(one, "initializer.one"), "ones": _no_args(one, "initializer.one"),
    "bilinear": _no_args(bilinear, "initializer.bilinear"),
    "fusedrnn": fused_rnn, "fused_rnn": fused_rnn,
}


def dumps(init: InitializerLike) -> str:
    """MXNet's JSON spec of ``init`` (what ``sym.variable(..., init=init)`` stores as
    ``__init__``).

    Example:
        >>> dumps(constant(0.25))
        '["constant", {"value": 0.25}]'
    """
    return create(init).dumps()


def apply(init: InitializerLike, name: str, arr: ArrayLike,
          attrs: Mapping[str, Any] | None = None) -> NDArray:
    """A NEW array shaped like ``arr`` (same dtype and context) initialised for parameter
    ``name`` by the name rules (see the module doc); ``arr`` is not changed. ``attrs`` are the
    variable's attributes: a non-empty ``__init__`` (JSON like ``'["zero", {}]'``, a name like
    ``"ones"``, or an initializer value) is applied through that initializer's weight rule
    whatever the name. ``init`` may also be a name or JSON spec (see ``create``); ``arr`` may
    be an NDArray or a numpy array (whose dtype is kept).

    Returns:
        A new NDArray.

    Example:
        >>> apply(uniform(), "bn_gamma", np.zeros(3)).asnumpy()
        array([1., 1., 1.])
        >>> apply(uniform(), "data", np.zeros(3))
        Traceback (most recent call last):
        ...
        mxfn._errors.MXFNError: initializer: parameter "data": expected a name ending in weight, bias, gamma, beta, min, max, moving_mean, moving_var, running_mean, running_var, moving_inv_var or moving_avg, or an __init__ attribute (a variable made with init=...), got "data"
    """
    fname = "initializer.apply"
    if not isinstance(name, str):
        raise TypeError(f"{fname}: name must be a string, got {type(name).__name__}")
    init = create(init)
    if isinstance(arr, np.ndarray):
        # A numpy array gives its dtype too (nd.array alone would make it float32).
        a = array(arr, dtype=dtype_name(arr.dtype, fname))
    else:
        a = as_ndarray(arr, fname)
    if isinstance(init, Mixed):
        for pattern, child in init._rules:
            if pattern.match(name):
                return apply(child, name, a, attrs)
        raise MXFNError(f'{fname}: parameter "{name}" matches none of the mixed patterns '
                        f'{list(init.patterns)}; add ".*" last for a default')
    if isinstance(init, Load):
        value = init.params.get(name)
        if value is None:
            if init.default_init is None:
                raise MXFNError(f'{fname}: parameter "{name}" is not among the loaded '
                                f'parameters and the load initializer has no default_init')
            return apply(init.default_init, name, a, attrs)
        if value.shape != a.shape:
            raise MXFNError(f'{fname}: parameter "{name}": loaded shape {value.shape} does not '
                            f'match the expected shape {a.shape}')
        return array(value, dtype=a.dtype.name, ctx=a.context)
    own = None if attrs is None or not isinstance(attrs, Mapping) else attrs.get("__init__")
    if own is not None and is_fused_rnn(own):
        fused = create(own)
        if isinstance(fused, Initializer):
            return _apply_fused(fused, init, name, a)
    if isinstance(init, Initializer) and is_fused_rnn(init):
        return _apply_fused(init, None, name, a)
    text_attrs = None
    if attrs is not None:
        if not isinstance(attrs, Mapping):
            raise TypeError(f"{fname}: attrs must be a mapping of attribute names to values, "
                            f"got {type(attrs).__name__}")
        text_attrs = {str(k): (v.dumps() if isinstance(v, (Initializer, Mixed, Load)) else str(v))
                      for k, v in attrs.items()}
    return NDArray(_native.init_apply(init.dumps(), name, a._h, text_attrs))
