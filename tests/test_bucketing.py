"""mx.module.bucketing_module: MXNet's BucketingModule (ports of MXNet 1.x test_module.py)."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import module as m

VOCAB, EMBED, BATCH = 12, 8, 4


def lm_gen(seq_len):
    """An embedding + FC language model for one bucket length (params named the same in every
    bucket, so they are shared)."""
    data = mx.sym.variable("data")
    label = mx.sym.variable("softmax_label")
    emb = mx.sym.embedding(data, input_dim=VOCAB, output_dim=EMBED, name="embed")
    flat = mx.sym.reshape(emb, shape=(-1, EMBED))
    pred = mx.sym.fully_connected(flat, num_hidden=VOCAB, name="pred")
    out = mx.sym.softmax_output(pred, mx.sym.reshape(label, shape=(-1,)), name="softmax")
    return out, ["data"], ["softmax_label"]


def fc_gen(key):
    """test_module.py's sym_gen: a FC whose input width is the bucket key."""
    data = mx.sym.variable("data")
    fc = mx.sym.fully_connected(data, num_hidden=3, name="fc")
    return mx.sym.softmax_output(fc, name="softmax"), ["data"], ["softmax_label"]


def _batch(key, rng, n=BATCH):
    x = rng.randint(1, VOCAB, size=(n, key)).astype("float32")
    y = rng.randint(1, VOCAB, size=(n, key)).astype("float32")
    return {"data": [mx.nd.array(x)], "label": [mx.nd.array(y)], "bucket_key": key,
            "provide_data": [("data", (n, key))], "provide_label": [("softmax_label", (n, key))]}


def _trained_bm(default=10, lr=0.1):
    bm = m.bucketing_module(lm_gen, default_bucket_key=default)
    m.bind(bm, data_shapes=[("data", (BATCH, default))], label_shapes=[("softmax_label", (BATCH, default))])
    m.init_params(bm, initializer=mx.init.xavier())
    m.init_optimizer(bm, optimizer="sgd", optimizer_params={"learning_rate": lr})
    return bm


def _np(d):
    return {k: v.asnumpy() for k, v in d.items()}


def test_requires_default_bucket_key_and_sym_gen():
    with pytest.raises(mx.MXFNError, match="default_bucket_key"):
        m.bucketing_module(lm_gen)
    with pytest.raises(TypeError):
        m.bucketing_module(42, default_bucket_key=3)


def test_queries_before_bind_come_from_the_default_bucket():
    bm = m.bucketing_module(lm_gen, default_bucket_key=10)
    assert m.data_names(bm) == ["data"] and m.label_names(bm) == ["softmax_label"]
    assert not m.binded(bm) and not m.params_initialized(bm)
    assert m.buckets(bm) == [10] and m.current_bucket_key(bm) == 10
    with pytest.raises(mx.MXFNError, match="bind"):
        m.forward(bm, _batch(10, np.random.RandomState(0)))


def test_bucket_switch_shares_params_and_optimizer():
    # test_module.py::test_bucket_module_ctx_group / test_shared_exec_group analogue
    rng = np.random.RandomState(0)
    bm = _trained_bm()
    m.forward_backward(bm, _batch(5, rng))
    assert m.current_bucket_key(bm) == 5 and sorted(m.buckets(bm)) == [5, 10]
    assert m.outputs_merged(bm)[0].shape == (BATCH * 5, VOCAB)
    b5, b10 = m.bucket_module(bm, 5), m.bucket_module(bm, 10)
    assert m.optimizer(b5) is m.optimizer(bm) is m.optimizer(b10)
    before = _np(m.get_params(bm)[0])
    m.update(bm)
    after5 = _np(m.get_params(bm)[0])
    assert any(not np.allclose(before[k], after5[k]) for k in before)
    # the update made in bucket 5 is what bucket 10 sees after switching
    m.forward(bm, _batch(10, rng), is_train=False)
    assert m.current_bucket_key(bm) == 10
    after10 = _np(m.get_params(bm)[0])
    for k in after5:
        np.testing.assert_array_equal(after10[k], after5[k])
    # and an update in bucket 10 is seen back in bucket 5
    m.forward_backward(bm, _batch(10, rng))
    m.update(bm)
    p10 = _np(m.get_params(bm)[0])
    m.switch_bucket(bm, 5)
    p5 = _np(m.get_params(bm)[0])
    for k in p10:
        np.testing.assert_array_equal(p5[k], p10[k])
    assert any(not np.allclose(p10[k], after5[k]) for k in p10)


