"""mx.module, intermediate level: bind / init_params / init_optimizer / forward / backward /
update, immutability, threading, misuse errors, multi-context, checkpoints (ours and MXNet's),
optimizer states (.states)."""

import json

import numpy as np
import pytest
import toolz

import mxfn as mx
import mxfn.profiler as profiler
from mxfn import module as m
from mxfn import sym

from conftest import conformance_dir

CKPT = conformance_dir() / "checkpoints"


def mlp():
    x = sym.variable("data")
    h = sym.activation(sym.fully_connected(x, num_hidden=16, name="fc1"), act_type="relu", name="relu1")
    return sym.softmax_output(sym.fully_connected(h, num_hidden=3, name="fc2"), name="softmax")


def problem(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, 5)).astype(np.float32)
    return x, np.argmax(x[:, :3], axis=1).astype(np.float32)


def bound(n=64, **kw):
    mod = m.module(mlp(), **kw)
    return m.bind(mod, data_shapes=[("data", (n, 5))], label_shapes=[("softmax_label", (n,))])


def loss(p, y):
    return float(-np.mean(np.log(np.maximum(p[np.arange(len(y)), y.astype(int)], 1e-12))))


def fixed_params():
    rng = np.random.default_rng(7)
    return {"fc1_weight": rng.normal(0, 0.3, (16, 5)).astype(np.float32), "fc1_bias": np.zeros(16, np.float32),
            "fc2_weight": rng.normal(0, 0.3, (3, 16)).astype(np.float32), "fc2_bias": np.zeros(3, np.float32)}


def test_intermediate_loop_reduces_loss_and_metric():
    x, y = problem()
    mod = m.init_params(bound(), initializer=mx.init.xavier())
    m.init_optimizer(mod, {"optimizer": "sgd", "optimizer-params": {"learning_rate": 0.5, "momentum": 0.9}})
    batch = mx.io.data_batch(data=[x], label=[y])
    before = loss(m.outputs_merged(m.forward(mod, batch, is_train=False))[0].asnumpy(), y)
    for _ in range(30):
        m.update(m.forward_backward(mod, batch))
    after = loss(m.outputs_merged(m.forward(mod, batch, is_train=False))[0].asnumpy(), y)
    assert after < 0.7 * before
    acc = mx.metric.accuracy()
    m.update_metric(mod, acc, [y])
    assert mx.metric.get(acc)[1] > 0.6
    assert mx.optimizer.options(m.optimizer(mod))["rescale_grad"] == pytest.approx(1 / 64)
    assert [len(g) for g in m.grad_arrays(mod)] == [1, 1, 1, 1]
    assert m.param_names(mod) == ["fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"]
    assert m.output_shapes(mod) == [("softmax_output", (64, 3))]
    assert [d["shape"] for d in m.data_shapes(mod)] == [(64, 5)]


def test_threading_and_immutability():
    x, y = problem(8)
    x0, y0 = x.copy(), y.copy()
    bind_opts = {"data_shapes": [("data", (8, 5))], "label_shapes": [("softmax_label", (8,))]}
    init_opts = {"arg_params": fixed_params()}
    snapshot = {k: v.copy() for k, v in init_opts["arg_params"].items()}
    batch = {"data": [x], "label": [y]}
    mod = toolz.thread_first(m.module(mlp()), (m.bind, bind_opts), (m.init_params, init_opts),
                             (m.init_optimizer, {"optimizer_params": {"learning_rate": 0.1}}),
                             (m.forward_backward, batch), m.update)
    assert isinstance(mod, m.Module)
    assert bind_opts == {"data_shapes": [("data", (8, 5))], "label_shapes": [("softmax_label", (8,))]}
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)
    for k, v in snapshot.items():
        np.testing.assert_array_equal(init_opts["arg_params"][k], v)
    # get_params returns copies
    a, _ = m.get_params(mod)
    a2, _ = m.params(mod)
    np.testing.assert_array_equal(a["fc1_weight"].asnumpy(), a2["fc1_weight"].asnumpy())
    assert not np.allclose(a["fc1_weight"].asnumpy(), snapshot["fc1_weight"])


