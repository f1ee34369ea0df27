"""mx.eval_metric (also mx.metric): evaluation metrics as mutable accumulators.

A metric is made once (``accuracy()``, ``create("ce")``, ``comp_metric(["acc", "ce"])``),
fed batches with ``update(metric, labels, preds)`` and read with ``get(metric)``. Every
metric keeps local sums (what ``get`` reports; ``reset_local`` clears them) and global sums
(what ``get_global`` reports; only ``reset`` clears them). Values follow MXNet 1.9.1 exactly,
including which metrics average per batch (MAE, MSE, RMSE, macro F1/MCC/Pearson: each
``update`` pair or call counts once). Built-in metrics accumulate in the Rust core; custom
metrics are Python functions. Functions that act (``update``, ``reset``…) return the metric.

    >>> import numpy as np
    >>> m = create(["acc", "ce"])
    >>> m = update(m, [np.array([0, 1])], [np.array([[0.8, 0.2], [0.6, 0.4]])])
    >>> get_name_value(m)
    [('accuracy', 0.5), ('cross-entropy', 0.5697171092033386)]
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from . import _native
from ._errors import MXFNError
from ._opts import REQUIRED, normalize_key, opt, parse_opts
from .ndarray import NDArray, _handle

if TYPE_CHECKING:
    from ._opts import OptSpec
    from ._types import ArrayLike, MetricLike

__all__ = [
    "EvalMetric", "CustomMetric", "CompositeMetric",
    "accuracy", "top_k_accuracy", "f1", "mcc", "perplexity", "mae", "mse", "rmse",
    "cross_entropy", "nll_loss", "pearson_correlation", "pcc", "loss", "custom_metric",
    "comp_metric", "create", "add", "update", "update_dict", "get", "get_global", "reset",
    "reset_local", "get_and_reset", "get_name_value", "get_global_name_value", "name",
]

_UNSET: Any = object()  # "not given" (typed Any: it stands in for any argument type)

_COMMON = {
    "name": opt(None, str, "display name; default the metric's own (e.g. \"accuracy\")"),
    "output_names": opt(None, (list, tuple), "the predictions update_dict passes, by name; "
                        "default all, in order"),
    "label_names": opt(None, (list, tuple), "the labels update_dict passes, by name; "
                       "default all, in order"),
}

ACCURACY_OPTS = {"axis": opt(1, int, "axis of the class scores to argmax over when the "
                             "predictions' shape differs from the labels'"), **_COMMON}
TOP_K_ACCURACY_OPTS = {"top_k": opt(REQUIRED, int, "how many of the highest scores count as "
                                    "a hit (> 1)", aliases=("k",)), **_COMMON}
_AVERAGE = opt("macro", str, '"macro": mean of one value per update call; '
               '"micro": one value from all samples pooled')
F1_OPTS = {"average": _AVERAGE, **_COMMON}
MCC_OPTS = {"average": _AVERAGE, **_COMMON}
PERPLEXITY_OPTS = {
    "ignore_label": opt(None, (int, float), "label value whose positions are left out; None "
                        "keeps all"),
    "axis": opt(-1, int, "axis of the predictions holding the class probabilities"),
    **_COMMON,
}
CROSS_ENTROPY_OPTS = {"eps": opt(1e-12, float, "added to each probability before the log"),
                      **_COMMON}
NLL_LOSS_OPTS = CROSS_ENTROPY_OPTS
PEARSON_CORRELATION_OPTS = {"average": _AVERAGE, **_COMMON}
PLAIN_OPTS = dict(_COMMON)
CUSTOM_METRIC_OPTS = {
    "allow_extra_outputs": opt(False, bool, "allow more predictions than labels (the extra "
                               "ones are ignored)"),
    "output_names": _COMMON["output_names"],
    "label_names": _COMMON["label_names"],
}
COMP_METRIC_OPTS = {**_COMMON, "name": opt("composite", str, "display name of the composite")}


class _Metric:
    """What every metric shares: its display name and the names ``update_dict`` selects."""

    __slots__ = ("_name", "_output_names", "_label_names")

    def __init__(self, name: str, o: Mapping[str, Any]) -> None:
        self._name = name
        self._output_names = None if o.get("output_names") is None else list(o["output_names"])
        self._label_names = None if o.get("label_names") is None else list(o["label_names"])

    @property
    def name(self) -> str:
        """The display name (``accuracy``, ``top_k_accuracy_3``, ``composite``…)."""
        return self._name

    @property
    def output_names(self) -> list[str] | None:
        """The prediction names ``update_dict`` uses (None = all)."""
        return self._output_names

    @property
    def label_names(self) -> list[str] | None:
        """The label names ``update_dict`` uses (None = all)."""
        return self._label_names

    def __repr__(self) -> str:
        pairs = ", ".join(f"{n}={v!r}" for n, v in self._read(False))
        return f"<{type(self).__name__} {pairs}>"

    # Subclasses define _update(labels, preds), _reset(local_only), _read(global_) -> pairs.
    if TYPE_CHECKING:
        def _update(self, labels: list[Any], preds: list[Any]) -> None: ...
        def _reset(self, local_only: bool) -> None: ...
        def _read(self, global_: bool) -> list[tuple[str, float]]: ...


class EvalMetric(_Metric):
    """A built-in metric: its sums live in the Rust core. Made by ``accuracy()``, ``create``…

    Example:
        >>> m = mae()
        >>> m.name, get(m)
        ('mae', ('mae', nan))
    """

    __slots__ = ("_h", "_kind")

    def __init__(self, handle: _native.MetricHandle, kind: str, name: str, o: Mapping[str, Any]) -> None:
        super().__init__(name, o)
        self._h = handle
        self._kind = kind

    def _update(self, labels: list[Any], preds: list[Any]) -> None:
        _native.metric_update(self._h, [_handle(x) for x in labels], [_handle(x) for x in preds])

    def _reset(self, local_only: bool) -> None:
        _native.metric_reset(self._h, local_only)

    def _read(self, global_: bool) -> list[tuple[str, float]]:
        return _native.metric_get(self._h, global_)


class CustomMetric(_Metric):
    """A metric computed by a Python function ``f(label, pred)`` on numpy arrays, per pair.

    Example:
        >>> m = custom_metric(lambda l, p: float(abs(l - p).max()))
        >>> m.name
        'custom(<lambda>)'
    """

    __slots__ = ("_f", "_allow_extra", "_local", "_global")

    def __init__(self, f: Callable[[Any, Any], Any], name: str, o: Mapping[str, Any]) -> None:
        super().__init__(name, o)
        self._f = f
        self._allow_extra = o["allow_extra_outputs"]
        self._local: list[Any] = [0.0, 0]
        self._global: list[Any] = [0.0, 0]

    def _update(self, labels: list[Any], preds: list[Any]) -> None:
        if not self._allow_extra and len(labels) != len(preds):
            raise MXFNError(f"{self._name}.update: labels: expected one label array per "
                            f"prediction array ({len(preds)}), got {len(labels)} label arrays")
        total: list[Any] = [0.0, 0]
        for label, pred in zip(labels, preds):
            r = self._f(_numpy(label), _numpy(pred))
            s, n = r if isinstance(r, tuple) and len(r) == 2 else (r, 1)
            if not isinstance(s, numbers.Real) or not isinstance(n, numbers.Real):
                raise TypeError(f"{self._name}.update: the metric function must return a number "
                                f"or a (sum, count) tuple of numbers, got {r!r}")
            total[0] += float(s)
            total[1] += n
        for acc in (self._local, self._global):
            acc[0] += total[0]
            acc[1] += total[1]

    def _reset(self, local_only: bool) -> None:
        self._local = [0.0, 0]
        if not local_only:
            self._global = [0.0, 0]

    def _read(self, global_: bool) -> list[tuple[str, float]]:
        s, n = self._global if global_ else self._local
        return [(self._name, s / n if n else math.nan)]


class CompositeMetric(_Metric):
    """Several metrics updated together; ``get`` gives their names and values as lists.

    Example:
        >>> m = comp_metric(["acc", "mse"])
        >>> [c.name for c in m.metrics]
        ['accuracy', 'mse']
    """

    __slots__ = ("_children",)

    def __init__(self, children: Iterable[_Metric], name: str, o: Mapping[str, Any]) -> None:
        super().__init__(name, o)
        self._children = list(children)

    @property
    def metrics(self) -> tuple[_Metric, ...]:
        """The child metrics, in order."""
        return tuple(self._children)

    def _update(self, labels: list[Any], preds: list[Any]) -> None:
        for c in self._children:
            c._update(labels, preds)

    def _reset(self, local_only: bool) -> None:
        for c in self._children:
            c._reset(local_only)

    def _read(self, global_: bool) -> list[tuple[str, float]]:
        return [pair for c in self._children for pair in c._read(global_)]


_M = TypeVar("_M", bound=_Metric)


def _numpy(x: ArrayLike) -> np.ndarray[Any, Any]:
    """A numpy copy of an update input, as MXNet's ``asnumpy`` gives custom functions."""
    return x.asnumpy() if isinstance(x, NDArray) else np.array(x)


