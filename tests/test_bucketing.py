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


# -- buckets whose parameters differ (SPEC §8; MXNet 1.9.1 raises KeyError for these) ------------

def deep_lm_gen(extra_key, default_extra=False):
    """lm_gen where bucket ``extra_key`` has one more layer ("deep", between the embedding and
    the shared "pred" FC); with ``default_extra`` every other bucket has it instead."""
    def gen(seq_len):
        data = mx.sym.variable("data")
        label = mx.sym.variable("softmax_label")
        emb = mx.sym.embedding(data, input_dim=VOCAB, output_dim=EMBED, name="embed")
        h = mx.sym.reshape(emb, shape=(-1, EMBED))
        if (seq_len == extra_key) != default_extra:
            h = mx.sym.activation(mx.sym.fully_connected(h, num_hidden=EMBED, name="deep"), act_type="tanh")
        pred = mx.sym.fully_connected(h, num_hidden=VOCAB, name="pred")
        out = mx.sym.softmax_output(pred, mx.sym.reshape(label, shape=(-1,)), name="softmax")
        return out, ["data"], ["softmax_label"]
    return gen


def _sentences(rng, n=200):
    sents = []
    for _ in range(n):
        k = int(rng.choice([3, 5, 7]))
        s = int(rng.randint(1, VOCAB - k))
        sents.append(list(range(s, s + k)))
    return sents


def _load_params(path):
    d = mx.nd.load(path)
    return ({k[4:]: v for k, v in d.items() if k.startswith("arg:")},
            {k[4:]: v for k, v in d.items() if k.startswith("aux:")})


def test_bucket_with_an_extra_layer_trains_with_fit_and_round_trips_a_checkpoint(tmp_path):
    it = _Contiguous(mx.io.bucket_sentence_iter(_sentences(np.random.RandomState(0)), 8,
                                                buckets=[4, 6, 8], invalid_label=0, seed=0))
    gen = deep_lm_gen(4)
    mx.random.seed(0)
    # two contexts: fit's end of epoch sets the parameters of every bucket back (set_params)
    bm = m.bucketing_module(gen, default_bucket_key=it.default_bucket_key, contexts=[mx.cpu(0), mx.cpu(1)])
    assert "deep_weight" not in m.param_names(bm)
    m.fit(bm, it, num_epoch=6, eval_metric="ce", optimizer="adam",
          optimizer_params={"learning_rate": 0.05}, initializer=mx.init.xavier())
    ce = m.history(bm)["train-cross-entropy"]
    assert ce[-1] < 0.7 * ce[0]
    args, _ = m.get_params(bm)
    assert list(args) == ["embed_weight", "pred_weight", "pred_bias", "deep_weight", "deep_bias"]
    assert args["deep_weight"].shape == (EMBED, EMBED)
    # the checkpoint holds every bucket's parameters
    prefix = str(tmp_path / "deep")
    m.save_checkpoint(bm, prefix=prefix, epoch=6, save_opt_states=True)
    saved, _ = _load_params(prefix + "-0006.params")
    assert sorted(saved) == sorted(args)
    for k, v in args.items():
        np.testing.assert_array_equal(saved[k].asnumpy(), v.asnumpy())
    batches = list(mx.io.reset(it))  # the iterator shuffles on reset: one fixed pass
    assert {b["bucket_key"] for b in batches} == {4, 6, 8}

    def predict(mod):
        return [m.outputs_merged(m.forward(mod, b, is_train=False))[0].asnumpy() for b in batches]
    want = predict(bm)
    # ...and loads back into a new BucketingModule (before the deep bucket exists) that predicts the same
    back = m.bucketing_module(gen, default_bucket_key=it.default_bucket_key)
    m.bind(back, data_shapes=it.provide_data, label_shapes=it.provide_label, for_training=False)
    m.set_params(back, arg_params=saved, aux_params={})
    assert m.buckets(back) == [8]
    got = predict(back)
    assert sorted(m.buckets(back)) == [4, 6, 8]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    # a plain Module of the default symbol loads it too (the extra names are left aside)
    plain = m.load_checkpoint(prefix, 6)
    m.bind(plain, data_shapes=it.provide_data, label_shapes=it.provide_label, for_training=False)
    assert "deep_weight" not in m.get_params(plain)[0]


