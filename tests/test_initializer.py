"""mx.initializer: constructors and MXNet's dumps() strings, create from names and specs, the
name rules and __init__ attributes, mixed and load, seeding, immutability and errors."""

import inspect
import json
import pickle

import numpy as np
import pytest

from mxfn import initializer as I
from mxfn import ndarray as nd
from mxfn import random as R
from mxfn._errors import MXFNError


@pytest.mark.parametrize("init, dumped", [
    (I.uniform(), '["uniform", {"scale": 0.07}]'),
    (I.uniform(0.01), '["uniform", {"scale": 0.01}]'),
    (I.normal(), '["normal", {"sigma": 0.01}]'),
    (I.xavier(), '["xavier", {"rnd_type": "uniform", "factor_type": "avg", "magnitude": 3}]'),
    (I.xavier(rand_type="gaussian", factor_type="in", magnitude=2),
     '["xavier", {"rnd_type": "gaussian", "factor_type": "in", "magnitude": 2}]'),
    (I.msra_prelu(), '["msraprelu", {"factor_type": "avg", "slope": 0.25}]'),
    (I.constant(0.5), '["constant", {"value": 0.5}]'),
    (I.zero(), '["zero", {}]'),
    (I.one(), '["one", {}]'),
    (I.orthogonal(), '["orthogonal", {"scale": 1.414, "rand_type": "uniform"}]'),
    (I.bilinear(), '["bilinear", {}]'),
    (I.lstm_bias(), '["lstmbias", {"forget_bias": 1.0}]'),
])
def test_dumps_is_mxnets_json(init, dumped):
    assert init.dumps() == I.dumps(init) == dumped
    assert I.create(dumped) == init


@pytest.mark.parametrize("spec, expected", [
    ("xavier", I.xavier()), ("Xavier", I.xavier()), ("zeros", I.zero()), ("ones", I.one()),
    ("msraprelu", I.msra_prelu()), ("lstm_bias", I.lstm_bias()),
    ('["xavier", {"magnitude": 2}]', I.xavier(magnitude=2)), ('["zero"]', I.zero()),
])
def test_create_from_names_and_specs(spec, expected):
    assert I.create(spec) == expected


def test_create_errors_name_close_matches():
    with pytest.raises(MXFNError, match='did you mean "xavier"'):
        I.create("xavir")
    with pytest.raises(MXFNError, match='"uniform" or "gaussian"'):
        I.xavier(rnd_type="normal")
    with pytest.raises(MXFNError, match="factor_type"):
        I.msra_prelu(factor_type="fan")
    with pytest.raises(MXFNError, match='did you mean "scale"'):
        I.uniform(scal=1)
    with pytest.raises(MXFNError, match="sigma"):
        I.normal(-1.0)
    with pytest.raises(MXFNError, match="value"):
        I.constant()
    with pytest.raises(MXFNError, match="not valid JSON"):
        I.create('["xavier", {')


@pytest.mark.parametrize("name, value", [
    ("fc_bias", 0), ("bn_beta", 0), ("q_min", 0), ("bn_moving_mean", 0), ("bn_running_mean", 0),
    ("x_moving_inv_var", 0), ("x_moving_avg", 0),
    ("bn_gamma", 1), ("q_max", 1), ("bn_moving_var", 1), ("bn_running_var", 1),
])
def test_name_rules(name, value):
    out = I.apply(I.uniform(), name, np.full((3,), 5.0, np.float64))
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out.asnumpy(), np.full(3, value))


@pytest.mark.parametrize("attr, value", [
    ('["zero", {}]', 0.0), ("ones", 1.0), ('["constant", {"value": 2.5}]', 2.5),
    (I.constant(4.0), 4.0),
])
def test_init_attribute_wins_whatever_the_name(attr, value):
    for name in ["fc_weight", "fc_bias", "data"]:
        out = I.apply(I.uniform(), name, np.zeros((2, 2)), {"__init__": attr})
        np.testing.assert_array_equal(out.asnumpy(), np.full((2, 2), value))


def test_unknown_name_raises_naming_it():
    with pytest.raises(MXFNError, match='"data"'):
        I.apply(I.xavier(), "data", np.zeros(2))
    with pytest.raises(MXFNError, match="fc_weight"):
        I.apply(I.xavier(), "fc_weight", np.zeros(4))  # Xavier needs 2-D


def test_apply_returns_new_array_and_keeps_context():
    x = nd.array(np.full((2, 3), 9.0, np.float32))
    out = I.apply(I.one(), "w_weight", x)
    np.testing.assert_array_equal(x.asnumpy(), np.full((2, 3), 9.0))
    np.testing.assert_array_equal(out.asnumpy(), np.ones((2, 3)))
    assert isinstance(out, nd.NDArray) and out.context == x.context


