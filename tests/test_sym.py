"""mx.sym: composition, names, call forms, arithmetic, listing, inference, JSON, errors."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import sym


def mlp():
    data = sym.variable("data")
    fc1 = sym.fully_connected(data, num_hidden=128, name="fc1")
    act = sym.activation(fc1, act_type="relu", name="relu1")
    fc2 = sym.fully_connected(act, num_hidden=10, name="fc2")
    return sym.softmax_output(fc2, name="softmax")


def test_missing_inputs_become_named_variables():
    net = mlp()
    assert net.list_arguments() == ["data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias", "softmax_label"]
    assert net.list_outputs() == ["softmax_output"]
    assert net.list_auxiliary_states() == []
    assert sym.attr_dict(net)["fc1_weight"] == {"num_hidden": "128"}  # MXNet copies op attrs


def test_call_forms_are_equivalent():
    d = sym.variable("data")
    a = sym.fully_connected(d, num_hidden=4, name="fc")
    b = sym.fully_connected("fc", {"data": d, "num_hidden": 4})
    c = sym.fully_connected("fc", {"ctx_group": "g"}, {"data": d, "num-hidden": 4})
    e = sym.fully_connected({"data": d, "num_hidden": 4, "name": "fc"})
    for s in (b, e):
        assert sym.to_json(s) == sym.to_json(a)
    assert c.attr("__ctx_group__") == "g" and c.list_arguments() == a.list_arguments()


def test_auto_names_count_like_mxnet():
    d = sym.variable("d")
    n1 = sym.fully_connected(d, num_hidden=2).name
    n2 = sym.fully_connected(d, num_hidden=2).name
    assert n1.startswith("fullyconnected") and n2.startswith("fullyconnected") and n1 != n2


def test_arithmetic_writes_mxnet_ops():
    a, b = sym.variable("a"), sym.variable("b")
    ops = lambda s: [n[0] for n in s._h.nodes() if n[0] != "null"]  # noqa: E731
    assert ops(a + b) == ["elemwise_add"] and ops(a - 2) == ["_minus_scalar"]
    assert ops(2 - a) == ["_rminus_scalar"] and ops(a * b) == ["elemwise_mul"]
    assert ops(a / 3) == ["_div_scalar"] and ops(-a) == ["_mul_scalar"] and ops(a ** 2) == ["_power_scalar"]
    assert (a + 2).get_internals().list_outputs()[-1].startswith("_plusscalar")
    assert '"scalar": "-1.0"' in sym.to_json(-a)


def test_group_internals_indexing():
    net = mlp()
    internals = sym.get_internals(net)
    assert "fc1_output" in internals.list_outputs()
    fc1 = internals["fc1_output"]
    assert fc1.list_outputs() == ["fc1_output"]
    g = sym.group([fc1, net])
    assert g.list_outputs() == ["fc1_output", "softmax_output"] and len(g) == 2
    assert sym.get_output(g, 1).list_outputs() == ["softmax_output"]
    with pytest.raises(IndexError):
        g[2]


def test_infer_shape_and_type():
    net = mlp()
    args, outs, aux = sym.infer_shape(net, {"data": (100, 784)})
    assert dict(zip(net.list_arguments(), args))["fc1_weight"] == (128, 784)
    assert dict(zip(net.list_arguments(), args))["softmax_label"] == (100,)
    assert outs == [(100, 10)] and aux == []
    at, ot, _ = sym.infer_type(net, data="float32")
    assert all(t == np.float32 for t in at + ot)


def test_infer_shape_names_what_is_missing():
    net = mlp()
    with pytest.raises(mx.MXFNError, match="data"):
        sym.infer_shape(net, {})


def test_json_round_trip_and_files(tmp_path):
    net = mlp()
    text = sym.to_json(net)
    assert sym.to_json(sym.load_json(text)) == text
    sym.save(net, tmp_path / "net-symbol.json")
    assert sym.to_json(sym.load(tmp_path / "net-symbol.json")) == text


def test_variable_options():
    v = sym.variable("w", {"shape": (3, 4), "lr-mult": 2.0, "attr": {"__layout__": "NC"}})
    assert v.attr("__shape__") == "(3, 4)" and v.attr("__lr_mult__") == "2.0" and v.attr("__layout__") == "NC"


@pytest.mark.parametrize("call,words", [
    (lambda: sym.fully_connected(sym.variable("d"), num_hiden=3), ["num_hiden", "num_hidden"]),
    (lambda: sym.fully_connected(sym.variable("d"), num_hidden="x"), ["num_hidden", "x"]),
    (lambda: sym.activation(sym.variable("d"), act_type="nope"), ["act_type", "nope"]),
    (lambda: sym.load_json('{"nodes": [{"op": "NoSuchOp", "name": "n", "inputs": []}], "heads": [[0,0,0]]}'),
     ["NoSuchOp"]),
    (lambda: sym.load_json("not json"), ["JSON"]),
])
def test_bad_symbols_raise_naming_the_problem(call, words):
    with pytest.raises(mx.MXFNError) as e:
        call()
    for w in words:
        assert w in str(e.value)


def test_impossible_shape_names_node_and_argument():
    d = sym.variable("data")
    net = sym.fully_connected(d, num_hidden=3, name="fc")
    with pytest.raises(mx.MXFNError) as e:
        sym.infer_shape(net, {"data": (2, 5), "fc_weight": (3, 4)})
    assert "fc" in str(e.value) and "weight" in str(e.value)


def test_imperative_ops_from_the_registry():
    x = mx.nd.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    w = mx.nd.ones((4, 3))
    b = mx.nd.zeros(4)
    y = mx.nd.fully_connected(x, w, b, num_hidden=4)
    np.testing.assert_allclose(y.asnumpy(), np.arange(6).reshape(2, 3).sum(1, keepdims=True).repeat(4, 1))
    np.testing.assert_allclose(mx.nd.relu(x - 2).asnumpy(), np.maximum(np.arange(6).reshape(2, 3) - 2, 0))
    assert "num_hidden" in mx.sym.fully_connected.__doc__ and "num_hidden" in mx.nd.fully_connected.__doc__


def test_creation_symbols_write_mxnets_nodes_and_compute():
    import json
    z = mx.sym.zeros((2, 3), name="z")
    node = json.loads(z.tojson())["nodes"][-1]
    assert (node["op"], node["name"], node["attrs"]) == ("_zeros", "z", {"dtype": "float32", "shape": "(2, 3)"})
    f = mx.sym.full((2,), 2.5, dtype="int32")
    assert json.loads(f.tojson())["nodes"][-1]["attrs"] == {"dtype": "int32", "shape": "(2,)", "value": "2.5"}
    net = mx.sym.variable("data") * mx.sym.ones((2, 3)) + mx.sym.full((2, 3), 0.5)
    exe = mx.executor.simple_bind(net, mx.cpu(), data=(2, 3))
    mx.executor.forward(exe, data=np.full((2, 3), 2.0))
    np.testing.assert_array_equal(mx.executor.outputs(exe)[0].asnumpy(), np.full((2, 3), 2.5))
    with pytest.raises(TypeError, match="sym.zeros: shape must be a tuple of ints"):
        mx.sym.zeros("2")
    # A 0 size is inferred from the nodes using it (MXNet's begin states); alone, nothing does.
    with pytest.raises(mx.MXFNError, match="nothing that infers them"):
        mx.sym.zeros((0, 3)).infer_shape()
    state = mx.sym.variable("data") + mx.sym.zeros((0, 3))
    assert mx.sym.infer_shape(state, {"data": (5, 3)})[1] == [(5, 3)]