def test_shared_optimizer_states_accumulate_across_buckets():
    # momentum states are shared: two steps in two buckets == two steps in one module
    rng = np.random.RandomState(1)
    b1, b2 = _batch(6, rng), _batch(6, rng)
    b2b = dict(b2, bucket_key=7)  # same arrays, other key (the symbol does not depend on it)

    def run(batches):
        mx.random.seed(3)
        bm = m.bucketing_module(lm_gen, default_bucket_key=6)
        m.bind(bm, data_shapes=[("data", (BATCH, 6))], label_shapes=[("softmax_label", (BATCH, 6))])
        m.init_params(bm, initializer=mx.init.xavier())
        m.init_optimizer(bm, optimizer="sgd", optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
        for b in batches:
            m.forward_backward(bm, b)
            m.update(bm)
        return _np(m.get_params(bm)[0])

    one, two = run([b1, b2]), run([b1, b2b])
    for k in one:
        np.testing.assert_allclose(one[k], two[k], rtol=1e-6, atol=1e-7)


def test_borrow_optimizer_from_a_shared_module():
    # test_module.py::test_module_switch_bucket (borrow_optimizer path)
    rng = np.random.RandomState(2)
    bm = _trained_bm()
    plain = m.module(lm_gen(10)[0])
    m.bind(plain, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    m.init_params(plain, arg_params=m.get_params(bm)[0])
    m.borrow_optimizer(plain, bm)
    assert m.optimizer(plain) is m.optimizer(bm)
    m.forward_backward(plain, _batch(10, rng))
    m.update(plain)
    bm2 = m.bucketing_module(lm_gen, default_bucket_key=10)
    m.bind(bm2, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    m.init_params(bm2)
    m.borrow_optimizer(bm2, plain)
    m.forward(bm2, _batch(3, rng))
    assert m.optimizer(m.bucket_module(bm2, 3)) is m.optimizer(plain)


def test_set_params_and_init_params_reach_every_bucket():
    rng = np.random.RandomState(3)
    bm = _trained_bm()
    m.forward(bm, _batch(4, rng))
    zeros = {k: np.zeros_like(v) for k, v in _np(m.get_params(bm)[0]).items()}
    m.set_params(bm, arg_params=zeros)
    m.switch_bucket(bm, 10)
    assert all(not v.any() for v in _np(m.get_params(bm)[0]).values())
    out = m.outputs_merged(m.forward(bm, _batch(10, rng), is_train=False))[0].asnumpy()
    np.testing.assert_allclose(out, np.full_like(out, 1.0 / VOCAB), rtol=1e-5)
    with pytest.raises(mx.MXFNError, match="pred_weight"):
        m.set_params(bm, arg_params={"embed_weight": zeros["embed_weight"]})


def test_module_states_and_outputs_follow_the_current_bucket():
    rng = np.random.RandomState(4)
    bm = m.bucketing_module(fc_gen, default_bucket_key=5)
    assert m.binded(bm) is False
    m.bind(bm, data_shapes=[("data", (3, 5))], label_shapes=[("softmax_label", (3,))])
    assert m.binded(bm) and not m.params_initialized(bm) and not m.optimizer_initialized(bm)
    m.init_params(bm)
    assert m.params_initialized(bm)
    m.init_optimizer(bm)
    assert m.optimizer_initialized(bm)
    m.forward(bm, {"data": [rng.rand(2, 5)], "label": [np.zeros(2)], "bucket_key": 5})
    assert m.outputs_merged(bm)[0].shape == (2, 3)
    assert m.output_names(bm) == ["softmax_output"]
    assert m.data_shapes(bm)[0]["shape"] == (2, 5)
    m.bind(bm, data_shapes=[("data", (3, 5))])  # bound: ignored
    assert m.buckets(bm) == [5]
    # switch_bucket to a new key needs its shapes
    with pytest.raises(mx.MXFNError, match="data_shapes"):
        m.switch_bucket(bm, 9)


def test_checkpoint_of_a_bucketing_module(tmp_path):
    rng = np.random.RandomState(5)
    bm = _trained_bm()
    m.forward_backward(bm, _batch(3, rng))
    m.update(bm)
    want = _np(m.get_params(bm)[0])
    prefix = str(tmp_path / "lm")
    m.save_checkpoint(bm, prefix=prefix, epoch=1, save_opt_states=True)
    back = m.load_checkpoint(prefix, 1)
    m.bind(back, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    got = _np(m.get_params(back)[0])
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    m.load_optimizer_states(bm, prefix + "-0001.states")


class _Contiguous:
    """bucket_sentence_iter with C-contiguous labels: its labels (a concat along axis 1) are
    not row-major and the core's SoftmaxOutput/Reshape reject them (core bug, reported)."""

    def __init__(self, it):
        self.it = it
        self.provide_data, self.provide_label = it.provide_data, it.provide_label
        self.default_bucket_key = it.default_bucket_key

    def reset(self):
        self.it.reset()

    def __iter__(self):
        return self

    def __next__(self):
        b = next(self.it)
        return dict(b, label=[mx.nd.array(np.ascontiguousarray(np.asarray(x))) for x in b["label"]])

    next = __next__


def test_fit_score_predict_with_bucket_sentence_iter():
    rng = np.random.RandomState(0)
    # a learnable language: each token is followed by the next id
    sents = []
    for _ in range(200):
        n = int(rng.choice([3, 5, 7]))
        s = int(rng.randint(1, VOCAB - n))
        sents.append(list(range(s, s + n)))
    it = _Contiguous(mx.io.bucket_sentence_iter(sents, 8, buckets=[4, 6, 8], invalid_label=0, seed=0))
    mx.random.seed(0)
    bm = m.bucketing_module(lm_gen, default_bucket_key=it.default_bucket_key)
    m.fit(bm, it, num_epoch=6, eval_metric="ce", optimizer="adam",
          optimizer_params={"learning_rate": 0.05}, initializer=mx.init.xavier())
    hist = m.history(bm)
    ce = hist["train-cross-entropy"]
    assert len(ce) == 6 and ce[-1] < 0.7 * ce[0]
    assert sorted(m.buckets(bm)) == [4, 6, 8]
    res = dict(m.score(bm, eval_data=it, eval_metric="ce"))
    assert res["cross-entropy"] < ce[0]
    preds = m.predict_every_batch(bm, eval_data=it)
    assert {p[0].shape[1] for p in preds} == {VOCAB} and len(preds) == len(list(mx.io.reset(it)))


def test_two_contexts_share_params_across_buckets():
    rng = np.random.RandomState(6)
    bm = m.bucketing_module(lm_gen, default_bucket_key=6, contexts=[mx.cpu(0), mx.cpu(1)])
    m.bind(bm, data_shapes=[("data", (BATCH, 6))], label_shapes=[("softmax_label", (BATCH, 6))])
    m.init_params(bm, initializer=mx.init.xavier())
    m.init_optimizer(bm, optimizer_params={"learning_rate": 0.5})
    m.forward_backward(bm, _batch(3, rng))
    m.update(bm)
    p3 = _np(m.get_params(bm)[0])
    assert len(m.contexts(bm)) == 2
    m.forward(bm, _batch(6, rng), is_train=False)
    p6 = _np(m.get_params(bm)[0])
    for k in p3:
        np.testing.assert_array_equal(p6[k], p3[k])


def test_repr_names_the_buckets_and_the_current_module():
    bm = _trained_bm()
    r = repr(bm)
    assert r.startswith("BucketingModule(default_bucket_key=10, buckets=[10], current=10, current_module=Module(")