def test_variable_init_attr_round_trips():
    from mxfn import symbol as S
    v = S.variable("w", init=I.xavier(magnitude=2))
    attrs = {"__init__": S.attr(v, "__init__")}
    assert attrs["__init__"] == I.xavier(magnitude=2).dumps()
    R.seed(3)
    a = I.apply(I.zero(), "w", np.zeros((4, 5)), attrs).asnumpy()
    assert np.abs(a).max() > 0 and np.abs(a).max() <= np.sqrt(2 / 4.5)


def test_seed_makes_initialisation_reproducible():
    for init in [I.uniform(), I.normal(), I.xavier(), I.msra_prelu(), I.orthogonal()]:
        R.seed(42)
        a = I.apply(init, "w_weight", np.zeros((8, 6))).asnumpy()
        R.seed(42)
        b = I.apply(init, "w_weight", np.zeros((8, 6))).asnumpy()
        np.testing.assert_array_equal(a, b)
        assert not np.array_equal(a, I.apply(init, "w_weight", np.zeros((8, 6))).asnumpy())


def test_xavier_fans_4d():
    # (32, 16, 3, 3): fan_in 144, fan_out 288 -> avg 216, bound sqrt(3 / 216)
    w = I.apply(I.xavier(), "conv_weight", np.zeros((32, 16, 3, 3))).asnumpy()
    bound = np.sqrt(3 / 216)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound


def test_mixed_uses_re_match_and_child_rules():
    init = I.mixed(["bias", ".*"], [I.constant(3.0), I.constant(2.0)])
    np.testing.assert_array_equal(I.apply(init, "fc_weight", np.zeros(2)).asnumpy(), [2, 2])
    np.testing.assert_array_equal(I.apply(init, "fc_bias", np.ones(2)).asnumpy(), [0, 0])
    np.testing.assert_array_equal(I.apply(init, "bias_weight", np.zeros(2)).asnumpy(), [3, 3])
    assert I.mixed([r"fc\d_w"], [I.one()]).patterns == (r"fc\d_w",)
    with pytest.raises(MXFNError, match="other_weight"):
        I.apply(I.mixed(["^fc1_"], [I.one()]), "other_weight", np.zeros(2))
    with pytest.raises(MXFNError, match="same length"):
        I.mixed(["a"], [])
    with pytest.raises(MXFNError, match="regular expression"):
        I.mixed(["("], [I.one()])
    with pytest.raises(MXFNError, match="no JSON form"):
        I.mixed([".*"], [I.one()]).dumps()


def test_load_prefixes_default_and_shape_errors(tmp_path):
    init = I.load({"arg:fc_weight": np.full((2, 2), 5.0), "aux:bn_moving_var": np.full(3, 2.0)},
                  default_init=I.constant(0.1))
    np.testing.assert_array_equal(I.apply(init, "fc_weight", np.zeros((2, 2))).asnumpy(), np.full((2, 2), 5))
    np.testing.assert_array_equal(I.apply(init, "bn_moving_var", np.zeros(3)).asnumpy(), np.full(3, 2))
    np.testing.assert_allclose(I.apply(init, "fc2_weight", np.zeros(2)).asnumpy(), [0.1, 0.1])
    out = I.apply(init, "fc_weight", np.zeros((2, 2), np.float64))
    assert out.dtype == np.float64
    with pytest.raises(MXFNError, match=r"fc_weight.*\(3,\)"):
        I.apply(init, "fc_weight", np.zeros(3))
    with pytest.raises(MXFNError, match="fc2_weight"):
        I.apply(I.load({"w": np.zeros(1)}), "fc2_weight", np.zeros(1))
    f = tmp_path / "p.params"
    nd.save(str(f), {"arg:w_weight": nd.array([1.0, 2.0])})
    np.testing.assert_array_equal(I.apply(I.load(str(f)), "w_weight", np.zeros(2)).asnumpy(), [1, 2])


def test_values_are_immutable_and_picklable():
    x = I.xavier()
    with pytest.raises(TypeError):
        x.kind = "uniform"
    with pytest.raises(TypeError):
        x.kwargs["magnitude"] = 1
    assert pickle.loads(pickle.dumps(x)) == x and hash(x) == hash(I.xavier())


def test_every_function_is_documented():
    for fname in ["uniform", "normal", "xavier", "msra_prelu", "constant", "zero", "one",
                  "orthogonal", "bilinear", "lstm_bias", "fused_rnn", "mixed", "load", "apply", "create", "dumps"]:
        doc = inspect.getdoc(getattr(I, fname))
        assert "Example:" in doc, fname
    for spec_name in [n for n in dir(I) if n.endswith("_OPTS")]:
        for key, s in getattr(I, spec_name).items():
            assert s.doc, (spec_name, key)


def _fused_module(init, **cell_kw):
    import mxfn as mx
    from mxfn import module as m
    from mxfn import rnn
    cell = rnn.fused_rnn_cell(3, prefix="f_", **cell_kw)
    outs, _ = rnn.unroll(cell, 4, inputs=mx.sym.var("data"), layout="TNC", merge_outputs=True)
    mod = m.module(outs, label_names=[])
    m.bind(mod, data_shapes=[("data", (4, 2, 5))], for_training=False)
    R.seed(0)
    m.init_params(mod, initializer=init)
    return rnn.unpack_weights(cell, m.get_params(mod)[0])


