"""Ports of the Clojure package's module_test.clj scenarios (and of MXNet's test_module.py
optimizer-state and fit/score/predict cases) against ``mx.module``."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import module as m
from mxfn import sym

TWO = [mx.cpu(0), mx.cpu(1)]
SGD = {"learning_rate": 0.1, "momentum": 0.9}


def _tnc_relu():
    return sym.activation(sym.variable("data"), act_type="relu", name="act", attr={"__layout__": "TNC"})


# -- test-model-dtype -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_dtype_two_contexts_tnc(dtype):
    # test_module.py's test_module_dtype: outputs and input gradients keep the data's dtype.
    dshape = (3, 8, 7)
    mod = m.module(_tnc_relu(), label_names=None, contexts=TWO)
    m.bind(mod, data_shapes=[mx.io.data_desc("data", dshape, dtype=dtype, layout="TNC")],
           inputs_need_grad=True)
    m.init_params(mod)
    x = np.random.RandomState(0).uniform(-1, 1, dshape).astype(dtype)
    m.forward(mod, {"data": [mx.nd.array(x, dtype=dtype)]})
    m.backward(mod, [mx.nd.ones(dshape, dtype=dtype)])
    outs = [o for per in m.outputs(mod) for o in per]
    assert len(outs) == 2
    assert all(o.dtype == np.dtype(dtype) for o in outs)
    # float64 computes at float32 precision (the ops' kernels are float32).
    np.testing.assert_allclose(m.outputs_merged(mod)[0].asnumpy(), np.maximum(x, 0), rtol=1e-6)
    (grad,) = m.input_grads_merged(mod)
    assert grad.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(grad.asnumpy(), (x > 0).astype(dtype))


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_dtype_params_follow_the_data_and_train(dtype):
    # Params take the data's dtype (MXNet's type inference); ops and optimizer compute in
    # float32 and write back in that dtype.
    rng = np.random.RandomState(1)
    x = rng.uniform(-1, 1, (20, 3)).astype(dtype)
    y = (x[:, 0] > 0).astype(dtype)
    net = sym.softmax_output(sym.fully_connected(sym.variable("data"), num_hidden=2, name="fc"),
                             name="softmax")
    mod = m.module(net, contexts=TWO)
    m.bind(mod, data_shapes=[mx.io.data_desc("data", (20, 3), dtype=dtype)],
           label_shapes=[mx.io.data_desc("softmax_label", (20,), dtype=dtype)])
    m.init_params(mod, initializer=mx.initializer.xavier())
    m.init_optimizer(mod, optimizer_params={"learning_rate": 0.5})
    assert m.arg_params(mod)["fc_weight"].dtype == np.dtype(dtype)
    batch = {"data": [mx.nd.array(x, dtype=dtype)], "label": [mx.nd.array(y, dtype=dtype)]}
    for _ in range(30):
        m.forward_backward(mod, batch)
        m.update(mod)
    assert all(a.dtype == np.dtype(dtype) for a in m.arg_params(mod).values())
    m.forward(mod, batch, is_train=False)
    (out,) = m.outputs_merged(mod)
    assert out.dtype == np.dtype(dtype)
    assert (out.asnumpy().argmax(axis=1) == y).mean() >= 0.9


# -- test-module-input-grads ----------------------------------------------------------------

def _abc_module(contexts):
    a, b, c = (sym.variable(n, attr={"__layout__": "NC"}) for n in "abc")
    net = a + (b * 2 + c * 3)
    mod = m.module(net, data_names=["b", "c", "a"], label_names=None, contexts=contexts)
    m.bind(mod, data_shapes=[mx.io.data_desc(n, (5, 5), layout="NC") for n in ("b", "c", "a")],
           inputs_need_grad=True)
    m.init_params(mod)
    rng = np.random.default_rng(0)
    data = [rng.normal(size=(5, 5)).astype(np.float32) for _ in range(3)]
    m.forward(mod, {"data": data}, is_train=True)
    m.backward(mod, [np.ones((5, 5), np.float32)])
    return mod


def test_input_grads_two_contexts():
    mod = _abc_module(TWO)
    b_grad, c_grad, a_grad = (g.asnumpy() for g in m.input_grads_merged(mod))  # data_names order
    np.testing.assert_array_equal(a_grad, np.full((5, 5), 1.0))
    np.testing.assert_array_equal(b_grad, np.full((5, 5), 2.0))
    np.testing.assert_array_equal(c_grad, np.full((5, 5), 3.0))
    per_device = m.input_grads(mod)
    assert [len(per) for per in per_device] == [2, 2, 2]
    assert sum(g.shape[0] for g in per_device[0]) == 5
    single = _abc_module([mx.cpu(0)])
    for g2, g1 in zip(m.input_grads_merged(mod), m.input_grads_merged(single)):
        np.testing.assert_array_equal(g2.asnumpy(), g1.asnumpy())


# -- test-module-layout ---------------------------------------------------------------------

def test_layout_tnc_splits_and_merges_along_axis_1():
    # Fixed in the core: outputs were merged (and out_grads split) along axis 0 whatever the
    # output's __layout__; MXNet uses the layout's N axis.
    dshape = (3, 8, 7)
    mod = m.module(_tnc_relu(), label_names=None, contexts=TWO)
    m.bind(mod, data_shapes=[mx.io.data_desc("data", dshape, layout="TNC")], inputs_need_grad=True)
    m.init_params(mod)
    x = np.arange(np.prod(dshape), dtype=np.float32).reshape(dshape) - 80
    m.forward(mod, {"data": [x]})
    m.backward(mod, [np.ones(dshape, np.float32)])
    merged = m.outputs_merged(mod)
    assert merged[0].shape == dshape
    np.testing.assert_array_equal(merged[0].asnumpy(), np.maximum(x, 0))
    assert all(o.shape == (3, 4, 7) for per in m.outputs(mod) for o in per)
    np.testing.assert_array_equal(m.input_grads_merged(mod)[0].asnumpy(), (x > 0).astype(np.float32))


def test_layout_nc_default():
    net = sym.fully_connected(sym.variable("data"), num_hidden=3, name="fc")
    mod = m.module(net, label_names=None, contexts=TWO)
    m.bind(mod, data_shapes=[mx.io.data_desc("data", (6, 4), layout="NC")])
    m.init_params(mod)
    m.forward(mod, {"data": [np.ones((6, 4), np.float32)]})
    assert m.outputs_merged(mod)[0].shape == (6, 3)
    assert [o.shape for o in m.outputs(mod)[0]] == [(3, 3), (3, 3)]


# -- test-module-save-load ------------------------------------------------------------------

@pytest.mark.parametrize("contexts", [[mx.cpu(0)], TWO], ids=["one_device", "two_devices"])
def test_save_load_checkpoint_with_optimizer_states(tmp_path, contexts):
    net = sym.fully_connected(sym.variable("data"), num_hidden=10, name="fc")
    x = np.random.default_rng(1).normal(size=(10, 10)).astype(np.float32)
    batch = {"data": [x]}
    mod = m.module(net, label_names=None, contexts=contexts)
    m.bind(mod, data_shapes=[("data", (10, 10))])
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer=mx.optimizer.sgd(learning_rate=0.1, momentum=0.9))
    m.update(mod)  # as the Clojure test: an update with zero gradients
    m.forward(mod, batch)
    m.backward(mod, [np.ones((10, 10), np.float32)])
    m.update(mod)
    prefix = str(tmp_path / "test")
    m.save_checkpoint(mod, prefix=prefix, epoch=0, save_opt_states=True)

    mod2 = m.load_checkpoint(prefix=prefix, epoch=0, load_optimizer_states=True, contexts=contexts)
    m.bind(mod2, data_shapes=[("data", (10, 10))])
    m.init_optimizer(mod2, optimizer=mx.optimizer.sgd(learning_rate=0.1, momentum=0.9))
    assert m.symbol(mod).tojson() == m.symbol(mod2).tojson()
    p1, p2 = m.arg_params(mod), m.arg_params(mod2)
    assert sorted(p1) == sorted(p2)
    for k in p1:
        np.testing.assert_array_equal(p1[k].asnumpy(), p2[k].asnumpy())
    # The momentum came back too: the next identical step gives identical params.
    for mm in (mod, mod2):
        m.forward(mm, batch)
        m.backward(mm, [np.ones((10, 10), np.float32)])
        m.update(mm)
    for k, v in m.arg_params(mod).items():
        np.testing.assert_allclose(v.asnumpy(), m.arg_params(mod2)[k].asnumpy(), rtol=1e-6, atol=1e-7)


# -- MXNet test_module.py: optimizer states round trip ---------------------------------------

def test_optimizer_states_round_trip(tmp_path):
    # SGD with momentum: its whole state is the momentum (an update-count dependent rule such
    # as Adam also needs the optimizer's counters, which MXNet's .states do not hold either).
    x = np.random.default_rng(2).uniform(-1, 1, (8, 5)).astype(np.float32)
    y = np.argmax(x[:, :3], axis=1).astype(np.float32)
    batch = mx.io.data_batch(data=[x], label=[y])

    def make():
        h = sym.fully_connected(sym.variable("data"), num_hidden=3, name="fc")
        mod = m.module(sym.softmax_output(h, name="softmax"))
        m.bind(mod, data_shapes=[("data", (8, 5))], label_shapes=[("softmax_label", (8,))])
        return mod

    mod = make()
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer="sgd", optimizer_params=SGD)
    for _ in range(3):
        m.update(m.forward_backward(mod, batch))
    fname = str(tmp_path / "mod.states")
    m.save_optimizer_states(mod, fname)

    mod2 = make()
    arg, aux = m.get_params(mod)
    m.init_params(mod2, arg_params=arg, aux_params=aux)
    m.init_optimizer(mod2, optimizer="sgd", optimizer_params=SGD)
    m.load_optimizer_states(mod2, fname)
    fresh = make()
    m.init_params(fresh, arg_params=arg, aux_params=aux)
    m.init_optimizer(fresh, optimizer="sgd", optimizer_params=SGD)
    for mm in (mod, mod2, fresh):
        m.update(m.forward_backward(mm, batch))
    w, w2, w0 = (m.arg_params(mm)["fc_weight"].asnumpy() for mm in (mod, mod2, fresh))
    np.testing.assert_allclose(w2, w, rtol=1e-6, atol=1e-7)
    assert not np.allclose(w0, w, rtol=1e-6, atol=1e-7)  # the states mattered


# -- test-module-reshape --------------------------------------------------------------------

def test_reshape_keeps_params_and_rescale():
    net = sym.fully_connected(sym.variable("data"), num_hidden=20, name="fc")
    mod = m.module(net, label_names=None, contexts=TWO)
    dshape = (7, 20)
    m.bind(mod, data_shapes=[("data", dshape)])
    m.init_params(mod)
    m.init_optimizer(mod, optimizer=mx.optimizer.sgd(learning_rate=1.0))
    m.forward(mod, {"data": [np.ones(dshape, np.float32)]})
    m.backward(mod, [np.ones(dshape, np.float32)])
    m.update(mod)
    assert m.outputs_merged(mod)[0].shape == dshape
    np.testing.assert_allclose(m.arg_params(mod)["fc_bias"].asnumpy(), -1.0, rtol=1e-6)

    dshape = (14, 20)
    m.reshape(mod, [("data", dshape)])
    m.forward(mod, {"data": [np.ones(dshape, np.float32)]})
    m.backward(mod, [np.ones(dshape, np.float32)])
    m.update(mod)
    assert m.outputs_merged(mod)[0].shape == dshape
    np.testing.assert_allclose(m.arg_params(mod)["fc_bias"].asnumpy(), -3.0, rtol=1e-5)


# -- test-module-set-params -----------------------------------------------------------------

def test_set_params_missing_and_extra():
    data = np.array([0.05, 0.1], np.float32).reshape(1, 1, 1, 2)
    label = np.array([0.01, 0.99], np.float32).reshape(1, 1, 1, 2)
    train = mx.io.ndarray_iter(data, label=label, batch_size=1, label_name="softmax_label")
    x = sym.activation(sym.fully_connected(sym.variable("data"), num_hidden=2, name="fc_0"),
                       act_type="sigmoid", name="act_0")
    x = sym.activation(sym.fully_connected(x, num_hidden=2, name="fc_1"), act_type="sigmoid", name="act_1")
    mod = m.module(sym.linear_regression_output(x, name="softmax", grad_scale=2))
    m.bind(mod, data_shapes=mx.io.provide_data(train), label_shapes=mx.io.provide_label(train))

    correct = {"fc_0_weight": np.array([[0.15, 0.2], [0.25, 0.3]], np.float32),
               "fc_0_bias": np.array([0.35, 0.35], np.float32),
               "fc_1_weight": np.array([[0.4, 0.45], [0.5, 0.55]], np.float32),
               "fc_1_bias": np.array([0.6, 0.6], np.float32)}
    missing = {k: v * 2 for k, v in correct.items() if k != "fc_1_bias"}
    extra = {**correct, "fc_2_weight": np.array([0.6, 0.6], np.float32)}

    m.set_params(mod, arg_params=correct, force_init=True)
    for k, v in correct.items():
        np.testing.assert_array_equal(m.arg_params(mod)[k].asnumpy(), v)
    # allow_missing: fc_1_bias keeps its value (SPEC §8), the others are set.
    m.set_params(mod, arg_params=missing, allow_missing=True, force_init=True)
    np.testing.assert_array_equal(m.arg_params(mod)["fc_1_bias"].asnumpy(), correct["fc_1_bias"])
    np.testing.assert_array_equal(m.arg_params(mod)["fc_0_weight"].asnumpy(), missing["fc_0_weight"])
    with pytest.raises(mx.MXFNError, match="fc_1_bias"):
        m.set_params(mod, arg_params=missing, allow_missing=False, force_init=True)
    # allow_extra
    m.set_params(mod, arg_params=extra, force_init=True, allow_missing=True, allow_extra=True)
    np.testing.assert_array_equal(m.arg_params(mod)["fc_0_weight"].asnumpy(), correct["fc_0_weight"])
    assert "fc_2_weight" not in m.arg_params(mod)
    with pytest.raises(mx.MXFNError, match="fc_2_weight"):
        m.set_params(mod, arg_params=extra, force_init=True, allow_missing=True, allow_extra=False)
    # The set values are the ones the module computes with (the classic back-prop example).
    m.forward(mod, next(iter(train)), is_train=False)
    np.testing.assert_allclose(m.outputs_merged(mod)[0].asnumpy().ravel(), [0.75136507, 0.772928465], rtol=1e-5)


# -- test-monitor ---------------------------------------------------------------------------

def test_monitor_sees_every_op_output():
    x = sym.activation(sym.fully_connected(sym.variable("data"), num_hidden=2, name="fc_0"),
                       act_type="sigmoid", name="act_0")
    x = sym.activation(sym.fully_connected(x, num_hidden=2, name="fc_1"), act_type="sigmoid", name="act_1")
    mod = m.module(sym.linear_regression_output(x, name="softmax", grad_scale=2))
    mon = mx.monitor.monitor(1)
    m.install_monitor(mod, mon)
    m.bind(mod, data_shapes=[("data", (1, 1, 1, 2))], label_shapes=[("softmax_label", (1, 1, 1, 2))])
    m.init_params(mod)
    batch = {"data": [np.array([0.05, 0.1], np.float32).reshape(1, 1, 1, 2)],
             "label": [np.array([0.01, 0.99], np.float32).reshape(1, 1, 1, 2)]}
    mx.monitor.tic(mon)
    m.forward_backward(mod, batch)
    names = [name for _, name, _ in mx.monitor.toc(mon)]
    for node in ("fc_0", "act_0", "fc_1", "act_1", "softmax"):
        assert names.count(f"{node}_output") == 1, names
    # Outside fit too, toc reports the params and their gradients (MXNet's arguments + grads).
    for p in ("fc_0_weight", "fc_0_bias", "fc_1_weight", "fc_1_bias"):
        assert names.count(p) == 1 and names.count(f"{p}_grad") == 1, names
    # The monitor stays installed across a rebind (new batch size).
    m.bind(mod, data_shapes=[("data", (2, 1, 1, 2))], label_shapes=[("softmax_label", (2, 1, 1, 2))],
           force_rebind=True)
    mx.monitor.tic(mon)
    m.forward(mod, {"data": [np.ones((2, 1, 1, 2), np.float32)]}, is_train=False)
    assert "act_1_output" in [name for _, name, _ in mx.monitor.toc(mon)]


# -- test-forward-reshape -------------------------------------------------------------------

def test_forward_with_changing_shapes_reshapes():
    num_class = 10
    conv1 = sym.convolution(sym.variable("data1"), kernel=(2, 2), num_filter=2, stride=(2, 2), name="conv1")
    conv2 = sym.convolution(sym.variable("data2"), kernel=(3, 3), num_filter=3, stride=(1, 1), name="conv2")
    pool1 = sym.pooling(conv1, kernel=(2, 2), pool_type="avg", stride=(1, 1), name="pool1")
    pool2 = sym.pooling(conv2, kernel=(2, 2), pool_type="max", stride=(1, 1), name="pool2")
    total = sym.sum(sym.flatten(pool1), axis=1) + sym.sum(sym.flatten(pool2), axis=1)
    net = sym.softmax_output(sym.fully_connected(total, num_hidden=num_class, name="fc"), name="softmax")
    mod = m.module(net, data_names=["data1", "data2"])
    m.bind(mod, data_shapes=[("data1", (10, 3, 64, 64)), ("data2", (10, 3, 32, 32))],
           label_shapes=[("softmax_label", (10,))])
    m.init_params(mod)
    m.init_optimizer(mod)
    rng = np.random.default_rng(3)

    def batch(s1, s2, n):
        return mx.io.data_batch(data=[rng.uniform(0, 9, s1).astype(np.float32),
                                      rng.uniform(5, 15, s2).astype(np.float32)],
                                label=[np.ones(n, np.float32)])

    shapes = [((10, 3, 64, 64), (10, 3, 32, 32)),   # the bound shapes
              ((3, 3, 64, 64), (3, 3, 32, 32)),     # another batch size
              ((20, 3, 64, 64), (20, 3, 32, 32)),
              ((20, 3, 120, 120), (20, 3, 32, 64)),  # batch size and data shapes
              ((5, 3, 28, 40), (5, 3, 24, 16))]
    for s1, s2 in shapes:
        m.update(m.backward(m.forward(mod, batch(s1, s2, s1[0]))))
        assert m.outputs_merged(mod)[0].shape == (s1[0], num_class)
        assert tuple(m.data_shapes(mod)[0]["shape"]) == s1
    # score (forward, is_train=False) with new shapes
    b = batch((10, 3, 30, 30), (10, 3, 20, 40), 10)
    m.forward(mod, b, is_train=False)
    acc = mx.metric.accuracy()
    m.update_metric(mod, acc, [np.ones(10, np.float32)])
    assert 0.0 <= mx.metric.get(acc)[1] <= 1.0
    assert m.outputs_merged(mod)[0].shape == (10, num_class)
    # predict on a single sample with yet other shapes
    b = mx.io.data_batch(data=[rng.uniform(0, 9, (1, 3, 30, 30)).astype(np.float32),
                               rng.uniform(5, 15, (1, 3, 20, 40)).astype(np.float32)])
    assert m.predict_batch(mod, b)[0].shape == (1, num_class)


# -- MXNet test_module.py: fit / score / predict on small data --------------------------------

def test_fit_score_predict_small_data():
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (200, 5)).astype(np.float32)
    y = np.argmax(x[:, :3], axis=1).astype(np.float32)
    vx = rng.uniform(-1, 1, (50, 5)).astype(np.float32)
    vy = np.argmax(vx[:, :3], axis=1).astype(np.float32)
    train = mx.io.ndarray_iter(x, label=y, batch_size=20, shuffle=True)
    val = mx.io.ndarray_iter(vx, label=vy, batch_size=20)  # last batch padded by 10
    h = sym.activation(sym.fully_connected(sym.variable("data"), num_hidden=16, name="fc1"),
                       act_type="relu", name="relu1")
    net = sym.softmax_output(sym.fully_connected(h, num_hidden=3, name="fc2"), name="softmax")
    mod = m.module(net, contexts=TWO)
    m.fit(mod, train, eval_data=val, num_epoch=10, initializer=mx.init.xavier(),
          optimizer="sgd", optimizer_params={"learning_rate": 0.5, "momentum": 0.9})
    hist = m.history(mod)
    assert len(hist["train-accuracy"]) == 10 and len(hist["validation-accuracy"]) == 10
    assert hist["train-accuracy"][-1] > 0.85
    (name, acc), = m.score(mod, eval_data=val, eval_metric="acc")
    assert name == "accuracy"
    assert acc == pytest.approx(hist["validation-accuracy"][-1])
    pred, = m.predict(mod, eval_data=val)
    assert pred.shape == (50, 3)  # padding removed
    assert acc == pytest.approx(np.mean(np.argmax(pred.asnumpy(), axis=1) == vy))
    assert acc > 0.8
    # num_batch limits both
    assert m.predict(mod, eval_data=val, num_batch=1)[0].shape == (20, 3)
    assert len(m.predict(mod, eval_data=val, merge_batches=False)) == 3


def test_update_metric_cuts_labels_along_their_batch_axis():
    # Two devices, batch axis 1 (TNC): each device's outputs meet the matching label slice.
    dshape = (3, 8, 7)
    net = sym.linear_regression_output(_tnc_relu(), sym.variable("lbl"), name="lro", attr={"__layout__": "TNC"})
    mod = m.module(net, label_names=["lbl"], contexts=TWO)
    m.bind(mod, data_shapes=[mx.io.data_desc("data", dshape, layout="TNC")],
           label_shapes=[mx.io.data_desc("lbl", dshape, layout="TNC")])
    m.init_params(mod)
    x = np.random.RandomState(3).uniform(-1, 1, dshape).astype(np.float32)
    y = np.maximum(x, 0)
    m.forward(mod, {"data": [x], "label": [y]}, is_train=False)
    native = mx.metric.mse()
    m.update_metric(mod, native, [y])  # a built-in metric: the update runs in the core
    assert mx.metric.get(native) == ("mse", 0.0)
    seen = []

    def max_err(label, pred):
        seen.append(label.shape)
        return float(np.abs(label - pred).max())

    custom = mx.metric.custom_metric(max_err)
    m.update_metric(mod, custom, [mx.nd.array(y)])
    assert seen == [(3, 4, 7), (3, 4, 7)]
    assert mx.metric.get(custom) == ("max_err", 0.0)


# -- bind(shared_module=...) ----------------------------------------------------------------

def _fc_softmax():
    return sym.softmax_output(sym.fully_connected(sym.variable("data"), num_hidden=3, name="fc"), name="softmax")


def test_shared_module_shares_parameters_both_ways():
    rng = np.random.RandomState(4)
    x, y = rng.uniform(-1, 1, (8, 5)).astype(np.float32), (np.arange(8) % 3).astype(np.float32)
    train = m.module(_fc_softmax())
    m.bind(train, data_shapes=[("data", (8, 5))], label_shapes=[("softmax_label", (8,))])
    m.init_params(train)
    m.init_optimizer(train, optimizer_params=SGD)
    # An inference module for another batch size, on the training module's parameters.
    infer = m.module(_fc_softmax())
    m.bind(infer, data_shapes=[("data", (2, 5))], for_training=False, shared_module=train)
    assert m.params_initialized(infer)
    for _ in range(3):
        m.forward_backward(train, {"data": [x], "label": [y]})
        m.update(train)
        # The inference module sees every update of the training module.
        m.forward(infer, {"data": [x[:2]]})
        m.forward(train, {"data": [x], "label": [y]}, is_train=False)
        np.testing.assert_allclose(m.outputs_merged(infer)[0].asnumpy(),
                                   m.outputs_merged(train)[0].asnumpy()[:2], rtol=1e-6)
    for k, v in m.arg_params(train).items():
        np.testing.assert_array_equal(m.arg_params(infer)[k].asnumpy(), v.asnumpy())
    # And the other way round: parameters set through the shared module reach the first one.
    m.set_params(infer, arg_params={k: mx.nd.zeros(v.shape) for k, v in m.arg_params(infer).items()})
    assert all(float(np.abs(v.asnumpy()).max()) == 0.0 for v in m.arg_params(train).values())


def test_shared_module_must_be_bound_and_initialised():
    src = m.module(_fc_softmax())
    mod = m.module(_fc_softmax())
    with pytest.raises(mx.MXFNError, match="shared_module must be bound and initialised; call bind"):
        m.bind(mod, data_shapes=[("data", (2, 5))], shared_module=src)
    with pytest.raises(TypeError, match="shared_module must be a Module, got str"):
        m.bind(mod, data_shapes=[("data", (2, 5))], shared_module="src")


# -- init_optimizer(kvstore=...) ------------------------------------------------------------

def _trained(kvstore):
    rng = np.random.RandomState(5)
    x, y = rng.uniform(-1, 1, (8, 5)).astype(np.float32), (np.arange(8) % 3).astype(np.float32)
    mod = m.module(_fc_softmax(), contexts=TWO)
    m.bind(mod, data_shapes=[("data", (8, 5))], label_shapes=[("softmax_label", (8,))])
    m.init_params(mod, initializer=mx.initializer.constant(0.1))
    m.init_optimizer(mod, kvstore=kvstore, optimizer_params=SGD)
    for _ in range(3):
        m.forward_backward(mod, {"data": [x], "label": [y]})
        m.update(mod)
    return mod


def test_every_kvstore_choice_sums_gradients_the_same_way():
    ref = m.arg_params(_trained("local"))
    kv = mx.kvstore.create("device")
    for choice in ("device", None, kv):
        got = m.arg_params(_trained(choice))
        for k, v in ref.items():
            np.testing.assert_allclose(got[k].asnumpy(), v.asnumpy(), rtol=1e-6, err_msg=f"{choice}: {k}")
    # A kvstore value holds the module's updated parameters by name.
    assert sorted(mx.kvstore.keys(kv)) == ["fc_bias", "fc_weight"]
    for k, v in ref.items():
        np.testing.assert_allclose(mx.kvstore.pull(kv, k).asnumpy(), v.asnumpy(), rtol=1e-6)


def test_unknown_kvstore_names_the_option():
    mod = m.module(_fc_softmax())
    m.bind(mod, data_shapes=[("data", (8, 5))], label_shapes=[("softmax_label", (8,))])
    m.init_params(mod)
    with pytest.raises(mx.MXFNError, match='"kvstore" must be "local", "device", "dist_sync", .*got "nccl"'):
        m.init_optimizer(mod, kvstore="nccl")
    with pytest.raises(TypeError, match='"kvstore" must be a name or an mx.kvstore value, got int'):
        m.init_optimizer(mod, kvstore=3)