def test_a_new_bucket_creates_its_parameters_with_the_init_params_initializer():
    rng = np.random.RandomState(7)
    bm = m.bucketing_module(deep_lm_gen(5), default_bucket_key=10)
    m.bind(bm, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    m.init_params(bm, initializer=mx.init.constant(0.5))
    m.forward(bm, _batch(5, rng), is_train=False)
    args, _ = m.get_params(bm)
    np.testing.assert_array_equal(args["deep_weight"].asnumpy(), np.full((EMBED, EMBED), 0.5, np.float32))
    # bias names go through the name rules, as in Module.init_params
    np.testing.assert_array_equal(args["deep_bias"].asnumpy(), np.zeros(EMBED, np.float32))


def test_updates_in_a_bucket_with_more_or_fewer_params_are_shared_without_stale_copies():
    rng = np.random.RandomState(8)
    for default_extra in (False, True):
        # False: bucket 5 has a layer the default lacks; True: the default has one bucket 5 lacks
        bm = m.bucketing_module(deep_lm_gen(5, default_extra), default_bucket_key=10)
        m.bind(bm, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
        m.init_params(bm, initializer=mx.init.xavier())
        m.init_optimizer(bm, optimizer="sgd", optimizer_params={"learning_rate": 0.5})
        before = _np(m.get_params(bm)[0])
        assert ("deep_weight" in before) == default_extra
        m.forward_backward(bm, _batch(5, rng))
        m.update(bm)
        after5 = _np(m.get_params(bm)[0])
        assert sorted(after5) == sorted(["embed_weight", "pred_weight", "pred_bias", "deep_weight", "deep_bias"])
        changed = {k for k in before if not np.array_equal(before[k], after5[k])}
        if default_extra:  # bucket 5 did not use the default's layer
            assert changed == {"embed_weight", "pred_weight", "pred_bias"}
        else:
            assert changed == {"embed_weight", "pred_weight", "pred_bias"} and "deep_weight" in after5
        # no stale copies: the bucket switched from holds none of the arrays the other took
        b5, b10 = m.bucket_module(bm, 5), m.bucket_module(bm, 10)
        shared = ["embed_weight", "pred_weight", "pred_bias"]
        assert mx._native.mod_held_params(b10._h, shared)[0] == []
        m.forward_backward(bm, _batch(10, rng))
        m.update(bm)
        after10 = _np(m.get_params(bm)[0])
        assert mx._native.mod_held_params(b5._h, shared)[0] == []
        m.switch_bucket(bm, 5)
        assert m.current_bucket_key(bm) == 5
        for k, v in _np(m.get_params(bm)[0]).items():
            np.testing.assert_array_equal(v, after10[k])
        for k in shared:
            np.testing.assert_array_equal(_np(m.get_params(b5)[0])[k], after10[k])


def test_conflicting_parameter_shapes_name_the_parameter_shapes_and_buckets():
    rng = np.random.RandomState(9)
    bm = m.bucketing_module(fc_gen, default_bucket_key=5)  # fc_weight is (3, key)
    m.bind(bm, data_shapes=[("data", (3, 5))], label_shapes=[("softmax_label", (3,))])
    m.init_params(bm)
    with pytest.raises(mx.MXFNError) as e:
        m.switch_bucket(bm, 7, data_shapes=[("data", (3, 7))], label_shapes=[("softmax_label", (3,))])
    msg = str(e.value)
    for part in ('"fc_weight"', "(3, 7)", "bucket 7", "(3, 5)", "bucket 5"):
        assert part in msg, msg
    assert m.buckets(bm) == [5] and m.current_bucket_key(bm) == 5
    m.forward(bm, {"data": [rng.rand(3, 5)], "label": [np.zeros(3)]})
    assert m.outputs_merged(bm)[0].shape == (3, 3)


def test_switching_for_inference_only():
    rng = np.random.RandomState(10)
    gen = deep_lm_gen(5)
    bm = m.bucketing_module(gen, default_bucket_key=10)
    m.bind(bm, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))],
           for_training=False)
    m.init_params(bm, initializer=mx.init.xavier())
    m.switch_bucket(bm, 5, data_shapes=[("data", (BATCH, 5))], label_shapes=[("softmax_label", (BATCH, 5))])
    b5 = _batch(5, rng)
    out5 = m.outputs_merged(m.forward(bm, b5))[0].asnumpy()
    assert out5.shape == (BATCH * 5, VOCAB) and not m.grad_arrays(bm)[0]
    m.forward(bm, _batch(10, rng))
    assert m.current_bucket_key(bm) == 10
    # the same values as a plain Module of bucket 5's symbol given the union of the params
    plain = m.module(gen(5)[0])
    m.bind(plain, data_shapes=[("data", (BATCH, 5))], label_shapes=[("softmax_label", (BATCH, 5))],
           for_training=False)
    args, aux = m.get_params(bm)
    m.init_params(plain, arg_params=args, aux_params=aux)
    want = m.outputs_merged(m.forward(plain, b5))[0].asnumpy()
    np.testing.assert_array_equal(out5, want)
    again = m.outputs_merged(m.forward(bm, b5))[0].asnumpy()
    np.testing.assert_array_equal(again, want)