def test_a_fused_rnn_cell_initialises_piece_by_piece_as_mxnet():
    # MXNet's FusedRNN(None, ...) on the cell's parameters: every gate's weight drawn by the
    # module's initializer on its own fans, biases 0, both lstm forget-gate biases forget_bias.
    pieces = _fused_module(I.xavier(magnitude=3), num_layers=2, mode="lstm", forget_bias=1.5)
    assert len(pieces) == 2 * 4 * 4  # layers x gates x (i2h, h2h) x (weight, bias)
    for name, a in pieces.items():
        a = a.asnumpy()
        if name.endswith("_f_bias"):
            assert (a == 1.5).all(), name
        elif name.endswith("_bias"):
            assert (a == 0).all(), name
        else:
            bound = (3 / ((a.shape[0] + a.shape[1]) / 2)) ** 0.5
            assert np.abs(a).max() <= bound and a.std() > bound / 4, name


def test_a_fused_rnn_initializer_with_its_own_init_and_as_json():
    f = I.fused_rnn(init=I.constant(0.5), num_hidden=3, num_layers=1, mode="gru", bidirectional=True)
    assert I.create(f.dumps()) == f and I.create("fusedrnn", num_hidden=3, num_layers=1, mode="gru") != f
    assert f.dumps() == ('["fusedrnn", {"init": "[\\"constant\\", {\\"value\\": 0.5}]", "num_hidden": 3, '
                         '"num_layers": 1, "mode": "gru", "bidirectional": true, "forget_bias": 1.0}]')
    vec = I.apply(f, "gru_parameters", np.zeros(2 * (3 * 3 * (5 + 3) + 2 * 3 * 3))).asnumpy()
    assert sorted(set(vec.tolist())) == [0.0, 0.5]  # weights 0.5, biases 0 (the name rules)
    # without an inner init, the module's initializer fills the pieces by their names
    pieces = _fused_module(I.uniform(0.01), mode="gru")
    assert all(((a.asnumpy() == 0) if n.endswith("bias") else (np.abs(a.asnumpy()) <= 0.01)).all()
               for n, a in pieces.items())


@pytest.mark.parametrize("call, match", [
    (lambda: I.fused_rnn(num_hidden=3, num_layers=1, mode="lstmx"), 'option "mode" expects one of'),
    (lambda: I.fused_rnn(num_hidden=0, num_layers=1, mode="lstm"), 'option "num_hidden" expects a positive int'),
    (lambda: I.apply(I.fused_rnn(num_hidden=3, num_layers=1, mode="lstm"), "p", np.zeros(10)),
     'parameter "p": its fused RNN initializer has no inner init'),
    (lambda: I.apply(I.xavier(), "p", np.zeros(10),
                     {"__init__": I.fused_rnn(num_hidden=3, num_layers=1, mode="lstm").dumps()}),
     'parameter "p" does not fit its fused RNN initializer'),
])
def test_fused_rnn_initializer_errors(call, match):
    with pytest.raises(MXFNError, match=match):
        call()


def test_fused_rnn_matches_mxnet_vector_for_vector(mxnet_python):
    # MXNet's FusedRNN with a deterministic inner init (Constant: weights 0.5, biases 0 by the
    # name rules, lstm forget-gate biases forget_bias), the whole flat vector compared. (MXNet
    # cannot rebuild FusedRNN(Constant) from its own dumps(), so _init_weight is called.)
    cases = [("gru", 1, True, 1.0), ("lstm", 2, False, 1.5), ("rnn_tanh", 2, True, 1.0)]

    def size(mode, layers, bi):
        g, d = {"gru": 3, "lstm": 4}.get(mode, 1), 2 if bi else 1
        return sum(g * 3 * ((5 if layer == 0 else 3 * d) + 3) * d + 2 * g * 3 * d for layer in range(layers))

    out = mxnet_python(f"""
import json, mxnet as mx
res = []
for mode, layers, bi, fb in {cases!r}:
    init = mx.init.FusedRNN(mx.init.Constant(0.5), 3, layers, mode, bi, fb)
    n = {{c[0]: s for c, s in zip({cases!r}, {[size(m, n, b) for m, n, b, _ in cases]!r})}}[mode]
    arr = mx.nd.zeros((n,))
    init._init_weight(mx.init.InitDesc(mode + "_parameters"), arr)
    res.append(arr.asnumpy().tolist())
print(json.dumps(res))
""")
    want = json.loads(out.strip().splitlines()[-1])
    for (mode, layers, bi, fb), w in zip(cases, want):
        f = I.fused_rnn(init=I.constant(0.5), num_hidden=3, num_layers=layers, mode=mode, bidirectional=bi,
                        forget_bias=fb)
        got = I.apply(f, mode + "_parameters", np.zeros(size(mode, layers, bi))).asnumpy()
        np.testing.assert_array_equal(got, np.array(w, np.float32), err_msg=mode)
