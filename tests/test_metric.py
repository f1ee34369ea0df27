"""mx.eval_metric: constructors and their options, create by name, update forms, composites,
custom functions, update_dict, resets, errors and docs."""

import inspect
import math

import numpy as np
import pytest
import toolz

from mxfn import metric as M
from mxfn import ndarray as nd
from mxfn._errors import MXFNError
from mxfn._opts import OptSpec

LABEL = np.array([0, 1, 1, 0], np.float32)
PRED = np.array([[0.7, 0.3], [0.1, 0.9], [0.6, 0.4], [0.2, 0.8]], np.float32)


@pytest.mark.parametrize("name, expected", [
    ("acc", "accuracy"), ("accuracy", "accuracy"), ("ACC", "accuracy"),
    ("f1", "f1"), ("mcc", "mcc"), ("perplexity", "perplexity"), ("mae", "mae"),
    ("mse", "mse"), ("rmse", "rmse"), ("ce", "cross-entropy"),
    ("cross-entropy", "cross-entropy"), ("crossentropy", "cross-entropy"),
    ("nll_loss", "nll-loss"), ("nll-loss", "nll-loss"), ("pearsonr", "pearsonr"),
    ("pcc", "pcc"), ("loss", "loss"), ("composite", "composite"),
])
def test_create_by_name_gives_spec_names(name, expected):
    assert M.name(M.create(name)) == expected


def test_top_k_needs_k_and_names_it():
    assert M.create("top_k_accuracy", {"top_k": 3}).name == "top_k_accuracy_3"
    assert M.top_k_accuracy(5).name == "top_k_accuracy_5"
    assert M.top_k_accuracy(top_k=2).name == M.top_k_accuracy(k=2).name == "top_k_accuracy_2"
    with pytest.raises(MXFNError, match='missing required option "top_k"'):
        M.create("top_k_accuracy")
    with pytest.raises(MXFNError, match="use accuracy"):
        M.top_k_accuracy(1)
    with pytest.raises(MXFNError, match="given twice"):
        M.top_k_accuracy(2, top_k=3)


def test_unknown_names_and_options_suggest_close_ones():
    with pytest.raises(MXFNError, match='did you mean "accuracy"'):
        M.create("acuracy")
    with pytest.raises(MXFNError, match='did you mean "axis"'):
        M.accuracy(axsi=1)
    with pytest.raises(MXFNError, match='"macro" or "micro"'):
        M.f1(average="weighted")
    with pytest.raises(TypeError, match="eps"):
        M.cross_entropy(eps="small")


def test_values_before_any_update_are_nan():
    for n in ["acc", "f1", "mcc", "perplexity", "mae", "ce", "pearsonr", "loss", "pcc"]:
        assert math.isnan(M.get(M.create(n))[1]), n


@pytest.mark.parametrize("wrap", [lambda x: x, nd.array, lambda x: [x], lambda x: [nd.array(x)]],
                         ids=["numpy", "ndarray", "list-numpy", "list-ndarray"])
def test_update_takes_arrays_or_lists(wrap):
    m = M.accuracy()
    assert M.update(m, wrap(LABEL), wrap(PRED)) is m
    assert M.get(m) == ("accuracy", 0.5)


def test_threading_and_options_map():
    m = toolz.thread_first(M.accuracy({"axis": 1}, name="acc"), (M.update, LABEL, PRED),
                           (M.update, LABEL[:2], PRED[:2]))
    assert M.get(m) == ("acc", 4 / 6)
    assert M.get_and_reset(m) == ("acc", 4 / 6)
    assert math.isnan(M.get_global(m)[1])


def test_inputs_are_not_changed():
    label, pred = LABEL.copy(), PRED.copy()
    M.update(M.comp_metric(["acc", "ce", "mse", "pcc"]), [label], [pred])
    np.testing.assert_array_equal(label, LABEL)
    np.testing.assert_array_equal(pred, PRED)


def test_reset_local_keeps_global():
    m = M.update(M.mae(), np.array([1.0]), np.array([0.0]))
    M.reset_local(m)
    assert math.isnan(M.get(m)[1]) and M.get_global(m) == ("mae", 1.0)
    M.update(m, np.array([3.0]), np.array([0.0]))
    assert M.get(m) == ("mae", 3.0) and M.get_global(m) == ("mae", 2.0)
    [(n, v)] = M.get_global_name_value(M.reset(m))
    assert n == "mae" and math.isnan(v)


def test_f1_macro_averages_calls_micro_pools_counts():
    macro, micro = M.f1(), M.f1(average="micro")
    batches = [(np.array([1, 1]), np.array([[0, 1], [1, 0]])), (np.array([0, 1]), np.array([[0, 1], [0, 1]]))]
    for lab, pr in batches:
        M.update(macro, lab, pr)
        M.update(micro, lab, pr)
    # call 1: TP 1, FN 1 -> F1 2/3; call 2: TP 1, FP 1 -> F1 2/3; pooled TP 2, FP 1, FN 1 -> 2/3
    assert M.get(macro)[1] == pytest.approx(2 / 3)
    assert M.get(micro)[1] == pytest.approx(2 / 3)
    with pytest.raises(MXFNError, match="binary"):
        M.update(macro, np.array([0, 1, 2]), np.ones((3, 2)))