def test_misuse_errors():
    x, y = problem(4)
    batch = {"data": [x], "label": [y]}
    mod = m.module(mlp())
    for f in (lambda: m.forward(mod, batch), lambda: m.backward(mod), lambda: m.update(mod),
              lambda: m.outputs(mod)):
        with pytest.raises(mx.MXFNError, match="bind"):
            f()
    m.bind(mod, data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))])
    with pytest.raises(mx.MXFNError, match="init_params"):
        m.forward(mod, batch)
    p = fixed_params()
    with pytest.raises(mx.MXFNError, match="fc2_bias"):
        m.init_params(mod, arg_params={k: v for k, v in p.items() if k != "fc2_bias"})
    with pytest.raises(mx.MXFNError, match="bogus_weight"):
        m.init_params(mod, arg_params={**p, "bogus_weight": np.zeros(3)})
    with pytest.raises(mx.MXFNError, match=r"fc1_weight.*\(16, 5\).*\(4, 4\)"):
        m.init_params(mod, arg_params={**p, "fc1_weight": np.zeros((4, 4))})
    m.init_params(mod, arg_params={**p, "bogus_weight": np.zeros(3)}, allow_extra=True)
    m.forward(mod, batch)
    with pytest.raises(mx.MXFNError, match="init_optimizer"):
        m.update(mod)
    with pytest.raises(mx.MXFNError, match="optimizer_params"):
        m.init_optimizer(mod, optimizer=mx.optimizer.sgd(), optimizer_params={"learning_rate": 0.1})
    with pytest.raises(mx.MXFNError, match="data_shape"):
        m.bind(mod, data_shape=[("data", (4, 5))])
    with pytest.raises(mx.MXFNError, match="data_shapes"):
        m.bind(mod, {})
    with pytest.raises(TypeError):
        m.forward("not a module", batch)
    # bind twice is a no-op unless force_rebind; params survive a forced rebind
    m.bind(mod, data_shapes=[("data", (6, 5))])
    assert m.data_shapes(mod)[0]["shape"] == (4, 5)
    m.bind(mod, data_shapes=[("data", (6, 5))], label_shapes=[("softmax_label", (6,))], force_rebind=True)
    np.testing.assert_allclose(m.arg_params(mod)["fc1_weight"].asnumpy(), p["fc1_weight"])
    # an unknown label name is dropped
    assert m.label_names(m.module(mlp(), label_names=["softmax_label", "nope"])) == ["softmax_label"]


def test_set_params_and_init_once():
    mod = bound(4)
    m.init_params(mod)
    w = m.arg_params(mod)["fc1_weight"].asnumpy()
    m.init_params(mod)  # no-op
    np.testing.assert_array_equal(m.arg_params(mod)["fc1_weight"].asnumpy(), w)
    p = fixed_params()
    m.set_params(mod, arg_params={"fc2_bias": np.ones(3)}, allow_missing=True)
    a = m.arg_params(mod)
    np.testing.assert_array_equal(a["fc1_weight"].asnumpy(), w)
    np.testing.assert_array_equal(a["fc2_bias"].asnumpy(), np.ones(3))
    m.set_params(mod, {"arg_params": p})
    np.testing.assert_allclose(m.arg_params(mod)["fc2_weight"].asnumpy(), p["fc2_weight"])
    with pytest.raises(mx.MXFNError, match="fc1_bias"):
        m.set_params(mod, arg_params={"fc1_weight": p["fc1_weight"]})


@pytest.mark.parametrize("workload", [None, [2, 1]])
def test_two_contexts_match_one(workload):
    x, y = problem(12)
    batch = {"data": [x], "label": [y]}
    mods = [bound(12), bound(12, contexts=[mx.cpu(0), mx.cpu(1)], workload_list=workload)]
    for mod in mods:
        m.init_params(mod, arg_params=fixed_params())
        m.init_optimizer(mod, optimizer=mx.optimizer.sgd(learning_rate=0.1, momentum=0.9))
        for _ in range(3):
            m.update(m.forward_backward(mod, batch))
        m.forward(mod, batch, is_train=False)
    one, two = mods
    assert len(m.outputs(two)[0]) == 2 and len(m.contexts(two)) == 2
    np.testing.assert_allclose(m.outputs_merged(two)[0].asnumpy(), m.outputs_merged(one)[0].asnumpy(),
                               rtol=1e-5, atol=1e-6)
    for k, v in m.arg_params(one).items():
        np.testing.assert_allclose(m.arg_params(two)[k].asnumpy(), v.asnumpy(), rtol=1e-5, atol=1e-6)