def _json_value(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    return v


def _builtin(kind: str, fname: str, spec: Mapping[str, OptSpec], opts: Mapping[str, Any] | None,
             kw: Mapping[str, Any]) -> EvalMetric:
    o = parse_opts(fname, spec, opts, kw)
    params = {k: _json_value(v) for k, v in o.items()
              if k not in ("output_names", "label_names") and v is not None}
    h = _native.metric_create(kind, json.dumps(params))
    return EvalMetric(h, kind, _native.metric_get(h, False)[0][0], o)


def _merge_positional(fname: str, key: str, value: Any, opts: Mapping[str, Any] | None,
                      kw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Options with a positional value for ``key`` added; a Mapping in its place is the options."""
    if value is _UNSET:
        return opts
    if isinstance(value, Mapping):
        if opts is not None:
            raise TypeError(f"{fname}: options given twice (as the first argument and as opts)")
        return value
    given = [k for src in (opts or {}, kw) for k in src if normalize_key(k) == key]
    if given:
        raise MXFNError(f'{fname}: option "{key}" given twice, positionally and as "{given[0]}"')
    return {**(opts or {}), key: value}


def accuracy(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
    """Classification accuracy (name ``accuracy``): the share of samples whose predicted class
    (argmax over ``axis``, or the prediction itself when it has the label's shape, both
    truncated to int) equals the label.

    Options:
        axis (int, default 1): axis of the class scores to argmax over when the predictions'
            shape differs from the labels'
        name (str or None, default None): display name; default "accuracy"
        output_names (list or tuple or None, default None): the predictions ``update_dict``
            passes, by name; default all, in order
        label_names (list or tuple or None, default None): the labels ``update_dict`` passes,
            by name; default all, in order

    Returns:
        A new EvalMetric.

    Example:
        >>> m = update(accuracy(), np.array([0, 1, 1]), np.array([[.9, .1], [.3, .7], [.6, .4]]))
        >>> get(m)
        ('accuracy', 0.6666666666666666)
    """
    return _builtin("accuracy", "eval_metric.accuracy", ACCURACY_OPTS, opts, kw)


def top_k_accuracy(k: int | Mapping[str, Any] = _UNSET, opts: Mapping[str, Any] | None = None, /,
                   **kw: Any) -> EvalMetric:
    """Top-k accuracy (name ``top_k_accuracy_<k>``): a sample is right when its label is among
    the ``k`` highest scores of its prediction row; ``k`` is required and must exceed 1 (use
    ``accuracy`` for k = 1), as in MXNet.

    Options:
        top_k (int, required): how many of the highest scores count as a hit (> 1); also
            accepted positionally and as "k"
        name, output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
        >>> m = update(top_k_accuracy(2), np.array([2, 0]), np.array([[.1, .5, .4], [.2, .3, .5]]))
        >>> get(m)
        ('top_k_accuracy_2', 0.5)
    """
    fname = "eval_metric.top_k_accuracy"
    opts = _merge_positional(fname, "top_k", k, opts, kw)
    return _builtin("top_k_accuracy", fname, TOP_K_ACCURACY_OPTS, opts, kw)


def f1(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
    """Binary F1 score (name ``f1``) of class 1: predicted class = argmax over axis 1, labels
    0/1 (more than two label values raise).

    Options:
        average (str, default "macro"): "macro": the mean of each update call's F1; "micro":
            the F1 of the counts pooled over all calls
        name, output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
        >>> m = update(f1(), np.array([0, 1, 1]), np.array([[.3, .7], [0, 1], [.4, .6]]))
        >>> get(m)
        ('f1', 0.8)
    """
    return _builtin("f1", "eval_metric.f1", F1_OPTS, opts, kw)


def mcc(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
    """Binary Matthews correlation coefficient (name ``mcc``), from the same counts as ``f1``.

    Options:
        average (str, default "macro"): "macro": the mean of each update call's MCC; "micro":
            the MCC of the counts pooled over all calls
        name, output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
        >>> m = update(mcc(), np.array([0, 1, 1, 0]), np.array([[.7, .3], [0, 1], [.6, .4], [.9, .1]]))
        >>> round(get(m)[1], 6)
        0.57735
    """
    return _builtin("mcc", "eval_metric.mcc", MCC_OPTS, opts, kw)


def perplexity(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
    """Perplexity (name ``perplexity``): exp of the mean of −log p(label) over all positions,
    the probability picked along ``axis``; labels are flattened, so (batch, T) labels go with
    (batch·T, classes) predictions.

    Options:
        ignore_label (int or float or None, default None): label value whose positions are
            left out; None keeps all
        axis (int, default -1): axis of the predictions holding the class probabilities
        name, output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
        >>> m = update(perplexity(), np.array([0, 1]), np.array([[.5, .5], [.75, .25]]))
        >>> round(get(m)[1], 6)
        2.828427
    """
    return _builtin("perplexity", "eval_metric.perplexity", PERPLEXITY_OPTS, opts, kw)


def _plain(kind: str, summary: str, example: str) -> Callable[..., EvalMetric]:
    def make(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
        return _builtin(kind, f"eval_metric.{kind}", PLAIN_OPTS, opts, kw)

    make.__name__ = make.__qualname__ = kind
    make.__doc__ = f"""{summary}

    Options:
        name (str or None, default None): display name; default "{kind}"
        output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
{example}
    """
    return make


mae = _plain("mae", "Mean absolute error (name ``mae``): the mean over update pairs of each "
             "pair's mean |label − pred| (a 1-D array counts as a column).", """\
        >>> m = update(mae(), [np.array([1., 2.]), np.array([0.])], [np.array([1., 3.]), np.array([2.])])
        >>> get(m)
        ('mae', 1.25)""")
mse = _plain("mse", "Mean squared error (name ``mse``): the mean over update pairs of each "
             "pair's mean (label − pred)².", """\
        >>> get(update(mse(), np.array([1., 2.]), np.array([1., 4.])))
        ('mse', 2.0)""")
rmse = _plain("rmse", "Root mean squared error (name ``rmse``): the mean over update pairs of "
              "each pair's RMSE (MXNet's per-batch average, not the root of a global MSE).", """\
        >>> m = update(rmse(), np.array([0.]), np.array([2.]))
        >>> get(update(m, np.array([0., 0.]), np.array([0., 0.])))
        ('rmse', 1.0)""")
pcc = _plain("pcc", "Multi-class Matthews correlation (name ``pcc``) from the confusion matrix "
             "of predicted class (argmax over axis 1) against label, summed over all calls.", """\
        >>> get(update(pcc(), np.array([0, 1, 2]), np.array([[.9, 0, .1], [0, 1, 0], [.1, .2, .7]])))
        ('pcc', 1.0)""")
loss = _plain("loss", "The mean of the predictions (name ``loss``), for outputs that are "
              "losses already (``make_loss``); labels are ignored.", """\
        >>> get(update(loss(), [], np.array([1., 2., 6.])))
        ('loss', 3.0)""")


def cross_entropy(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
    """Cross-entropy (name ``cross-entropy``): the mean over samples of −log(p[label] + eps),
    with predictions (batch, classes) of probabilities.

    Options:
        eps (float, default 1e-12): added to each probability before the log
        name, output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
        >>> m = update(cross_entropy(), np.array([0, 1]), np.array([[.5, .5], [.75, .25]]))
        >>> round(get(m)[1], 6)
        1.039721
    """
    return _builtin("cross_entropy", "eval_metric.cross_entropy", CROSS_ENTROPY_OPTS, opts, kw)


def nll_loss(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
    """Negative log-likelihood (name ``nll-loss``): the same formula as ``cross_entropy``.

    Options:
        eps (float, default 1e-12): added to each probability before the log
        name, output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
        >>> get(nll_loss(name="nll"))
        ('nll', nan)
    """
    return _builtin("nll_loss", "eval_metric.nll_loss", NLL_LOSS_OPTS, opts, kw)


def pearson_correlation(opts: Mapping[str, Any] | None = None, /, **kw: Any) -> EvalMetric:
    """Pearson correlation (name ``pearsonr``) of flattened labels and predictions (which
    must have the same shape).

    ``get_global`` in micro mode gives the r of every sample since the last ``reset`` (MXNet
    1.9.1 gives 0.0 there), and ``reset_local`` clears the local moments (MXNet keeps them).

    Options:
        average (str, default "macro"): "macro": the mean of each pair's r; "micro": the r of
            all samples pooled
        name, output_names, label_names: as for ``accuracy``

    Returns:
        A new EvalMetric.

    Example:
        >>> get(update(pearson_correlation(), np.array([1., 2., 3.]), np.array([2., 4., 6.1])))[1] > 0.99
        True
    """
    return _builtin("pearson_correlation", "eval_metric.pearson_correlation",
                    PEARSON_CORRELATION_OPTS, opts, kw)


def custom_metric(f: Callable[[Any, Any], Any], name: str | Mapping[str, Any] | None = None,
                  opts: Mapping[str, Any] | None = None, /, **kw: Any) -> CustomMetric:
    """A metric from a Python function ``f(label, pred)`` called on numpy arrays for each
    (label, pred) pair: a number adds to the sum and 1 to the count; a tuple ``(sum, count)``
    adds both; the value is sum / count. The name defaults to ``f.__name__``
    (``custom(<lambda>)`` for a lambda, as MXNet).

    Options:
        allow_extra_outputs (bool, default False): allow more predictions than labels (the
            extra ones are ignored)
        output_names, label_names: as for ``accuracy``

    Returns:
        A new CustomMetric.

    Example:
        >>> def sq(label, pred):
        ...     return float(((label - pred) ** 2).sum()), label.size
        >>> get(update(custom_metric(sq), np.array([1., 2.]), np.array([1., 4.])))
        ('sq', 2.0)
    """
    fname = "eval_metric.custom_metric"
    if not callable(f):
        raise TypeError(f"{fname}: f must be a function of (label, pred), got {type(f).__name__}")
    if isinstance(name, Mapping) and opts is None:
        name, opts = None, name
    o = parse_opts(fname, CUSTOM_METRIC_OPTS, opts, kw)
    if name is None:
        name = getattr(f, "__name__", type(f).__name__)
        if "<" in name:
            name = f"custom({name})"
    elif not isinstance(name, str):
        raise TypeError(f"{fname}: name must be a string, got {type(name).__name__}")
    return CustomMetric(f, name, o)


def comp_metric(metrics: MetricLike | Mapping[str, Any] = (), opts: Mapping[str, Any] | None = None, /,
                **kw: Any) -> CompositeMetric:
    """A composite of several metrics (name ``composite``): each update goes to every child;
    ``get`` returns ``([names], [values])`` (nested composites flattened). Children may be
    metrics, names or functions (each made with ``create``).

    Options:
        name (str, default "composite"): display name of the composite
        output_names, label_names: as for ``accuracy``

    Returns:
        A new CompositeMetric.

    Example:
        >>> m = comp_metric([accuracy(), "mse"])
        >>> get(update(m, np.array([1., 0.]), np.array([1., 1.])))
        (['accuracy', 'mse'], [0.5, 0.5])
    """
    if isinstance(metrics, Mapping) and opts is None:
        opts, metrics = metrics, ()
    o = parse_opts("eval_metric.comp_metric", COMP_METRIC_OPTS, opts, kw)
    if isinstance(metrics, (str, _Metric)) or callable(metrics):
        metrics = [metrics]
    return CompositeMetric([create(m) for m in metrics], o["name"], o)


# Canonical kinds (as `_native.metric_canonical` returns them) to the functions making them.
_MAKERS: dict[str, Callable[..., _Metric]] = {
    "accuracy": accuracy, "top_k_accuracy": top_k_accuracy, "f1": f1, "mcc": mcc,
    "perplexity": perplexity, "mae": mae, "mse": mse, "rmse": rmse,
    "cross_entropy": cross_entropy, "nll_loss": nll_loss,
    "pearson_correlation": pearson_correlation, "pcc": pcc, "loss": loss,
    "composite": comp_metric,
}


def create(metric: MetricLike, opts: Mapping[str, Any] | None = None, /, **kw: Any) -> _Metric:
    """A metric from a name, a function, a list of those, or a metric (returned as is).

    Names (case-insensitive): ``acc``/``accuracy``, ``top_k_accuracy``/``top_k_acc`` (needs
    ``top_k``), ``f1``, ``mcc``, ``perplexity``, ``mae``, ``mse``, ``rmse``,
    ``ce``/``cross-entropy``, ``nll_loss``/``nll-loss``, ``pearsonr``, ``pcc``, ``loss``,
    ``composite``; an unknown name raises MXFNError with the closest names. A function
    becomes ``custom_metric(f)``; a list becomes ``comp_metric`` of its items.

    Options are those of the metric made (``top_k``, ``axis``, ``eps``, ``name``…); for a
    list, they are passed to every child.

    Returns:
        The metric.

    Example:
        >>> create("top_k_acc", top_k=5).name
        'top_k_accuracy_5'
        >>> create("acuracy")
        Traceback (most recent call last):
        ...
        mxfn._errors.MXFNError: eval_metric.create: metric: expected a known name (did you mean "accuracy"?), got "acuracy"
    """
    if isinstance(metric, _Metric):
        if opts or kw:
            raise MXFNError(f"eval_metric.create: {metric.name} is already a metric; options "
                            f"cannot be applied to it")
        return metric
    if isinstance(metric, str):
        make = _MAKERS[_native.metric_canonical(metric)]
        return make(**kw) if opts is None else make(opts, **kw)
    if isinstance(metric, (list, tuple)):
        return comp_metric([create(m, opts, **kw) for m in metric])
    if callable(metric):
        return custom_metric(metric, None, opts, **kw)
    raise TypeError(f"eval_metric.create: expected a metric name, function, list or metric, "
                    f"got {type(metric).__name__}")


def _metric(m: Any, fname: str) -> _Metric:
    if not isinstance(m, _Metric):
        raise TypeError(f"eval_metric.{fname}: expected a metric (made by accuracy(), create…), "
                        f"got {type(m).__name__}")
    return m


def _arrays(x: Any) -> list[Any]:
    if x is None:
        return []
    if isinstance(x, (NDArray, np.ndarray)):
        return [x]
    if isinstance(x, (list, tuple)):
        return list(x)
    raise TypeError(f"eval_metric.update: labels and preds must be arrays or lists of arrays, "
                    f"got {type(x).__name__}")


def update(metric: _M, labels: ArrayLike | Sequence[ArrayLike] | None, preds: ArrayLike | Sequence[ArrayLike] | None) -> _M:
    """Accumulates one batch: ``labels[i]`` goes with ``preds[i]`` (lists of NDArrays or numpy
    arrays; a single array is a list of one). All-or-nothing for built-in metrics: a bad batch
    raises MXFNError and leaves the sums as they were.

    Returns:
        The metric.

    Example:
        >>> m = update(mse(), [np.array([1., 2.])], [np.array([1., 3.])])
        >>> get(m)
        ('mse', 0.5)
    """
    _metric(metric, "update")._update(_arrays(labels), _arrays(preds))
    return metric


def update_dict(metric: _M, labels: Mapping[str, ArrayLike], preds: Mapping[str, ArrayLike]) -> _M:
    """Accumulates a batch given as maps name → array: the metric's ``label_names`` /
    ``output_names`` pick (and order) the arrays, else all are used in map order (MXNet's
    ``update_dict``).

    Returns:
        The metric.

    Example:
        >>> m = accuracy(output_names=["sm_output"])
        >>> m = update_dict(m, {"sm_label": np.array([1.])},
        ...                 {"aux": np.array([[9., 0.]]), "sm_output": np.array([[0., 1.]])})
        >>> get(m)
        ('accuracy', 1.0)
    """
    m = _metric(metric, "update_dict")
    if isinstance(m, CompositeMetric):
        if m.label_names is not None:
            labels = {k: v for k, v in labels.items() if k in m.label_names}
        if m.output_names is not None:
            preds = {k: v for k, v in preds.items() if k in m.output_names}
        for c in m.metrics:
            update_dict(c, labels, preds)
        return metric

    def pick(d: Mapping[str, Any], names: list[str] | None, what: str) -> list[Any]:
        if names is None:
            return list(d.values())
        missing = [n for n in names if n not in d]
        if missing:
            raise KeyError(f"eval_metric.update_dict: {m.name}: no {what} named {missing[0]!r}; "
                           f"given {list(d)}")
        return [d[n] for n in names]

    m._update(pick(labels, m.label_names, "label"), pick(preds, m.output_names, "output"))
    return metric


def get(metric: _Metric) -> tuple[Any, Any]:
    """The local value: ``(name, value)``, or ``([names], [values])`` for a composite. A metric
    with no instances gives NaN.

    Example:
        >>> get(accuracy())
        ('accuracy', nan)
    """
    m = _metric(metric, "get")
    pairs = m._read(False)
    return _shape_reading(m, pairs)


def get_global(metric: _Metric) -> tuple[Any, Any]:
    """Like ``get``, from the global sums (which ``reset_local`` keeps).

    Example:
        >>> m = update(loss(), [], np.array([2.]))
        >>> get(reset_local(m)), get_global(m)
        (('loss', nan), ('loss', 2.0))
    """
    m = _metric(metric, "get_global")
    return _shape_reading(m, m._read(True))


def _shape_reading(m: _Metric, pairs: list[tuple[str, float]]) -> tuple[Any, Any]:
    if isinstance(m, CompositeMetric):
        return [p[0] for p in pairs], [p[1] for p in pairs]
    return pairs[0]


def get_name_value(metric: _Metric) -> list[tuple[str, float]]:
    """The local values as ``[(name, value), …]`` (one pair, or one per composite child).

    Example:
        >>> get_name_value(comp_metric(["mae", "rmse"]))
        [('mae', nan), ('rmse', nan)]
    """
    return list(_metric(metric, "get_name_value")._read(False))


def get_global_name_value(metric: _Metric) -> list[tuple[str, float]]:
    """The global values as ``[(name, value), …]``.

    Example:
        >>> get_global_name_value(mae())
        [('mae', nan)]
    """
    return list(_metric(metric, "get_global_name_value")._read(True))


def reset(metric: _M) -> _M:
    """Clears local and global sums.

    Returns:
        The metric.

    Example:
        >>> get_global(reset(update(mae(), np.array([1.]), np.array([0.]))))
        ('mae', nan)
    """
    _metric(metric, "reset")._reset(False)
    return metric


def reset_local(metric: _M) -> _M:
    """Clears the local sums (what ``get`` reports), keeping the global ones.

    Returns:
        The metric.

    Example:
        >>> m = reset_local(update(mae(), np.array([1.]), np.array([0.])))
        >>> get(m), get_global(m)
        (('mae', nan), ('mae', 1.0))
    """
    _metric(metric, "reset_local")._reset(True)
    return metric


def get_and_reset(metric: _Metric) -> tuple[Any, Any]:
    """``get(metric)``, then ``reset(metric)``.

    Returns:
        What ``get`` returned before the reset.

    Example:
        >>> m = update(mae(), np.array([1.]), np.array([0.]))
        >>> get_and_reset(m), get(m)
        (('mae', 1.0), ('mae', nan))
    """
    value = get(metric)
    reset(metric)
    return value


def name(metric: _Metric) -> str:
    """The metric's display name.

    Example:
        >>> name(create("ce"))
        'cross-entropy'
    """
    return _metric(metric, "name").name


def add(composite: _M, metric: MetricLike) -> _M:
    """Appends a child (a metric, name or function) to a composite metric.

    Returns:
        The composite.

    Example:
        >>> get(add(comp_metric(), "acc"))
        (['accuracy'], [nan])
    """
    m = _metric(composite, "add")
    if not isinstance(m, CompositeMetric):
        raise MXFNError(f"eval_metric.add: expected a composite metric (comp_metric), got {m.name}")
    m._children.append(create(metric))
    return composite