def test_composite_get_and_name_value():
    m = M.comp_metric([M.accuracy(), "mse", M.comp_metric(["mae"])])
    M.update(m, LABEL, LABEL)
    assert M.get(m) == (["accuracy", "mse", "mae"], [1.0, 0.0, 0.0])
    assert M.get_name_value(m) == [("accuracy", 1.0), ("mse", 0.0), ("mae", 0.0)]
    assert M.add(m, "loss") is m and M.get(m)[0][-1] == "loss"
    with pytest.raises(MXFNError, match="composite"):
        M.add(M.mae(), "loss")


def test_create_list_and_callable():
    m = M.create(["acc", lambda l, p: (float(np.abs(l - p.argmax(1)).sum()), l.size)])
    M.update(m, LABEL, PRED)
    assert M.get(m) == (["accuracy", "custom(<lambda>)"], [0.5, 0.5])
    assert M.create(m) is m


def test_custom_metric_numbers_tuples_and_errors():
    seen = []

    def peek(label, pred):
        seen.append((type(label), label.dtype, pred.shape))
        return 2

    m = M.custom_metric(peek, "p")
    M.update(m, [nd.array([1, 2]), np.array([3.0])], [nd.array([[1, 2], [3, 4]]), np.array([[0.0]])])
    assert M.get(m) == ("p", 2.0) and seen[0] == (np.ndarray, np.float32, (2, 2))
    with pytest.raises(MXFNError, match="one label array per prediction"):
        M.update(m, [LABEL], [PRED, PRED])
    extra = M.custom_metric(lambda l, p: 1.0, allow_extra_outputs=True)
    M.update(extra, [LABEL], [PRED, PRED])
    assert M.get(extra)[1] == 1.0
    with pytest.raises(TypeError, match="sum, count"):
        M.update(M.custom_metric(lambda l, p: "x"), LABEL, PRED)
    with pytest.raises(TypeError):
        M.custom_metric(3)


def test_update_dict_selects_by_name():
    m = M.accuracy(output_names=["out"], label_names=["lab"])
    M.update_dict(m, {"other": np.array([0.0]), "lab": np.array([1.0])},
                  {"out": np.array([[0.0, 1.0]]), "x": np.array([[1.0, 0.0]])})
    assert M.get(m) == ("accuracy", 1.0)
    c = M.comp_metric([M.accuracy()], output_names=["out"], label_names=["lab"])
    M.update_dict(c, {"lab": np.array([1.0])}, {"out": np.array([[0.0, 1.0]]), "x": np.array([[1.0, 0.0]])})
    assert M.get(c) == (["accuracy"], [1.0])
    with pytest.raises(KeyError, match="lab"):
        M.update_dict(m, {}, {"out": np.array([[0.0, 1.0]])})


@pytest.mark.parametrize("make, labels, preds", [
    (M.accuracy, [LABEL], [PRED, PRED]),
    (M.accuracy, [np.zeros(3)], [PRED]),
    (lambda: M.accuracy(axis=5), [LABEL], [PRED]),
    (M.cross_entropy, [np.array([7.0])], [np.array([[0.5, 0.5]])]),
    (M.pearson_correlation, [np.zeros(3)], [np.zeros((3, 1))]),
    (lambda: M.top_k_accuracy(2), [LABEL], [np.zeros(4)]),
    (M.pcc, [np.array([-1.0])], [np.array([0.0])]),
    (M.mse, [np.zeros((2, 3))], [np.zeros((4, 5))]),
])
def test_bad_batches_raise_mxfn_error_and_keep_sums(make, labels, preds):
    m = make()
    before = M.get(m)
    with pytest.raises(MXFNError):
        M.update(m, labels, preds)
    after = M.get(m)
    assert after[0] == before[0] and (after[1] == before[1] or math.isnan(after[1]))


def test_not_a_metric_is_a_type_error():
    with pytest.raises(TypeError, match="expected a metric"):
        M.get("accuracy")
    with pytest.raises(TypeError):
        M.create(3)


def test_repr_names_values():
    assert repr(M.update(M.mae(), np.array([1.0]), np.array([0.0]))) == "<EvalMetric mae=1.0>"


def test_every_option_is_documented():
    for fname in ["accuracy", "top_k_accuracy", "f1", "mcc", "perplexity", "mae", "mse", "rmse",
                  "cross_entropy", "nll_loss", "pearson_correlation", "pcc", "loss",
                  "custom_metric", "comp_metric"]:
        doc = inspect.getdoc(getattr(M, fname))
        assert "Options:" in doc and "Example:" in doc and "Returns:" in doc, fname
    for spec_name in [n for n in dir(M) if n.endswith("_OPTS")]:
        spec = getattr(M, spec_name)
        assert all(isinstance(s, OptSpec) and s.doc for s in spec.values()), spec_name