def test_input_grads_and_reshape():
    x, y = problem(6)
    mod = m.module(mlp())
    m.bind(mod, data_shapes=[mx.io.data_desc("data", (6, 5))], label_shapes=[("softmax_label", (6,))],
           inputs_need_grad=True)
    m.init_params(mod, arg_params=fixed_params())
    m.forward_backward(mod, {"data": [x], "label": [y]})
    g = m.input_grads_merged(mod)[0]
    assert g.shape == (6, 5) and np.abs(g.asnumpy()).sum() > 0
    assert len(m.input_grads(mod)[0]) == 1
    out6 = m.outputs_merged(m.forward(mod, {"data": [x]}, is_train=False))[0].asnumpy()
    m.reshape(mod, [("data", (3, 5))], [("softmax_label", (3,))])
    out3 = m.outputs_merged(m.forward(mod, {"data": [x[:3]], "label": [y[:3]]}, is_train=False))[0].asnumpy()
    np.testing.assert_allclose(out3, out6[:3], rtol=1e-6)
    # a batch of another size reshapes on its own
    out2 = m.outputs_merged(m.forward(mod, {"data": [x[:2]]}, is_train=False))[0].asnumpy()
    np.testing.assert_allclose(out2, out6[:2], rtol=1e-6)


def test_checkpoint_round_trip(tmp_path):
    x, y = problem(8)
    mod = bound(8)
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer="sgd", optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    m.update(m.forward_backward(mod, {"data": [x], "label": [y]}))
    want = m.outputs_merged(m.forward(mod, {"data": [x]}, is_train=False))[0].asnumpy()
    prefix = str(tmp_path / "net")
    assert m.save_checkpoint(mod, prefix=prefix, epoch=2, save_optimizer_states=True) is mod
    for f in ("net-symbol.json", "net-0002.params", "net-0002.states"):
        assert (tmp_path / f).exists()
    loaded = m.load_checkpoint(prefix, 2, {"load_optimizer_states": True})
    m.bind(loaded, data_shapes=[("data", (8, 5))], label_shapes=[("softmax_label", (8,))])
    got = m.outputs_merged(m.forward(loaded, {"data": [x]}, is_train=False))[0].asnumpy()
    np.testing.assert_array_equal(got, want)
    # resuming with the saved momentum gives the same next step as continuing
    m.init_optimizer(loaded, optimizer="sgd", optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    for mm in (mod, loaded):
        m.update(m.forward_backward(mm, {"data": [x], "label": [y]}))
    for k, v in m.arg_params(mod).items():
        np.testing.assert_allclose(m.arg_params(loaded)[k].asnumpy(), v.asnumpy(), rtol=1e-6, atol=1e-7)
    also = m.load_checkpoint({"prefix": prefix, "epoch": 2})
    assert m.label_names(also) == ["softmax_label"]


CASES = [("mlp", 1), ("lenet", 2), ("bnnet", 3), ("legacy_v0800", 0), ("legacy_v0903", 0)]


@pytest.mark.parametrize("name,epoch", CASES)
def test_mxnet_checkpoints_predict_their_outputs(name, epoch):
    io = np.load(CKPT / f"{name}-io.npz")
    mod = m.load_checkpoint(str(CKPT / name), epoch)
    m.bind(mod, data_shapes=[("data", io["data"].shape)], for_training=False)
    outs = m.outputs_merged(m.forward(mod, {"data": [io["data"]]}))
    for i, o in enumerate(outs):
        np.testing.assert_allclose(o.asnumpy(), io[f"out:{i}"], rtol=1e-4, atol=1e-5)


def test_mxnet_states_resume_reproduces_next_step():
    z = np.load(CKPT / "mlp-resume.npz")
    mod = m.load_checkpoint(str(CKPT / "mlp"), 1, load_optimizer_states=True)
    m.bind(mod, data_shapes=[("data", z["data"].shape)], label_shapes=[("softmax_label", z["softmax_label"].shape)])
    m.init_optimizer(mod, optimizer="sgd", optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    m.forward_backward(mod, {"data": [z["data"]], "label": [z["softmax_label"]]})
    np.testing.assert_allclose(m.outputs_merged(mod)[0].asnumpy(), z["train_out:0"], rtol=1e-4, atol=1e-6)
    m.update(mod)
    for k, v in m.arg_params(mod).items():
        np.testing.assert_allclose(v.asnumpy(), z[f"arg:{k}"], rtol=1e-4, atol=1e-6)


def test_states_file_round_trips_byte_for_byte(tmp_path):
    mod = m.load_checkpoint(str(CKPT / "mlp"), 1, load_optimizer_states=True)
    m.bind(mod, data_shapes=[("data", (10, 784))], label_shapes=[("softmax_label", (10,))])
    m.init_optimizer(mod, optimizer="sgd", optimizer_params={"learning_rate": 0.1, "momentum": 0.9})
    m.save_optimizer_states(mod, tmp_path / "x.states")
    assert (tmp_path / "x.states").read_bytes() == (CKPT / "mlp-0001.states").read_bytes()


def test_states_unpickler_is_restricted(tmp_path):
    import os
    import pickle
    good = (CKPT / "mlp-0001.states").read_bytes()
    cases = [
        (pickle.dumps({0: os.getcwd}, protocol=4), "the pickle references posix.getcwd; a .states file may only hold"),
        (good[: len(good) // 2], "ends early"),
        (b"not a pickle at all", "not allowed in a .states file"),
        (pickle.dumps({"fc1_weight": None}, protocol=4), "keyed by name"),
        (b"", "ends early"),
    ]
    mod = m.load_checkpoint(str(CKPT / "mlp"), 1)
    for i, (data, want) in enumerate(cases):
        bad = tmp_path / f"bad{i}.states"
        bad.write_bytes(data)
        with pytest.raises(mx.MXFNError) as e:
            m.load_optimizer_states(mod, bad)
        assert str(e.value).startswith(f"module.load_optimizer_states: {bad}: "), str(e.value)
        assert want in str(e.value), str(e.value)
    with pytest.raises(FileNotFoundError, match="module.load_optimizer_states: .*missing.states"):
        m.load_optimizer_states(mod, tmp_path / "missing.states")
    with pytest.raises(mx.MXFNError, match="module.save_optimizer_states: .*call init_optimizer first"):
        m.save_optimizer_states(mod, tmp_path / "x.states")


def test_mxnet_loads_our_checkpoint_and_states(tmp_path, mxnet_python):
    x, y = problem(8)
    mod = bound(8)
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer="adam", optimizer_params={"learning_rate": 0.01})
    m.update(m.forward_backward(mod, {"data": [x], "label": [y]}))
    want = m.outputs_merged(m.forward(mod, {"data": [x]}, is_train=False))[0].asnumpy()
    prefix = str(tmp_path / "ours")
    m.save_checkpoint(mod, prefix=prefix, epoch=1, save_opt_states=True)
    np.save(tmp_path / "x.npy", x)
    out = mxnet_python(f"""
import json, pickle, numpy as np, mxnet as mx
sym, arg, aux = mx.model.load_checkpoint({prefix!r}, 1)
mod = mx.mod.Module(sym, context=mx.cpu())
mod.bind(data_shapes=[("data", (8, 5))], for_training=False)
mod.set_params(arg, aux)
x = np.load({str(tmp_path / "x.npy")!r})
mod.forward(mx.io.DataBatch([mx.nd.array(x)]), is_train=False)
st = pickle.loads(open({prefix + "-0001.states"!r}, "rb").read())
print(json.dumps({{"out": mod.get_outputs()[0].asnumpy().tolist(),
                  "states": {{str(k): [list(a.shape) for a in v] for k, v in st.items()}}}}))
""")
    got = json.loads(out)
    np.testing.assert_allclose(np.array(got["out"]), want, rtol=1e-5, atol=1e-6)
    assert got["states"]["0"] == [[16, 5], [16, 5]]


def test_mxnet_module_resumes_from_our_states(tmp_path, mxnet_python):
    # MXNet's own Module.load(..., load_optimizer_states=True) takes our momentum, and its next
    # step equals ours.
    x, y = problem(8)
    sgd = {"learning_rate": 0.1, "momentum": 0.9}
    rng = np.random.default_rng(3)  # not the global RNG, which later tests' data depend on
    shapes = {"fc1_weight": (16, 5), "fc1_bias": (16,), "fc2_weight": (3, 16), "fc2_bias": (3,)}
    mod = bound(8)
    m.init_params(mod, arg_params={k: rng.normal(0, 0.5, s).astype(np.float32) for k, s in shapes.items()})
    m.init_optimizer(mod, optimizer="sgd", optimizer_params=sgd)
    m.update(m.forward_backward(mod, {"data": [x], "label": [y]}))
    prefix = str(tmp_path / "ours")
    m.save_checkpoint(mod, prefix=prefix, epoch=1, save_opt_states=True)
    m.update(m.forward_backward(mod, {"data": [x], "label": [y]}))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    out = mxnet_python(f"""
import json, numpy as np, mxnet as mx
mod = mx.mod.Module.load({prefix!r}, 1, load_optimizer_states=True)
mod.bind(data_shapes=[("data", (8, 5))], label_shapes=[("softmax_label", (8,))])
mod.init_optimizer(optimizer="sgd", optimizer_params={sgd!r})
x, y = np.load({str(tmp_path / "x.npy")!r}), np.load({str(tmp_path / "y.npy")!r})
mod.forward_backward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.array(y)]))
mod.update()
print(json.dumps({{k: v.asnumpy().tolist() for k, v in mod.get_params()[0].items()}}))
""")
    got = json.loads(out)
    for k, v in m.arg_params(mod).items():
        np.testing.assert_allclose(np.array(got[k]), v.asnumpy(), rtol=1e-5, atol=1e-6)


def test_install_monitor_collects_op_outputs():
    x, y = problem(4)
    from mxfn import monitor as mxmon
    mon = mxmon.monitor(1, pattern=".*output")
    mod = m.install_monitor(m.init_params(bound(4), arg_params=fixed_params()), mon)
    mxmon.tic(mon)
    m.forward(mod, {"data": [x], "label": [y]}, is_train=False)
    names = [n for _, n, _ in mxmon.toc(mon)]
    assert "fc1_output" in names and "softmax_output" in names
    m.install_monitor(mod, None)
    mxmon.tic(mon)
    m.forward(mod, {"data": [x]}, is_train=False)
    assert mxmon.toc(mon) == []


def test_lifecycle_message_says_what_to_call_first():
    with pytest.raises(mx.MXFNError, match="module.forward: the module is not bound: call bind first"):
        m.forward(m.module(mlp()), {"data": [np.zeros((4, 5))]})


def test_gpu_context_is_refused_at_bind():
    mod = m.module(mlp(), contexts=mx.gpu(0))
    with pytest.raises(mx.MXFNError, match="GPU"):
        m.bind(mod, data_shapes=[("data", (4, 5))])


def test_repr_of_modules_shared_and_not():
    mod = m.init_params(bound(4), arg_params=fixed_params())
    assert repr(m.module(mlp())) == (
        "Module(data_names=['data'], label_names=['softmax_label'], output_names=['softmax_output'], "
        "bound=False, params_initialized=False, optimizer_initialized=False)")
    assert "bound=True, params_initialized=True" in repr(mod)
    shared = m.bind(m.module(mlp()), data_shapes=[("data", (4, 5))], label_shapes=[("softmax_label", (4,))],
                    shared_module=mod)
    assert repr(shared).startswith("Module(data_names=['data']")
    assert repr(shared._share).startswith("_ShareGroup(owner=Module(")


def wide_convnet():
    x = sym.variable("data")
    c = sym.activation(sym.convolution(x, num_filter=16, kernel=(3, 3), pad=(1, 1), name="c1"), act_type="relu")
    p = sym.pooling(c, kernel=(1, 1), global_pool=True, pool_type="avg")
    return sym.softmax_output(sym.fully_connected(p, num_hidden=4, name="fc"), name="softmax")


def test_wide_inference_in_sample_blocks_matches_one_sample_at_a_time():
    # 16 channels at 320² are 6.5 MB per sample: an inference bind of 6 runs blocks of
    # samples (see kernels/tuning.rs INFERENCE_BLOCK_BYTES); forward, predict and a reshape
    # give what each sample gives alone.
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (12, 3, 320, 320)).astype(np.float32)
    one = m.bind(m.module(wide_convnet()), data_shapes=[("data", (1, 3, 320, 320))], for_training=False)
    m.init_params(one, initializer=mx.init.xavier())
    params = m.arg_params(one)
    want = np.concatenate([m.outputs_merged(m.forward(one, {"data": [x[i:i + 1]]}))[0].asnumpy()
                           for i in range(12)])
    mod = m.bind(m.module(wide_convnet()), data_shapes=[("data", (6, 3, 320, 320))], for_training=False)
    m.init_params(mod, arg_params=params)
    profiler.reset()
    profiler.set_state("run")
    got = m.outputs_merged(m.forward(mod, {"data": [x[:6]]}))[0].asnumpy()
    profiler.set_state("stop")
    calls = {layer: n for layer, op, _, n, _ in profiler.rows()["layers"]}
    profiler.reset()
    assert calls["c1"] == 6, "one block per sample"
    np.testing.assert_allclose(got, want[:6], rtol=1e-4, atol=1e-6)
    it = mx.io.ndarray_iter(x, batch_size=6)
    np.testing.assert_allclose(m.predict(mod, eval_data=it)[0].asnumpy(), want, rtol=1e-4, atol=1e-6)
    m.reshape(mod, [("data", (4, 3, 320, 320))])
    got = m.outputs_merged(m.forward(mod, {"data": [x[4:8]]}))[0].asnumpy()
    np.testing.assert_allclose(got, want[4:8], rtol=1e-4, atol=1e-6)


def _preactivated_conv():
    # BatchNorm + ReLU before the convolution (run inside it, mapping its input) and after it
    # (folded into its weight, the ReLU fused): DenseNet's and ResNet v2's pattern.
    x = sym.variable("data")
    x = sym.activation(sym.batch_norm(x, name="bn0", fix_gamma=False, eps=1e-3), act_type="relu")
    c = sym.convolution(x, num_filter=64, kernel=(3, 3), pad=(1, 1), name="c1")
    return sym.activation(sym.batch_norm(c, name="bn1", fix_gamma=False, eps=1e-3), act_type="relu")


def _batch_norm(x, gamma, beta, mean, var):
    s = (gamma / np.sqrt(var + 1e-3))[None, :, None, None]
    return (x - mean[None, :, None, None]) * s + beta[None, :, None, None]


def test_inference_3x3_convolution_as_winograd_products_matches_the_direct_sum(monkeypatch):
    # 2 × 16 channels at 16² into 64 filters: 128 tiles of 2×2 outputs, enough for the
    # Winograd kernels (kernels/conv_winograd.rs, winograd_form), which take 4×4 tiles here
    # (32 of them, none wasted); MXFN_WINOGRAD=2 keeps 2×2 tiles, =0 the direct kernels. All
    # agree with float64 sums within float32 rounding, and differ from each other in the last
    # bits (the switch is read when the bind first runs).
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (2, 16, 16, 16)).astype(np.float32)
    arg = {"bn0_gamma": rng.uniform(0.5, 1.5, 16), "bn0_beta": rng.uniform(-0.5, 0.5, 16),
           "c1_weight": rng.normal(0, 0.1, (64, 16, 3, 3)), "c1_bias": rng.normal(0, 0.1, 64),
           "bn1_gamma": rng.uniform(0.5, 1.5, 64), "bn1_beta": rng.uniform(-0.5, 0.5, 64)}
    aux = {"bn0_moving_mean": rng.normal(0, 0.2, 16), "bn0_moving_var": rng.uniform(0.5, 2, 16),
           "bn1_moving_mean": rng.normal(0, 0.2, 64), "bn1_moving_var": rng.uniform(0.5, 2, 64)}
    to_nd = lambda d: {k: mx.nd.array(v.astype(np.float32)) for k, v in d.items()}
    f32 = lambda v: v.astype(np.float32).astype(np.float64)
    a = np.maximum(_batch_norm(x.astype(np.float64), *(f32(arg[k]) for k in ("bn0_gamma", "bn0_beta")),
                               *(f32(aux[k]) for k in ("bn0_moving_mean", "bn0_moving_var"))), 0)
    padded = np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("ncyxij,fcij->nfyx", windows, f32(arg["c1_weight"])) + f32(arg["c1_bias"])[None, :, None, None]
    want = np.maximum(_batch_norm(conv, *(f32(arg[k]) for k in ("bn1_gamma", "bn1_beta")),
                                  *(f32(aux[k]) for k in ("bn1_moving_mean", "bn1_moving_var"))), 0)
    got = {}
    for switch in ("1", "2", "0"):
        monkeypatch.setenv("MXFN_WINOGRAD", switch)
        mod = m.bind(m.module(_preactivated_conv(), label_names=[]), data_shapes=[("data", x.shape)],
                     for_training=False)
        m.init_params(mod, arg_params=to_nd(arg), aux_params=to_nd(aux))
        got[switch] = m.outputs_merged(m.forward(mod, {"data": [x]}))[0].asnumpy()
        np.testing.assert_allclose(got[switch], want, rtol=1e-4, atol=1e-5)
    assert not np.array_equal(got["1"], got["0"])
    assert not np.array_equal(got["1"], got["2"]) and not np.array_equal(got["2"], got["0"])