def test_set_params_and_force_init_reach_the_buckets_that_hold_the_names():
    rng = np.random.RandomState(11)
    bm = m.bucketing_module(deep_lm_gen(5), default_bucket_key=10)
    m.bind(bm, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    m.init_params(bm, initializer=mx.init.xavier())
    m.forward(bm, _batch(5, rng))
    m.switch_bucket(bm, 10)
    args = _np(m.get_params(bm)[0])
    # deep_* are held by bucket 5 (not current): set_params reaches them there
    m.set_params(bm, arg_params={**args, "deep_bias": np.full(EMBED, 2.0, np.float32)})
    assert m.current_bucket_key(bm) == 10
    np.testing.assert_array_equal(_np(m.get_params(bm)[0])["deep_bias"], np.full(EMBED, 2.0))
    with pytest.raises(mx.MXFNError, match=r'"deep_weight".*\(8, 8\).*bucket 5'):
        m.set_params(bm, arg_params={**args, "deep_weight": np.zeros((2, 2))})
    m.switch_bucket(bm, 5)
    np.testing.assert_array_equal(_np(m.get_params(m.bucket_module(bm, 5))[0])["deep_bias"], np.full(EMBED, 2.0))
    # init_params(force_init) re-initialises the names only another bucket holds too
    m.switch_bucket(bm, 10)
    m.init_params(bm, initializer=mx.init.constant(0.25), force_init=True)
    for k, v in _np(m.get_params(bm)[0]).items():
        np.testing.assert_array_equal(v, np.full_like(v, 0.0 if k.endswith("bias") else 0.25))
    # set_params with names of a bucket not made yet: they wait for it
    m.set_params(bm, arg_params={**args, "later_weight": np.ones((3, 3))})
    assert "later_weight" in m.get_params(bm)[0]


def test_force_rebind_keeps_every_bucket_parameter():
    rng = np.random.RandomState(12)
    bm = m.bucketing_module(deep_lm_gen(5), default_bucket_key=10)
    m.bind(bm, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    m.init_params(bm, initializer=mx.init.xavier())
    m.init_optimizer(bm, optimizer_params={"learning_rate": 0.5})
    m.forward_backward(bm, _batch(5, rng))
    m.update(bm)
    want = _np(m.get_params(bm)[0])
    m.bind(bm, data_shapes=[("data", (2 * BATCH, 10))], label_shapes=[("softmax_label", (2 * BATCH, 10))],
           force_rebind=True)
    assert m.buckets(bm) == [10] and m.current_bucket_key(bm) == 10
    got = _np(m.get_params(bm)[0])
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    # bucket 5 is made again with its trained layer, not a new one
    m.forward(bm, _batch(5, rng), is_train=False)
    for k, v in _np(m.get_params(bm)[0]).items():
        np.testing.assert_array_equal(v, want[k])


def _three_buckets(key):
    """Buckets whose parameter lists put different names at the same positions: 1 (default)
    is data -> fc1 -> fc2, 2 is data -> side -> fc2 (side shaped as fc1), 3 is data -> fc2."""
    data = mx.sym.variable("data")
    h = data
    if key == 1:
        h = mx.sym.fully_connected(h, num_hidden=5, name="fc1")
    elif key == 2:
        h = mx.sym.fully_connected(h, num_hidden=5, name="side")
    out = mx.sym.fully_connected(h, num_hidden=3, name="fc2")
    return mx.sym.linear_regression_output(out, name="lro"), ["data"], ["lro_label"]


def test_optimizer_states_are_per_name_across_buckets_with_different_params():
    # SGD with momentum replayed in numpy from the recorded gradients: every name keeps its own
    # momentum, wherever it sits in a bucket's parameter list
    rng = np.random.RandomState(13)
    width = {1: 6, 2: 6, 3: 5}

    def batch(key):
        return {"data": [rng.randn(BATCH, width[key]).astype("float32")],
                "label": [rng.randn(BATCH, 3).astype("float32")], "bucket_key": key,
                "provide_data": [("data", (BATCH, width[key]))], "provide_label": [("lro_label", (BATCH, 3))]}

    bm = m.bucketing_module(_three_buckets, default_bucket_key=1)
    m.bind(bm, data_shapes=[("data", (BATCH, 6))], label_shapes=[("lro_label", (BATCH, 3))])
    m.init_params(bm, initializer=mx.init.xavier())
    lr, mom = 0.1, 0.9
    m.init_optimizer(bm, optimizer="sgd", optimizer_params={"learning_rate": lr, "momentum": mom})
    for k in (2, 3, 1):
        m.forward(bm, batch(k), is_train=False)
    w = _np(m.get_params(bm)[0])
    assert sorted(w) == ["fc1_bias", "fc1_weight", "fc2_bias", "fc2_weight", "side_bias", "side_weight"]
    state = {k: np.zeros_like(v) for k, v in w.items()}
    for k in (1, 2, 3, 1, 2, 3, 2):
        m.forward_backward(bm, batch(k))
        grads = dict(zip(m.param_names(bm), (g[0].asnumpy() for g in m.grad_arrays(bm))))
        m.update(bm)
        for n, g in grads.items():
            state[n] = mom * state[n] - lr * g / BATCH
            w[n] = w[n] + state[n]
    got = _np(m.get_params(bm)[0])
    for n in w:
        np.testing.assert_allclose(got[n], w[n], rtol=1e-5, atol=1e-6)


def test_same_param_buckets_train_as_in_mxnet(tmp_path, mxnet_python):
    rng = np.random.RandomState(14)
    keys = [10, 5, 10, 3, 5]
    batches = [_batch(k, rng) for k in keys]
    bm = m.bucketing_module(lm_gen, default_bucket_key=10)
    m.bind(bm, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    m.init_params(bm, initializer=mx.init.xavier())
    m.init_optimizer(bm, optimizer="sgd", optimizer_params={"learning_rate": 0.2, "momentum": 0.9, "wd": 0.01})
    init = _np(m.get_params(bm)[0])
    for b in batches:
        m.forward_backward(bm, b)
        m.update(bm)
    ours = _np(m.get_params(bm)[0])
    data = tmp_path / "data.npz"
    np.savez(data, **{f"init_{k}": v for k, v in init.items()},
             **{f"x{i}": b["data"][0].asnumpy() for i, b in enumerate(batches)},
             **{f"y{i}": b["label"][0].asnumpy() for i, b in enumerate(batches)})
    out = tmp_path / "mxnet.npz"
    mxnet_python(f"""
import mxnet as mx, numpy as np
d = np.load({str(data)!r})
V, E, B = {VOCAB}, {EMBED}, {BATCH}
def gen(t):
    data, label = mx.sym.var("data"), mx.sym.var("softmax_label")
    emb = mx.sym.Embedding(data, input_dim=V, output_dim=E, name="embed")
    pred = mx.sym.FullyConnected(mx.sym.reshape(emb, shape=(-1, E)), num_hidden=V, name="pred")
    return mx.sym.SoftmaxOutput(pred, mx.sym.reshape(label, shape=(-1,)), name="softmax"), ["data"], ["softmax_label"]
bm = mx.mod.BucketingModule(gen, default_bucket_key=10, context=mx.cpu())
bm.bind(data_shapes=[("data", (B, 10))], label_shapes=[("softmax_label", (B, 10))])
bm.init_params(arg_params={{k[5:]: mx.nd.array(d[k]) for k in d.files if k.startswith("init_")}})
bm.init_optimizer(optimizer="sgd", optimizer_params={{"learning_rate": 0.2, "momentum": 0.9, "wd": 0.01}})
for i, t in enumerate({keys}):
    x, y = d["x%d" % i], d["y%d" % i]
    b = mx.io.DataBatch([mx.nd.array(x)], [mx.nd.array(y)], bucket_key=t,
                        provide_data=[mx.io.DataDesc("data", x.shape)],
                        provide_label=[mx.io.DataDesc("softmax_label", y.shape)])
    bm.forward_backward(b)
    bm.update()
args, _ = bm.get_params()
np.savez({str(out)!r}, **{{k: v.asnumpy() for k, v in args.items()}})
""")
    theirs = np.load(out)
    assert sorted(theirs.files) == sorted(ours)
    for k in ours:
        np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-6)


def test_a_bucket_needing_params_that_set_params_did_not_give_is_an_error():
    rng = np.random.RandomState(15)
    bm = m.bucketing_module(deep_lm_gen(5), default_bucket_key=10)
    m.bind(bm, data_shapes=[("data", (BATCH, 10))], label_shapes=[("softmax_label", (BATCH, 10))])
    src = _trained_bm()
    m.set_params(bm, arg_params=m.get_params(src)[0])  # no init_params, no allow_missing
    with pytest.raises(mx.MXFNError, match=r"bucket 5 .*\['deep_bias', 'deep_weight'\].*init_params"):
        m.forward(bm, _batch(5, rng))
    assert m.buckets(bm) == [10]
    m.forward(bm, _batch(10, rng), is_train=False)  # the default bucket still works


def test_the_bucket_switched_away_from_releases_its_working_memory():
    """Buckets share working memory: switching releases the pass the bucket left kept for its
    backward (outputs included), so only the current bucket holds one; the left bucket works
    again after a forward."""
    rng = np.random.RandomState(8)
    bm = _trained_bm(default=10)
    m.forward_backward(bm, _batch(10, rng))
    m.update(bm)
    m.forward_backward(bm, _batch(5, rng))
    left = m.bucket_module(bm, 10)
    with pytest.raises(mx.MXFNError, match="forward"):
        m.outputs(left)
    with pytest.raises(mx.MXFNError, match="forward"):
        m.backward(left)
    assert m.outputs_merged(bm)[0].shape == (BATCH * 5, VOCAB)
    m.update(bm)
    m.forward_backward(bm, _batch(10, rng))  # back to the released bucket
    assert m.outputs_merged(bm)[0].shape == (BATCH * 10, VOCAB)
    m.update(bm)
