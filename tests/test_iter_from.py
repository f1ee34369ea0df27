"""mx.io.iter_from: a DataIter over batches from a list, a generator, a callable or a
DataLoader-like re-iterable (SPEC §9.3)."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import io

X = np.arange(20.0).reshape(10, 2)          # 10 samples, 2 features
Y = np.arange(10) % 3                       # int64 labels, as a DataLoader gives them


def _chunks(x, y, bs):
    return [(x[i:i + bs], y[i:i + bs]) for i in range(0, len(x), bs)]


def _rows(it):
    """[(data rows, label rows, pad)] of one epoch (after a reset)."""
    return [(b["data"][0].asnumpy().tolist(), [lab.asnumpy().tolist() for lab in b["label"]], b["pad"])
            for b in io.reset(it)]


class Loader:
    """A torch-style DataLoader: re-iterable (a fresh iterator per iter()), reshuffled per epoch."""

    def __init__(self, x, y, bs, shuffle=False):
        self.x, self.y, self.bs, self.shuffle, self.epochs = x, y, bs, shuffle, 0

    def __iter__(self):
        order = np.random.RandomState(self.epochs).permutation(len(self.x)) if self.shuffle else np.arange(len(self.x))
        self.epochs += 1
        for i in range(0, len(self.x), self.bs):
            j = order[i:i + self.bs]
            yield [self.x[j], self.y[j]]   # default_collate gives a list


class FakeTensor:
    """Stands in for a CPU torch tensor: only __array__."""

    def __init__(self, a):
        self._a = np.asarray(a)

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


# -- sources ---------------------------------------------------------------------------------

def test_list_of_tuples_gives_descs_batches_and_repeats_after_reset():
    it = mx.io.iter_from(_chunks(X, Y, 5))
    assert io.provide_data(it) == [{"name": "data", "shape": (5, 2), "dtype": "float32", "layout": "NC"}]
    assert io.provide_label(it) == [{"name": "softmax_label", "shape": (5,), "dtype": "float32", "layout": "N"}]
    assert it.batch_size == 5
    batches = list(it)
    assert len(batches) == 2 and all(isinstance(b, io.DataBatch) for b in batches)
    assert [b["pad"] for b in batches] == [0, 0]
    assert batches[1]["data"][0].asnumpy().tolist() == X[5:].tolist()
    assert batches[1]["label"][0].asnumpy().tolist() == [2.0, 0.0, 1.0, 2.0, 0.0]
    assert batches[0]["provide_data"] == io.provide_data(it)
    assert not it.has_next()
    with pytest.raises(StopIteration):
        it.next()
    assert _rows(it) == _rows(it) and len(_rows(it)) == 2


def test_the_peeked_first_batch_is_not_lost():
    it = mx.io.iter_from(iter(_chunks(X, Y, 4)))     # a one-shot iterator: peeked at creation
    first = io.next(it)
    assert first["data"][0].asnumpy().tolist() == X[:4].tolist()


def test_callable_source_is_called_again_at_every_reset():
    calls = []

    def gen():
        calls.append(1)
        for i in range(0, 10, 5):
            yield X[i:i + 5], Y[i:i + 5]

    it = mx.io.iter_from(gen)
    assert len(calls) == 1
    io.reset(it)                      # nothing used yet: no new call, the peeked batch stays
    assert len(calls) == 1
    e1 = _rows(it)
    e2 = _rows(it)
    assert len(calls) == 2            # the second reset re-called gen
    assert e1 == e2 and len(e1) == 2 and e1[0][0] == X[:5].tolist()
    # a partly read epoch restarts from the beginning
    io.reset(it)
    io.next(it)
    assert io.next(io.reset(it))["data"][0].asnumpy().tolist() == X[:5].tolist()


def test_reiterable_dataloader_is_reiterated_at_reset():
    loader = Loader(X, Y, 4, shuffle=True)
    it = mx.io.iter_from(loader)
    e1, e2 = _rows(it), _rows(it)
    assert loader.epochs == 2
    assert [p for _, _, p in e1] == [0, 0, 2]
    seen1 = sorted(r for d, _, p in e1 for r in (d[:4 - p]))
    seen2 = sorted(r for d, _, p in e2 for r in (d[:4 - p]))
    assert seen1 == seen2 == X.tolist()           # every sample once per epoch …
    assert [d for d, _, _ in e1] != [d for d, _, _ in e2]   # … in a new order


def test_one_shot_generator_cannot_be_reset_after_use():
    it = mx.io.iter_from(b for b in _chunks(X, Y, 5))
    io.reset(it)                      # nothing used yet: fine
    assert len(list(it)) == 2
    with pytest.raises(mx.MXFNError, match=r'"source" is a one-shot iterator.*callable'):
        io.reset(it)


def test_one_shot_generator_in_fit_fails_at_the_second_epoch():
    net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=3), name="softmax")
    it = mx.io.iter_from(b for b in _chunks(X, Y, 5))
    mod = mx.module.fit(mx.module.module(net), it, num_epoch=1)   # one epoch works
    with pytest.raises(mx.MXFNError, match="callable"):
        mx.module.fit(mod, it, num_epoch=2)


# -- batch forms -----------------------------------------------------------------------------

def test_dict_batches_name_their_arrays_and_later_batches_are_matched_by_name():
    a, b = X[:, :1], X[:, 1:] * 10
    batches = [({"a": a[:5], "b": b[:5]}, {"y": Y[:5]}),
               ({"b": b[5:], "a": a[5:]}, {"y": Y[5:]})]     # another key order
    it = mx.io.iter_from(batches)
    assert [d["name"] for d in io.provide_data(it)] == ["a", "b"]
    assert [d["name"] for d in io.provide_label(it)] == ["y"]
    last = list(it)[1]
    assert last["data"][0].asnumpy().ravel().tolist() == a[5:].ravel().tolist()
    assert last["data"][1].asnumpy().ravel().tolist() == b[5:].ravel().tolist()


def test_flat_dict_batches_split_by_label_names():
    it = mx.io.iter_from([{"data": X[:5], "softmax_label": Y[:5]}, {"softmax_label": Y[5:], "data": X[5:]}])
    assert [d["name"] for d in io.provide_data(it)] == ["data"]
    assert [d["name"] for d in io.provide_label(it)] == ["softmax_label"]
    assert list(it)[1]["label"][0].asnumpy().tolist() == [2.0, 0.0, 1.0, 2.0, 0.0]


def test_dict_names_must_agree_with_names_given():
    with pytest.raises(mx.MXFNError, match=r'"source" batch 0.*"data_names" is \[\'x\'\]'):
        mx.io.iter_from([({"a": X}, Y)], data_names=["x"])
    with pytest.raises(mx.MXFNError, match=r'"source" batch 1: its data inputs are \[\'b\'\]'):
        list(mx.io.iter_from([({"a": X[:5]}, Y[:5]), ({"b": X[5:]}, Y[5:])]))


def test_lists_of_arrays_take_names_in_order():
    it = mx.io.iter_from([([X[:5], X[:5, :1]], [Y[:5], Y[:5] * 2])],
                         data_names=["d0", "d1"], label_names=("l0", "l1"))
    assert [(d["name"], d["shape"]) for d in io.provide_data(it)] == [("d0", (5, 2)), ("d1", (5, 1))]
    assert [(d["name"], d["shape"]) for d in io.provide_label(it)] == [("l0", (5,)), ("l1", (5,))]
    assert io.next(it)["label"][1].asnumpy().tolist() == [0.0, 2.0, 4.0, 0.0, 2.0]


def test_ndarray_keeps_its_dtype_numpy_and_tensors_become_float32():
    xi = mx.nd.array(np.arange(12).reshape(6, 2), dtype="int32")
    it = mx.io.iter_from([(xi[0:3], mx.nd.array([1, 2, 3])), (xi[3:6], np.array([4, 5, 6]))])
    assert io.provide_data(it)[0]["dtype"] == "int32"
    batches = list(it)
    assert batches[1]["data"][0].dtype == np.int32
    assert batches[1]["data"][0].asnumpy().tolist() == [[6, 7], [8, 9], [10, 11]]
    assert batches[1]["label"][0].dtype == np.float32          # int64 numpy -> float32
    t = mx.io.iter_from([(FakeTensor(X[:5]), FakeTensor(Y[:5]))])
    b = io.next(t)
    assert b["data"][0].dtype == np.float32 and b["data"][0].asnumpy().tolist() == X[:5].tolist()
    assert io.provide_label(t)[0]["dtype"] == "float32"


def test_label_less_batches_for_predict():
    for source in ([X[:5], X[5:]], [(X[:5],), (X[5:],)], [(X[:5], None), (X[5:], None)]):
        it = mx.io.iter_from(source)
        assert io.provide_label(it) == []
        assert [len(b["label"]) for b in it] == [0, 0]
    # label_names=None drops the labels a loader gives
    it = mx.io.iter_from(_chunks(X, Y, 5), label_names=None)
    assert io.provide_label(it) == [] and io.next(it)["label"] == []


# -- short batches ---------------------------------------------------------------------------

def test_short_last_batch_is_padded_from_the_epochs_first_samples():
    it = mx.io.iter_from(lambda: iter(_chunks(X, Y, 4)))     # 4 + 4 + 2
    rows = _rows(it)
    assert [p for _, _, p in rows] == [0, 0, 2]
    data, label, _ = rows[2]
    assert data == X[8:].tolist() + X[:2].tolist()
    assert label == [Y[8:].tolist() + Y[:2].tolist()]
    # the same batches as MXNet's NDArrayIter with last_batch_handle="pad"
    ref = mx.io.ndarray_iter(X, label=Y, batch_size=4, last_batch_handle="pad")
    assert rows == [(b["data"][0].asnumpy().tolist(), [b["label"][0].asnumpy().tolist()], b["pad"]) for b in ref]


def test_short_batch_longer_pad_wraps_and_discard_drops_it():
    it = mx.io.iter_from([(X[:4], Y[:4]), (X[4:5], Y[4:5])])
    last = list(it)[1]
    assert last["pad"] == 3 and last["data"][0].shape == (4, 2)
    assert last["data"][0].asnumpy().tolist() == [X[4].tolist()] + X[:3].tolist()
    it = mx.io.iter_from(_chunks(X, Y, 4), last_batch_handle="discard")
    assert [b["pad"] for b in it] == [0, 0]


# -- with the module ---------------------------------------------------------------------------

def _mlp():
    x = mx.sym.variable("data")
    h = mx.sym.activation(mx.sym.fully_connected(x, num_hidden=16, name="fc1"), act_type="relu")
    return mx.sym.softmax_output(mx.sym.fully_connected(h, num_hidden=2, name="fc2"), name="softmax")


def _separable(n, seed):
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 1.5]) > 0).astype("int64")
    return x, y


def test_fit_and_score_learn_a_separable_problem():
    mx.random.seed(0)
    x, y = _separable(200, 0)
    xv, yv = _separable(100, 1)
    loader = Loader(x, y, 32, shuffle=True)                   # 6 full batches + 8 samples
    mod = mx.module.fit(mx.module.module(_mlp()), mx.io.iter_from(loader), num_epoch=15,
                        optimizer_params={"learning_rate": 0.5}, initializer=mx.init.xavier())
    assert loader.epochs == 15
    (name, acc), = mx.module.score(mod, eval_data=mx.io.iter_from(_chunks(xv, yv, 32)), eval_metric="acc")
    assert name == "accuracy" and acc > 0.9
    # a padded last batch is left out of the metric: the same as the 100 samples' own accuracy
    pred = mx.module.predict(mod, eval_data=mx.io.iter_from([xv[i:i + 32] for i in range(0, 100, 32)]))[0]
    assert pred.shape == (100, 2)
    assert acc == pytest.approx(float(np.mean(pred.asnumpy().argmax(1) == yv)))


def test_predict_equals_predict_over_ndarray_iter():
    mx.random.seed(1)
    x, y = _separable(45, 2)
    mod = mx.module.module(_mlp())
    mx.module.bind(mod, data_shapes=[("data", (10, 4))], label_shapes=[("softmax_label", (10,))])
    mx.module.init_params(mod, initializer=mx.init.xavier())
    got = mx.module.predict(mod, eval_data=mx.io.iter_from(lambda: (x[i:i + 10] for i in range(0, 45, 10))))
    want = mx.module.predict(mod, eval_data=mx.io.ndarray_iter(x, batch_size=10))
    assert len(got) == 1 and got[0].shape == (45, 2)
    np.testing.assert_array_equal(got[0].asnumpy(), want[0].asnumpy())
    # with labels too (predict ignores them)
    labelled = mx.module.predict(mod, eval_data=mx.io.iter_from(_chunks(x, y, 10)))
    np.testing.assert_array_equal(labelled[0].asnumpy(), want[0].asnumpy())


# -- errors --------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, words", [
    ([], r'"source" is empty'),
    (lambda: iter(()), r'"source" is empty'),
    (iter([]), r'"source" is empty'),
])
def test_empty_source(source, words):
    with pytest.raises(mx.MXFNError, match=words):
        mx.io.iter_from(source)


@pytest.mark.parametrize("kw, exc, words", [
    ({"data_names": 5}, TypeError, r'"data_names" expects list or tuple or str, got int'),
    ({"data_names": ["data", 1]}, TypeError, r'"data_names" expects a list of str, got int 1'),
    ({"label_names": 3.0}, TypeError, r'"label_names" expects'),
    ({"data_names": []}, mx.MXFNError, r'"data_names" must name at least one input'),
    ({"data_names": ["a", "a"]}, mx.MXFNError, r'"data_names" names an input twice'),
    ({"label_names": ["data"]}, mx.MXFNError, r'both "data_names" and "label_names"'),
    ({"last_batch_handle": "roll_over"}, mx.MXFNError, r'"last_batch_handle" must be "pad" or "discard"'),
    ({"data_name": ["x"]}, mx.MXFNError, r'unknown option "data_name"; did you mean "data_names"'),
])
def test_bad_options(kw, exc, words):
    with pytest.raises(exc, match=words):
        mx.io.iter_from(_chunks(X, Y, 5), **kw)


def test_options_as_a_map_and_other_spellings():
    it = mx.io.iter_from(_chunks(X, Y, 5), {"dataNames": ["x"]}, **{"label-names": "y"})
    assert [d["name"] for d in io.provide_data(it) + io.provide_label(it)] == ["x", "y"]


@pytest.mark.parametrize("source, exc, words", [
    (X, TypeError, r'"source" must be an iterable.*got ndarray; for arrays use io.ndarray_iter'),
    (5, TypeError, r'"source" must be an iterable of batches or a zero-argument callable.*got int'),
    ("abc", TypeError, r'"source" must be'),
    (lambda: 5, TypeError, r'"source" is a callable, so it must return an iterable.*returned int'),
    ([(X, Y, Y)], mx.MXFNError, r'"source" batch 0: a tuple of 3 items'),
    ([([X, X], Y)], mx.MXFNError, r'"source" batch 0: it has 2 data array\(s\) but "data_names" has 1'),
    ([(X, Y[:5])], mx.MXFNError, r'"source" batch 0: its arrays have different numbers of samples'),
    ([(np.array(["a", "b"]), Y[:2])], mx.MXFNError, r'"source" batch 0: "data" must hold numbers'),
    ([(np.float32(1.0), Y[:1])], mx.MXFNError, r'"source" batch 0: "data" is a scalar'),
])
def test_bad_sources(source, exc, words):
    with pytest.raises(exc, match=words):
        mx.io.iter_from(source)


@pytest.mark.parametrize("later, words", [
    ((X[:6], Y[:6]), r'"source" batch 1: it has 6 samples, more than the first batch\'s 5'),
    ((X[:5, :1], Y[:5]), r'"source" batch 1: data "data" has shape \(5, 1\).*per-sample shape \(2,\)'),
    (([X[:5], X[:5]], Y[:5]), r'"source" batch 1: it has 2 data array\(s\)'),
    ((X[:5],), r'"source" batch 1: it has no label but the first batch had \[\'softmax_label\'\]'),
    ((mx.nd.array(X[:5], dtype="float64"), Y[:5]), r'"source" batch 1: .*dtype float64.*dtype float32'),
])
def test_a_later_batch_that_disagrees_with_the_first(later, words):
    it = mx.io.iter_from([(X[:5], Y[:5]), later])
    io.next(it)
    with pytest.raises(mx.MXFNError, match=words):
        io.next(it)


def test_labels_appearing_later_are_an_error():
    it = mx.io.iter_from([X[:5], (X[5:], Y[5:])])
    with pytest.raises(mx.MXFNError, match=r'"source" batch 1: it has labels \[\'softmax_label\'\] but the first '
                                           r'batch had none'):
        list(it)


def test_exported_from_mx_io():
    assert "iter_from" in io.__all__ and mx.io.iter_from is io.iter_from
