"""mx.onnx.export_model: every exported model passes onnx.checker and onnxruntime reproduces
mxfn's own outputs (MNIST MLP and LeNet, the model-zoo CNNs written by MXNet 1.9.1, one case
per converter), at a fixed and at a dynamic batch size; options and unsupported nodes raise."""

import gzip
import logging
import os

import numpy as np
import pytest

try:
    import onnx
    import onnxruntime  # noqa: F401
except ImportError:  # CI installs both (.ci/run); locally the tests need `pip install onnx onnxruntime`
    if os.environ.get("CI"):
        raise
    pytest.skip("onnx and onnxruntime are not installed", allow_module_level=True)

import mxfn as mx
from conftest import ROOT
from mxfn import module as m
from onnx_helpers import (ZOO_SCRIPT, assert_same, export_and_compare, mxfn_forward, ort_run,
                          random_params)

S = mx.sym
V = mx.sym.variable
MNIST = ROOT / "data" / "mnist"


def _mnist(kind, n):
    with gzip.open(MNIST / f"{kind}-images-idx3-ubyte.gz", "rb") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16)[: n * 784].reshape(n, 784)
    with gzip.open(MNIST / f"{kind}-labels-idx1-ubyte.gz", "rb") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return x.astype(np.float32) / 255, y.astype(np.float32)


def _mlp():
    net = S.fully_connected(V("data"), num_hidden=128, name="fc1")
    net = S.activation(net, act_type="relu", name="relu1")
    net = S.fully_connected(net, num_hidden=64, name="fc2")
    net = S.activation(net, act_type="relu", name="relu2")
    return S.softmax_output(S.fully_connected(net, num_hidden=10, name="fc3"), name="softmax")


def _lenet():
    net = S.convolution(V("data"), kernel=(5, 5), num_filter=20, name="conv1")
    net = S.pooling(S.activation(net, act_type="tanh"), pool_type="max", kernel=(2, 2), stride=(2, 2))
    net = S.convolution(net, kernel=(5, 5), num_filter=50, name="conv2")
    net = S.pooling(S.activation(net, act_type="tanh"), pool_type="max", kernel=(2, 2), stride=(2, 2))
    net = S.activation(S.fully_connected(S.flatten(net), num_hidden=500, name="fc1"), act_type="tanh")
    return S.softmax_output(S.fully_connected(net, num_hidden=10, name="fc2"), name="softmax")


@pytest.fixture(scope="module", params=["mlp", "lenet"])
def trained(request, tmp_path_factory):
    """(name, module, test images): the net fitted for one epoch on 1000 MNIST images and
    saved as a checkpoint (prefix-symbol.json, prefix-0001.params with arg:/aux: names)."""
    mx.random.seed(0)
    x, y = _mnist("train", 1000)
    shape = (784,) if request.param == "mlp" else (1, 28, 28)
    it = mx.io.ndarray_iter(x.reshape(-1, *shape), label=y, batch_size=100, shuffle=True, seed=0)
    sym = _mlp() if request.param == "mlp" else _lenet()
    mod = m.fit(m.module(sym), it, {"num_epoch": 1, "initializer": mx.init.xavier(),
                                    "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9}})
    prefix = str(tmp_path_factory.mktemp(request.param) / request.param)
    m.save_checkpoint(mod, {"prefix": prefix, "epoch": 1})
    test_x, _ = _mnist("t10k", 100)
    return request.param, mod, prefix, test_x.reshape(-1, *shape)


def _predict(mod, x):
    return m.predict(mod, {"eval_data": mx.io.ndarray_iter(x, batch_size=len(x))})[0].asnumpy()


def test_mnist_net_from_checkpoint_paths_matches_predict(trained, tmp_path):
    name, mod, prefix, x = trained
    assert any(k.startswith("arg:") for k in mx.nd.load(f"{prefix}-0001.params"))
    path = mx.onnx.export_model(f"{prefix}-symbol.json", f"{prefix}-0001.params",
                                in_shapes=[x.shape], onnx_file_path=str(tmp_path / f"{name}.onnx"))
    got = ort_run(path, {"data": x})
    assert_same(got, [_predict(mod, x)])
    assert got[0].argmax(1).tolist() == _predict(mod, x).argmax(1).tolist()
    model = onnx.load(path)
    assert [i.name for i in model.graph.input] == ["data"]  # the label is dropped
    assert [o.name for o in model.graph.output] == ["softmax"]
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == list(x.shape)


@pytest.mark.parametrize("declared", ["all", "batch"])
def test_mnist_net_dynamic_batch(trained, tmp_path, declared):
    name, mod, prefix, x = trained
    arg, aux = m.get_params(mod)
    params = {**{f"arg:{k}": v for k, v in arg.items()}, **{f"aux:{k}": v for k, v in aux.items()}}
    opts = {"in_shapes": [(8,) + x.shape[1:]], "dynamic": True, "onnx_file_path": str(tmp_path / "d.onnx")}
    if declared == "batch":
        opts["dynamic_input_shapes"] = [(None,) + x.shape[1:]]
    path = mx.onnx.export_model(m.symbol(mod), params, opts)
    dims = onnx.load(path).graph.input[0].type.tensor_type.shape.dim
    assert [d.HasField("dim_value") for d in dims] == [False] + [declared == "batch"] * (len(dims) - 1)
    for n in (1, 37):
        assert_same(ort_run(path, {"data": x[:n]}), [_predict(mod, x[:n])])


# -- one case per converter -------------------------------------------------------------------

def _r(*shape, seed=1, lo=None, hi=None):
    rng = np.random.default_rng(seed + len(shape))
    if lo is not None:
        return rng.uniform(lo, hi, shape).astype(np.float32)
    return rng.normal(size=shape).astype(np.float32)


def _idx(values):
    return np.asarray(values, dtype=np.float32)


x4, x3, x2 = V("x"), V("x"), V("x")
CASES = {
    # layers
    "fc_flatten_4d": (S.fully_connected(x4, num_hidden=5, name="fc"), {"x": _r(2, 3, 4, 4)}),
    "fc_no_flatten": (S.fully_connected(x3, num_hidden=5, flatten=False, name="fc"), {"x": _r(2, 3, 4)}),
    "fc_no_bias": (S.fully_connected(x2, num_hidden=5, no_bias=True, name="fc"), {"x": _r(3, 4)}),
    "conv1d": (S.convolution(x3, kernel=(3,), num_filter=4, pad=(1,), stride=(2,), name="c"), {"x": _r(2, 3, 9)}),
    "conv2d_group_dilate": (S.convolution(x4, kernel=(3, 3), num_filter=4, num_group=2, dilate=(2, 1),
                                          pad=(2, 1), stride=(1, 2), no_bias=True, name="c"), {"x": _r(2, 4, 9, 8)}),
    "conv3d": (S.convolution(V("x"), kernel=(2, 3, 3), num_filter=3, pad=(0, 1, 1), name="c"),
               {"x": _r(1, 2, 4, 5, 5)}),
    "deconv_adj": (S.deconvolution(x4, kernel=(3, 3), num_filter=3, stride=(2, 2), pad=(1, 1), adj=(1, 1),
                                   no_bias=False, name="d"), {"x": _r(2, 4, 5, 5)}),
    "deconv_adj_no_pad": (S.deconvolution(x4, kernel=(2, 2), num_filter=2, stride=(2, 2), adj=(1, 0), name="d"),
                          {"x": _r(1, 2, 3, 3)}),
    "deconv_target_group": (S.deconvolution(x4, kernel=(4, 4), num_filter=4, num_group=2, stride=(2, 2),
                                            target_shape=(11, 12), name="d"), {"x": _r(1, 4, 6, 6)}),
    "pool_max_pad": (S.pooling(x4, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max"), {"x": _r(2, 3, 9, 9)}),
    "pool_max_full": (S.pooling(x4, kernel=(3, 3), stride=(2, 2), pool_type="max", pooling_convention="full"),
                      {"x": _r(2, 3, 8, 8)}),
    "pool_avg_pad": (S.pooling(x4, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg"), {"x": _r(2, 3, 8, 8)}),
    "pool_avg_exclude_pad": (S.pooling(x4, kernel=(3, 3), stride=(1, 1), pad=(1, 1), pool_type="avg",
                                       count_include_pad=False), {"x": _r(2, 3, 6, 6)}),
    "pool_avg_full": (S.pooling(x4, kernel=(3, 3), stride=(2, 2), pool_type="avg", pooling_convention="full"),
                      {"x": _r(2, 3, 8, 8)}),
    "pool_sum_full": (S.pooling(x4, kernel=(2, 3), stride=(2, 2), pad=(1, 0), pool_type="sum",
                                pooling_convention="full"), {"x": _r(2, 3, 8, 8)}),
    "pool_lp": (S.pooling(x4, kernel=(2, 2), stride=(2, 2), pool_type="lp", p_value=2), {"x": _r(2, 3, 6, 6)}),
    "pool_lp1_full": (S.pooling(x4, kernel=(2, 2), stride=(2, 2), pool_type="lp", p_value=1,
                               pooling_convention="full"), {"x": _r(2, 3, 7, 7)}),
    "pool_lp2_full": (S.pooling(x4, kernel=(3, 3), stride=(2, 2), pool_type="lp", p_value=2,
                                pooling_convention="full"), {"x": _r(2, 3, 8, 8)}),
    "pool_lp3": (S.pooling(x4, kernel=(2, 2), stride=(1, 1), pad=(1, 1), pool_type="lp", p_value=3),
                 {"x": _r(2, 3, 5, 5)}),
    "global_lp3": (S.pooling(x4, kernel=(1, 1), global_pool=True, pool_type="lp", p_value=3), {"x": _r(2, 3, 5, 4)}),
    "pool1d_avg": (S.pooling(x3, kernel=(3,), stride=(2,), pool_type="avg"), {"x": _r(2, 3, 9)}),
    "pool3d_max": (S.pooling(V("x"), kernel=(2, 2, 2), stride=(2, 2, 2), pool_type="max"), {"x": _r(1, 2, 4, 4, 4)}),
    "global_max": (S.pooling(x4, kernel=(1, 1), global_pool=True, pool_type="max"), {"x": _r(2, 3, 5, 4)}),
    "global_avg": (S.pooling(x4, kernel=(1, 1), global_pool=True, pool_type="avg"), {"x": _r(2, 3, 5, 4)}),
    "global_sum": (S.pooling(x4, kernel=(1, 1), global_pool=True, pool_type="sum"), {"x": _r(2, 3, 5, 4)}),
    "global_lp": (S.pooling(x4, kernel=(1, 1), global_pool=True, pool_type="lp", p_value=2), {"x": _r(2, 3, 5, 4)}),
    "bn_fix_gamma": (S.batch_norm(x4, name="bn"), {"x": _r(2, 3, 4, 4)}),
    "bn_gamma_eps": (S.batch_norm(x4, fix_gamma=False, eps=1e-2, name="bn"), {"x": _r(2, 3, 4, 4)}),
    "bn_axis_last": (S.batch_norm(x3, fix_gamma=False, axis=-1, name="bn"), {"x": _r(2, 3, 4)}),
    "bn_2d": (S.batch_norm(x2, fix_gamma=False, name="bn"), {"x": _r(5, 3)}),
    "layer_norm": (S.layer_norm(x3, name="ln"), {"x": _r(2, 3, 4)}),
    "layer_norm_axis1": (S.layer_norm(x3, axis=1, eps=1e-3, name="ln"), {"x": _r(2, 3, 4)}),
    "layer_norm_mean_std": (S.layer_norm(x3, output_mean_var=True, name="ln"), {"x": _r(2, 3, 4)}),
    **{f"act_{a}": (S.activation(x2, act_type=a), {"x": _r(3, 4)})
       for a in ("relu", "sigmoid", "tanh", "softrelu", "softsign")},
    **{f"leaky_{a}": (S.leaky_relu(x4, act_type=a, slope=0.3, name="lr"), {"x": _r(2, 3, 2, 2)})
       for a in ("leaky", "elu", "selu", "prelu", "gelu", "rrelu")},
    "dropout": (S.dropout(x2, p=0.5) * 2, {"x": _r(3, 4)}),
    "embedding": (S.embedding(x2, input_dim=6, output_dim=3, name="emb"), {"x": _idx([[0, 5, 2], [1.7, 3, 3]])}),
    "softmax_output_4d": (S.softmax_output(x4, name="sm"), {"x": _r(2, 3, 2, 2)}),
    "softmax_output_multi": (S.softmax_output(x4, multi_output=True, name="sm"), {"x": _r(2, 3, 2, 2)}),
    "softmax_output_preserve": (S.softmax_output(x3, preserve_shape=True, name="sm"), {"x": _r(2, 3, 4)}),
    "softmax_activation": (S.softmax_activation(x4, mode="channel") + S.softmax_activation(x4), {"x": _r(2, 3, 2, 2)}),
    "softmax_temperature": (S.softmax(x3, axis=1, temperature=2.0), {"x": _r(2, 3, 4)}),
    "log_softmax": (S.log_softmax(x3, axis=0), {"x": _r(2, 3, 4)}),
    "regression_outputs": (S.group([S.linear_regression_output(x2, name="lin"), S.logistic_regression_output(
        x2, name="log"), S.mae_regression_output(x2, name="mae")]), {"x": _r(3, 4)}),
    "make_loss_block_grad": (S.make_loss(S.block_grad(x2) * 3), {"x": _r(3, 4)}),
    "sequence_mask": (S.sequence_mask(x3, V("len"), use_sequence_length=True, value=-2.0),
                      {"x": _r(4, 3, 2), "len": _idx([1, 4, 2.5])}),
    "sequence_mask_axis1": (S.sequence_mask(x3, V("len"), use_sequence_length=True, axis=1),
                            {"x": _r(3, 4, 2), "len": _idx([1, 4, 2])}),
    "sequence_last": (S.sequence_last(x3) + S.sequence_last(x3, V("len"), use_sequence_length=True),
                      {"x": _r(4, 3, 2), "len": _idx([1, 4, 2])}),
    "sequence_last_axis1": (S.sequence_last(x3, V("len"), use_sequence_length=True, axis=1),
                            {"x": _r(3, 4, 2), "len": _idx([1, 4, 2])}),
    "sequence_reverse": (S.sequence_reverse(x3) * S.sequence_reverse(x3, V("len"), use_sequence_length=True),
                         {"x": _r(4, 3, 2), "len": _idx([1, 4, 2])}),
    # shapes
    "flatten": (S.flatten(x4), {"x": _r(2, 3, 2, 2)}),
    "reshape_codes": (S.reshape(S.reshape(x4, shape=(0, -1)), shape=(-4, 1, -1, 0)), {"x": _r(2, 3, 2, 2)}),
    "reshape_merge_split": (S.reshape(S.reshape(x4, shape=(-3, -2)), shape=(-1, 2), reverse=True),
                            {"x": _r(2, 3, 2, 2)}),
    "concat_split": (S.group(list(S.split(S.concat(x3, x3 * 2, dim=2), num_outputs=3, axis=2, name="sp"))),
                     {"x": _r(2, 3, 3)}),
    "split_squeeze": (S.split(x3, num_outputs=3, axis=1, squeeze_axis=True, name="sp")[1], {"x": _r(2, 3, 4)}),
    "stack": (S.stack(x2, x2 + 1, axis=1), {"x": _r(3, 4)}),
    "transpose": (S.transpose(x3, axes=(1, 0, 2)) + S.swapaxes(x3, dim1=0, dim2=1), {"x": _r(2, 3, 4)}),
    "transpose_default": (S.transpose(x3), {"x": _r(2, 3, 4)}),
    "expand_squeeze": (S.squeeze(S.expand_dims(x3, axis=-1), axis=(1, 3)) + S.squeeze(x3), {"x": _r(2, 1, 4)}),
    "squeeze_all": (S.squeeze(x3), {"x": _r(1, 1, 1)}),
    "slice": (S.slice(x3, begin=(None, 1), end=(None, None), step=(-1, 2)), {"x": _r(3, 5, 2)}),
    "slice_axis": (S.slice_axis(x3, axis=1, begin=-3, end=None) + S.slice_axis(x3, axis=1, begin=0, end=3),
                   {"x": _r(2, 5, 4)}),
    "reverse": (S.reverse(x3, axis=(0, 2)) + S.flip(x3, axis=1), {"x": _r(2, 3, 4)}),
    "broadcast_like": (S.broadcast_like(V("a"), x3), {"a": _r(1, 3, 1), "x": _r(2, 3, 4)}),
    "broadcast_like_axes": (S.broadcast_like(V("a"), V("b"), lhs_axes=(0, 2), rhs_axes=(0, 1)),
                            {"a": _r(1, 3, 1), "b": _r(2, 4)}),
    # math
    "elemwise": ((x2 + x2 * 3) - x2 / (S.abs(x2) + 1) + S.elemwise_mul(x2, x2), {"x": _r(3, 4)}),
    "max_min_power": (S._maximum(x2, V("y")) * S._minimum(x2, V("y")) + S._power(S.abs(x2) + 1, V("y")),
                      {"x": _r(3, 4), "y": _r(3, 4, seed=3)}),
    "broadcast": (S.broadcast_add(x3, V("y")) * S.broadcast_sub(x3, V("y")) + S.broadcast_mul(x3, V("y"))
                  + S.broadcast_div(x3, S.abs(V("y")) + 1) + S.broadcast_maximum(x3, V("y"))
                  + S.broadcast_minimum(x3, V("y")) + S.broadcast_power(S.abs(x3) + 1, V("y")),
                  {"x": _r(2, 3, 4), "y": _r(2, 1, 4, seed=3)}),
    "scalars": (((x2 + 2) - 1.5) * 3 / 4 + (2 - x2) + (2 / (S.abs(x2) + 1)) + (S.abs(x2) ** 2.5)
                + S._rpower_scalar(x2, scalar=2.0) + S._maximum_scalar(x2, scalar=0.1)
                + S._minimum_scalar(x2, scalar=0.2),
                {"x": _r(3, 4)}),
    "unary": (S.exp(x2) + S.log(S.abs(x2) + 1) + S.sqrt(S.abs(x2)) + S.square(x2) + S.negative(x2) + S.relu(x2)
              + S.sigmoid(x2) + S.tanh(x2), {"x": _r(3, 4)}),
    "add_n_clip": (S.clip(S.add_n(x2, x2 * 2, x2 * 3), a_min=-1.0, a_max=2.0), {"x": _r(3, 4)}),
    "where": (S.where(V("c"), x2, x2 * 10) + S.where(V("r"), x2, -x2), {"c": _idx([[0, 1, 2, 0]] * 3), "x": _r(3, 4),
                                                                       "r": _idx([1, 0, -1])}),
    "fills": (S.zeros_like(x2) + S.ones_like(x2) * 2 + x2 + S.zeros((3, 4)) + S.ones((3, 4)) + S.full((3, 4), 0.5),
              {"x": _r(3, 4)}),
    "sum_all": (S.sum(x3), {"x": _r(2, 3, 4)}),
    "mean_keepdims": (S.mean(x3, axis=(1, 2), keepdims=True), {"x": _r(2, 3, 4)}),
    "max_exclude": (S.max(x3, axis=1, exclude=True), {"x": _r(2, 3, 4)}),
    "min_prod": (S.min(x3, axis=-1) + S.prod(x3, axis=2), {"x": _r(2, 3, 4)}),
    "nansum": (S.nansum(x2, axis=1), {"x": np.array([[1, np.nan, 2], [np.nan, np.nan, 3]], np.float32)}),
    "argmax": (S.argmax(x3, axis=1) * 10 + S.argmin(x3, axis=1), {"x": _r(2, 3, 4)}),
    "argmax_keepdims": (S.argmax(x3, axis=2, keepdims=True), {"x": _r(2, 3, 4)}),
    "argmin_flat": (S.argmin(x3), {"x": _r(2, 3, 4)}),
    "dot_transpose_a": (S.dot(V("a"), V("b"), transpose_a=True), {"a": _r(4, 3), "b": _r(4, 5)}),
    "dot_transpose_b": (S.dot(V("a"), V("b"), transpose_b=True), {"a": _r(3, 4), "b": _r(5, 4)}),
    "dot_vectors": (S.dot(V("a"), V("b")), {"a": _r(4), "b": _r(4, seed=5)}),
    "dot_nd": (S.dot(V("a"), V("b")), {"a": _r(2, 3, 4), "b": _r(4, 2, 5)}),
    "batch_dot": (S.batch_dot(V("a"), V("b"), transpose_a=True, transpose_b=True),
                  {"a": _r(2, 4, 3), "b": _r(2, 5, 4)}),
    # indexing
    "take_clip": (S.take(V("a"), V("i"), axis=1), {"a": _r(2, 4, 3), "i": _idx([[0, 5], [-2, 3.6]])}),
    "take_wrap": (S.take(V("a"), V("i"), mode="wrap"), {"a": _r(4, 3), "i": _idx([5, -1, 2])}),
    "take_raise": (S.take(V("a"), V("i"), mode="raise"), {"a": _r(4, 3), "i": _idx([3, 0, 2])}),
    "pick": (S.pick(V("a"), V("i"), axis=1), {"a": _r(3, 4), "i": _idx([0, 7, -1])}),
    "pick_wrap_keepdims": (S.pick(V("a"), V("i"), axis=0, mode="wrap", keepdims=True),
                           {"a": _r(3, 4), "i": _idx([0, 7, -1, 2])}),
    "one_hot": (S.one_hot(V("i"), depth=4, on_value=3.0, off_value=-1.0), {"i": _idx([[0, 3], [-1, 5]])}),
    # recurrent: the flat parameter vector and the begin states are parameters
    "rnn_lstm_2_bi_states": (S.RNN(x3, V("p"), V("s"), V("c"), state_size=4, num_layers=2, mode="lstm",
                                   bidirectional=True, state_outputs=True), {"x": _r(3, 2, 5)}),
    "rnn_gru_1": (S.RNN(x3, V("p"), V("s"), state_size=3, num_layers=1, mode="gru"), {"x": _r(4, 2, 5)}),
    "rnn_gru_2_bi_states": (S.RNN(x3, V("p"), V("s"), state_size=3, num_layers=2, mode="gru", bidirectional=True,
                                  state_outputs=True), {"x": _r(4, 3, 2)}),
    "rnn_relu_2": (S.RNN(x3, V("p"), V("s"), state_size=4, num_layers=2, mode="rnn_relu"), {"x": _r(3, 2, 5)}),
    "rnn_tanh_1_bi": (S.RNN(x3, V("p"), V("s"), state_size=4, num_layers=1, mode="rnn_tanh", bidirectional=True),
                      {"x": _r(3, 2, 5)}),
    "rnn_lstm_lengths": (S.RNN(x3, V("p"), V("s"), V("c"), V("l"), state_size=3, num_layers=1, mode="lstm",
                               bidirectional=True, use_sequence_length=True),
                         {"x": _r(4, 3, 2), "l": _idx([4, 1, 2])}),
    "rnn_param_concat_gru": (S.RNN(x3, S._rnn_param_concat(S.reshape(V("w"), shape=(-1,)), V("b"), dim=0),
                                   V("s"), state_size=2, num_layers=1, mode="gru"),
                             {"x": _r(3, 2, 4), "w": _r(6, 6), "b": _r(12)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_converter_matches_mxfn(case, tmp_path):
    sym, data = CASES[case]
    export_and_compare(tmp_path, sym, random_params(sym, data), data, name=case)


# Dynamic exports: name -> (symbol, data at sizes n (batch) and t (time), dynamic axes per input).
# Exported at n=2, t=3 and run there and at n=5, t=4.
DYN_CASES = {
    "reshape_keep_batch": (S.reshape(x3, shape=(0, 2, -1)), lambda n, t: {"x": _r(n, 4, 3)}, {"x": (0,)}),
    "reshape_merge_batch": (S.reshape(x3, shape=(-3, 0)), lambda n, t: {"x": _r(n, 3, 4)}, {"x": (0,)}),
    "reshape_time_batch": (S.reshape(S.reshape(x3, shape=(-3, 0)) * 2, shape=(-4, -1, 2, -2)),
                           lambda n, t: {"x": _r(t, 2 * n, 4)}, {"x": (0, 1)}),
    "flatten_fc": (S.fully_connected(S.flatten(x4), num_hidden=3, name="fc"), lambda n, t: {"x": _r(n, 2, 3, 2)},
                   {"x": (0,)}),
    "dot_nd": (S.dot(V("a"), V("b")), lambda n, t: {"a": _r(t, n, 4), "b": _r(4, 5)}, {"a": (0, 1)}),
    "split_time": (S.group(list(S.split(x3, num_outputs=2, axis=0, name="sp"))), lambda n, t: {"x": _r(2 * t, n, 2)},
                   {"x": (0, 1)}),
    "squeeze_keeps_dynamic": (S.squeeze(x3), lambda n, t: {"x": _r(n, 1, 3)}, {"x": (0,)}),
    "softmax_output_4d": (S.softmax_output(x4, name="sm"), lambda n, t: {"x": _r(n, 3, 2, 2)}, {"x": (0,)}),
    "sequence_mask": (S.sequence_mask(x3, V("len"), use_sequence_length=True),
                      lambda n, t: {"x": _r(t, n, 2), "len": _idx(np.arange(n) % t + 1)}, {"x": (0, 1), "len": (0,)}),
    "sequence_last": (S.sequence_last(x3, V("len"), use_sequence_length=True),
                      lambda n, t: {"x": _r(t, n, 2), "len": _idx(np.arange(n) % t + 1)}, {"x": (0, 1), "len": (0,)}),
    "take_wrap": (S.take(V("a"), V("i"), mode="wrap"), lambda n, t: {"a": _r(n, 3), "i": _idx([7, -1])}, {"a": (0,)}),
    "pick_clip": (S.pick(V("a"), V("i"), axis=1), lambda n, t: {"a": _r(n, t), "i": _idx(np.arange(n) * 2 - 1)},
                  {"a": (0, 1), "i": (0,)}),
    "broadcast_like_axes": (S.broadcast_like(V("a"), V("b"), lhs_axes=(0,), rhs_axes=(0,)),
                            lambda n, t: {"a": _r(1, 3), "b": _r(n, 2)}, {"b": (0,)}),
    "fills_and_sum": (S.sum(S.ones_like(x2) + x2) + S.sum(S.zeros_like(x2)), lambda n, t: {"x": _r(n, 3)}, {"x": (0,)}),
}


@pytest.mark.parametrize("case", sorted(DYN_CASES))
def test_dynamic_converter_matches_mxfn(case, tmp_path):
    sym, make, axes = DYN_CASES[case]
    data = make(2, 3)
    dyn = [tuple(None if a in axes.get(k, ()) else d for a, d in enumerate(v.shape)) for k, v in data.items()]
    export_and_compare(tmp_path, sym, random_params(sym, data), data, runs=[make(5, 4)], name=case,
                       dynamic=True, dynamic_input_shapes=dyn)


# -- the model-zoo CNNs, written by MXNet 1.9.1 -------------------------------------------------

# Gluon model-zoo name -> input size: the smallest usual size each net's fixed final pooling
# allows (squeezenet's 13×13, densenet's 7×7 and inception's 8×8 average pools).
ZOO = {"squeezenet1.1": 224, "mobilenet0.25": 64, "mobilenetv2_0.25": 64, "resnet18_v2": 64,
       "densenet121": 224, "inceptionv3": 299}


@pytest.fixture(scope="module")
def zoo(mxnet_python, tmp_path_factory):
    """A directory holding <name>-symbol.json and <name>-0000.params for every ZOO model."""
    out = tmp_path_factory.mktemp("zoo")
    specs = " ".join(f"{k}:{v}" for k, v in ZOO.items())
    code = f"import sys; sys.argv = ['zoo', {str(out)!r}] + {specs!r}.split()\n" + ZOO_SCRIPT
    assert mxnet_python(code).strip().endswith("ok")
    return out


@pytest.mark.parametrize("name", list(ZOO))
def test_model_zoo_cnn(zoo, name, tmp_path):
    size = ZOO[name]
    sym_file, params_file = zoo / f"{name}-symbol.json", zoo / f"{name}-0000.params"
    sym, params = mx.sym.load(sym_file), mx.nd.load(params_file)
    rng = np.random.default_rng(0)
    x = {"data": rng.uniform(0, 1, (2, 3, size, size)).astype(np.float32)}
    one = {"data": x["data"][:1]}
    fixed = mx.onnx.export_model(str(sym_file), str(params_file), in_shapes=[(1, 3, size, size)],
                                 onnx_file_path=str(tmp_path / "fixed.onnx"))
    assert_same(ort_run(fixed, one), mxfn_forward(sym, params, one))
    dynamic = mx.onnx.export_model(sym, params, in_shapes=[(1, 3, size, size)], dynamic=True,
                                   dynamic_input_shapes=[(None, 3, size, size)],
                                   onnx_file_path=str(tmp_path / "dynamic.onnx"))
    assert_same(ort_run(dynamic, x), mxfn_forward(sym, params, x))


# -- newer opsets ------------------------------------------------------------------------------

# Converters whose ONNX form changes with the opset: reductions (axes as an input from 18),
# Split (num_outputs from 18), LpPool (ceil_mode from 18), Gelu (from 20).
OPSET_CASES = ["mean_keepdims", "min_prod", "max_exclude", "layer_norm_axis1", "concat_split", "pool_lp2_full",
               "leaky_gelu", "global_lp", "argmin_flat"]


@pytest.mark.parametrize("opset", [18, 20])
@pytest.mark.parametrize("case", OPSET_CASES)
def test_converter_at_newer_opsets(case, opset, tmp_path):
    sym, data = CASES[case]
    path = export_and_compare(tmp_path, sym, random_params(sym, data), data, name=case, opset_version=opset)
    assert onnx.load(path).opset_import[0].version == opset


def test_dynamic_split_at_opset_18(tmp_path):
    sym, make, _ = DYN_CASES["split_time"]
    data = make(2, 3)
    export_and_compare(tmp_path, sym, {}, data, runs=[make(5, 4)], opset_version=18, dynamic=True,
                       dynamic_input_shapes=[(None, None, 2)])


# -- the file, its names and options -------------------------------------------------------------

def test_names_of_inputs_outputs_and_params(tmp_path):
    sym, data = CASES["concat_split"]
    model = onnx.load(export_and_compare(tmp_path, sym, {}, data))
    assert [o.name for o in model.graph.output] == ["sp0", "sp1", "sp2"]  # MXNet's exporter's names
    assert model.ir_version == 7 and model.producer_name == "mxfn"
    fc = S.softmax_output(S.fully_connected(V("data"), num_hidden=3, name="fc"), name="out")
    params = {"arg:fc_weight": np.ones((3, 4), np.float32), "arg:fc_bias": mx.nd.zeros(3), "unused": np.ones(2)}
    model = onnx.load(mx.onnx.export_model(fc, params, in_shapes=[(2, 4)], onnx_file_path=str(tmp_path / "fc.onnx")))
    assert [i.name for i in model.graph.input] == ["data"]
    assert sorted(t.name for t in model.graph.initializer) == ["fc_bias", "fc_weight"]
    assert [o.name for o in model.graph.output] == ["out"]


def test_params_as_arg_aux_list_and_keyword_options(tmp_path):
    sym, data = CASES["bn_gamma_eps"]
    params = random_params(sym, data)
    arg = {k: v for k, v in params.items() if k in sym.list_arguments()}
    aux = {k: v for k, v in params.items() if k in sym.list_auxiliary_states()}
    path = mx.onnx.export_model(sym, [arg, aux], {"in-shapes": [(2, 3, 4, 4)]},
                                onnxFilePath=str(tmp_path / "bn.onnx"))
    assert_same(ort_run(path, data), mxfn_forward(sym, params, data))


def test_integer_input_types(tmp_path):
    # Indices fed as int32 / int64 (in_types per input) give what mxfn computes from floats.
    sym = S.embedding(V("i"), input_dim=6, output_dim=3, name="emb") + S.take(V("a"), V("j"))
    data = {"i": _idx([[0, 5], [2, 3]]), "a": _r(6, 3), "j": _idx([[1, 0], [5, 5]])}
    params = random_params(sym, data)
    path = export_and_compare(tmp_path, sym, params, data, in_types=["int32", "float32", np.int64])
    assert [i.type.tensor_type.elem_type for i in onnx.load(path).graph.input] == [
        onnx.TensorProto.INT32, onnx.TensorProto.FLOAT, onnx.TensorProto.INT64]


def test_unsupported_operator_names_node_and_operator(tmp_path, monkeypatch):
    sym = S.swap_axis(S.relu(V("x")), dim1=0, dim2=1, name="swapper")
    monkeypatch.delitem(mx.onnx._graph.CONVERTERS, "SwapAxis")
    with pytest.raises(mx.MXFNError, match='node "swapper": operator SwapAxis has no ONNX converter'):
        mx.onnx.export_model(sym, {}, in_shapes=[(2, 3)], onnx_file_path=str(tmp_path / "m.onnx"))
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize("sym, why", [
    (S.dropout(V("x"), mode="always", name="drop"), 'node "drop" \\(operator Dropout\\): mode="always"'),
    (S.pooling(V("x"), kernel=(2,), pool_type="max", pooling_convention="same", name="pool"),
     'node "pool" \\(operator Pooling\\): pooling_convention=same'),
    (S.softmax(V("x"), V("len"), use_length=True, name="sm"), 'node "sm" \\(operator softmax\\): use_length'),
], ids=["dropout_always", "pool_same", "softmax_use_length"])
def test_unsupported_attribute_names_node_and_operator(sym, why, tmp_path):
    shapes = [(2, 3, 4)] + [(2, 3)] * (len(sym.list_arguments()) - 1)
    with pytest.raises(mx.MXFNError, match=why):
        mx.onnx.export_model(sym, {}, in_shapes=shapes, onnx_file_path=str(tmp_path / "m.onnx"))


# Registry operators that have no ONNX equivalent (none so far); a new operator needs either a
# converter (pymod/mxfn/onnx) or a line here.
NO_ONNX_EQUIVALENT = set()


def test_every_registry_operator_has_a_converter():
    ops = {info["name"] for info in mx._ops.OPS}
    assert ops - set(mx.onnx.get_operator_support()) - NO_ONNX_EQUIVALENT == set()


FC = S.fully_connected(V("data"), num_hidden=2, name="fc")
FC_PARAMS = {"fc_weight": np.ones((2, 3), np.float32), "fc_bias": np.zeros(2, np.float32)}


@pytest.mark.parametrize("opts, error, match", [
    ({}, mx.MXFNError, 'missing required option "in_shapes"'),
    ({"in_shapes": [(1, 3)], "in_shape": [(1, 3)]}, mx.MXFNError,
     'unknown option "in_shape"; did you mean "in_shapes"'),
    ({"in_shapes": [(1, 3), (1, 3)]}, mx.MXFNError,
     "has 2 shape\\(s\\) but the symbol has 1 data input\\(s\\) \\['data'\\]"),
    ({"in_shapes": [(1, 0)]}, mx.MXFNError,
     'the shape of input "data" must be a tuple of positive ints, got \\(1, 0\\)'),
    ({"in_shapes": [(1, 3)], "in_types": "complex64"}, mx.MXFNError, '"in_types": .*dtype must be one of'),
    ({"in_shapes": [(1, 3)], "in_types": ["float32", "float32"]}, mx.MXFNError, '"in_types" has 2 dtype'),
    ({"in_shapes": [(1, 3)], "dynamic_input_shapes": [(None, 3)]}, mx.MXFNError, '"dynamic" is False'),
    ({"in_shapes": [(1, 3)], "dynamic": True, "dynamic_input_shapes": [(None, 4)]}, mx.MXFNError,
     'must match its in_shapes \\(1, 3\\) on every axis that is not None, got \\(None, 4\\)'),
    ({"in_shapes": [(1, 3)], "opset_version": 12}, mx.MXFNError, '"opset_version" must be between 13 and'),
    ({"in_shapes": [(1, 3)], "verbose": "yes"}, TypeError, 'option "verbose" expects bool, got str'),
    ({"in_shapes": (1, 3)}, mx.MXFNError, "has 2 shape\\(s\\)"),
    ({"in_shapes": [(1, 4)]}, mx.MXFNError, "shape inference failed for in_shapes \\[\\(1, 4\\)\\]"),
])
def test_bad_options_raise_naming_the_key(opts, error, match, tmp_path):
    with pytest.raises(error, match=match):
        mx.onnx.export_model(FC, FC_PARAMS, {"onnx_file_path": str(tmp_path / "m.onnx"), **opts})
    assert os.listdir(tmp_path) == []


def test_bad_sym_and_params_raise(tmp_path):
    with pytest.raises(TypeError, match="sym must be a Symbol or the path"):
        mx.onnx.export_model(42, FC_PARAMS, in_shapes=[(1, 3)])
    with pytest.raises(TypeError, match="params must be a dict"):
        mx.onnx.export_model(FC, 42, in_shapes=[(1, 3)])
    with pytest.raises(FileNotFoundError):
        mx.onnx.export_model(str(tmp_path / "none-symbol.json"), FC_PARAMS, in_shapes=[(1, 3)])
    with pytest.raises(FileNotFoundError):
        mx.onnx.export_model(FC, FC_PARAMS, in_shapes=[(1, 3)], onnx_file_path=str(tmp_path / "no" / "m.onnx"))


def test_write_is_atomic_and_keeps_the_mode(tmp_path):
    # The rename fails (a directory stands at the path): nothing is torn, no temp file stays.
    blocked = tmp_path / "blocked.onnx"
    blocked.mkdir()
    with pytest.raises((OSError, mx.MXFNError)):
        mx.onnx.export_model(FC, FC_PARAMS, in_shapes=[(1, 3)], onnx_file_path=str(blocked))
    assert sorted(os.listdir(tmp_path)) == ["blocked.onnx"] and os.listdir(blocked) == []
    target = tmp_path / "m.onnx"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    assert mx.onnx.export_model(FC, FC_PARAMS, in_shapes=[(1, 3)], onnx_file_path=target) == str(target)
    assert sorted(os.listdir(tmp_path)) == ["blocked.onnx", "m.onnx"]
    assert onnx.load(str(target)).graph.node[0].op_type == "Gemm"
    assert os.stat(target).st_mode & 0o777 == 0o640
    umask = os.umask(0o022)
    try:
        new = mx.onnx.export_model(FC, FC_PARAMS, in_shapes=[(1, 3)], onnx_file_path=tmp_path / "new.onnx")
    finally:
        os.umask(umask)
    assert os.stat(new).st_mode & 0o777 == 0o644  # the process default, not mkstemp's 0600


def test_verbose_logs_every_node_and_shape_inference_adds_value_info(tmp_path, caplog):
    sym, data = CASES["fc_flatten_4d"]
    with caplog.at_level(logging.INFO, logger="mxfn"):
        path = export_and_compare(tmp_path, sym, random_params(sym, data), data, verbose=True,
                                  run_shape_inference=True)
    assert "onnx: converting node fc (FullyConnected)" in caplog.text
    assert [v.name for v in onnx.load(path).graph.value_info] != []
    quiet = export_and_compare(tmp_path, sym, random_params(sym, data), data, name="quiet")
    assert list(onnx.load(quiet).graph.value_info) == []


def test_without_the_onnx_package_export_says_how_to_install(monkeypatch):
    monkeypatch.setattr(mx.onnx._proto, "onnx", None)
    with pytest.raises(ImportError, match=r"pip install 'mxfn\[onnx\]'"):
        mx.onnx.export_model(FC, FC_PARAMS, in_shapes=[(1, 3)])


def test_every_option_is_documented():
    doc = mx.onnx.export_model.__doc__
    assert all(f"    {key} (" in doc for key in mx.onnx._EXPORT_OPTS)
