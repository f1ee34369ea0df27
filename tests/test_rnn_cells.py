"""mx.rnn (SPEC §9.1): cells, unroll, begin states, fused weights and encode_sentences, judged
against MXNet 1.9.1's ``mx.rnn`` (names, numbers, files in both directions)."""

import json
import subprocess
import warnings

import numpy as np
import pytest

import mxfn as mx
import mxfn.rnn as rnn
from mxfn import module as m
from mxfn._ops import attr_str

import rnn_helpers as H
from conftest import MXNET_PYTHON

def _run_mxnet(code, *args):
    out = subprocess.run([str(MXNET_PYTHON), "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"MXNet failed:\n{out.stderr[-3000:]}"
    return out.stdout


@pytest.fixture(scope="session")
def mxnet_cases(mxnet_python, tmp_path_factory):
    """Every case of rnn_helpers.CASES recorded by MXNet 1.9.1: symbol, args, outputs, names."""
    d = tmp_path_factory.mktemp("rnn_cases")
    _run_mxnet(H.RECORD_CASES, str(d), H.case_table_for_mxnet())
    return d, json.loads((d / "meta.json").read_text())


@pytest.fixture(scope="session")
def mxnet_lm(mxnet_python, tmp_path_factory):
    """MXNet's lstm_bucketing.py model: checkpoint, an input and MXNet's output on it."""
    d = tmp_path_factory.mktemp("rnn_lm")
    _run_mxnet(H.RECORD_LM, str(d))
    return d, json.loads((d / "lm-meta.json").read_text())


def _np(x):
    return np.asarray(x.asnumpy() if hasattr(x, "asnumpy") else x)


def _forward(sym, args):
    exe = mx.executor.bind(sym, mx.cpu(), args, grad_req="null")
    mx.executor.forward(exe, is_train=False)
    return [_np(o) for o in mx.executor.outputs(exe)]


# -- names ---------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(H.CASES))
def test_names_match_mxnet(case, mxnet_cases):
    _, meta = mxnet_cases
    want = meta[case]
    sym, state_names, _ = H.mxfn_graph(case)
    cell = H.CASES[case][1]()
    assert sym.list_arguments() == want["arguments"]
    assert H.normalize_output_names(sym.list_outputs()) == H.normalize_output_names(want["outputs"])
    assert H.normalize_output_names(state_names) == H.normalize_output_names(want["states"])
    assert [s.name for s in rnn.begin_state(cell, func=mx.sym.var)] == want["begin"]
    assert [{"shape": list(i["shape"]), "layout": i["__layout__"]} for i in rnn.state_info(cell)] \
        == want["state_info"]


# -- numbers -------------------------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(H.CASES))
def test_outputs_match_mxnet(case, mxnet_cases):
    d, _ = mxnet_cases
    args = mx.nd.load(str(d / f"{case}-args.params"))
    want = mx.nd.load(str(d / f"{case}-out.params"))
    sym, _, _ = H.mxfn_graph(case)
    got = _forward(sym, args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, _np(w), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", sorted(H.CASES))
def test_mxnet_symbol_file_runs_in_mxfn(case, mxnet_cases):
    d, _ = mxnet_cases
    sym = mx.sym.load(str(d / f"{case}-symbol.json"))
    got = _forward(sym, mx.nd.load(str(d / f"{case}-args.params")))
    for g, w in zip(got, mx.nd.load(str(d / f"{case}-out.params"))):
        np.testing.assert_allclose(g, _np(w), rtol=1e-4, atol=1e-5)


def test_unroll_layouts_and_merge_shapes():
    cell = rnn.gru_cell(4)
    x = mx.sym.var("data")
    for layout, shape in (("NTC", (2, 3, 5)), ("TNC", (3, 2, 5))):
        begin = rnn.begin_state(cell, func=mx.sym.var)
        st_shapes = {"gru_begin_state_0": (2, 4)}
        merged, _ = rnn.unroll(cell, 3, inputs=x, begin_state=begin, layout=layout, merge_outputs=True)
        assert isinstance(merged, mx.sym.Symbol)
        out_shape = (2, 3, 4) if layout == "NTC" else (3, 2, 4)
        assert mx.sym.infer_shape(merged, data=shape, **st_shapes)[1] == [out_shape]
        for merge in (False, None):
            outs, _ = rnn.unroll(cell, 3, inputs=x, begin_state=begin, layout=layout, merge_outputs=merge)
            assert isinstance(outs, list) and len(outs) == 3
            assert mx.sym.infer_shape(outs[2], data=shape, **st_shapes)[1] == [(2, 4)]
    # a list of per-step inputs works the same and is merged on the time axis of the layout
    steps = [mx.sym.var(f"x{i}") for i in range(3)]
    merged, _ = rnn.unroll(cell, 3, inputs=steps, begin_state=rnn.begin_state(cell, func=mx.sym.var),
                           layout="TNC", merge_outputs=True)
    shapes = {f"x{i}": (2, 5) for i in range(3)} | {"gru_begin_state_0": (2, 4)}
    assert mx.sym.infer_shape(merged, shapes)[1] == [(3, 2, 4)]


def test_step_names_and_values_follow_the_unroll():
    cell = rnn.lstm_cell(3, prefix="s_")
    x = mx.sym.var("x")
    begin = rnn.begin_state(cell, func=mx.sym.var)
    out0, st0 = rnn.step(cell, x, begin)
    out1, st1 = rnn.step(cell, x, st0, t=1)
    assert (out0.name, out1.name) == ("s_t0_out", "s_t1_out")
    assert [s.name for s in st1] == ["s_t1_out", "s_t1_state"]
    # two steps on the same input = a two-step unroll on that input repeated
    outs, _ = rnn.unroll(cell, 2, inputs=[x, x], begin_state=begin)
    rng = np.random.RandomState(0)
    args = {n: rng.uniform(-1, 1, s) for n, s in zip(
        out1.list_arguments(), mx.sym.infer_shape(out1, x=(2, 4), s_begin_state_0=(2, 3), s_begin_state_1=(2, 3))[0])}
    np.testing.assert_allclose(_forward(out1, args)[0], _forward(outs[1], args)[0], rtol=1e-6)


def test_dropout_and_zoneout_are_identity_in_inference():
    x = mx.sym.var("data")
    base = rnn.lstm_cell(4)
    plain, _ = rnn.unroll(base, 3, inputs=x, begin_state=rnn.begin_state(base, func=mx.sym.var), merge_outputs=True)
    for wrapped in (rnn.zoneout_cell(base, zoneout_outputs=0.5, zoneout_states=0.5),
                    rnn.sequential_rnn_cell([rnn.dropout_cell(0.5), base, rnn.dropout_cell(0.3)])):
        outs, _ = rnn.unroll(wrapped, 3, inputs=x, begin_state=rnn.begin_state(wrapped, func=mx.sym.var),
                             merge_outputs=True)
        assert outs.list_arguments() == plain.list_arguments()
        rng = np.random.RandomState(1)
        shapes = mx.sym.infer_shape(plain, data=(2, 3, 5), lstm_begin_state_0=(2, 4), lstm_begin_state_1=(2, 4))[0]
        args = {n: rng.uniform(-1, 1, s) for n, s in zip(plain.list_arguments(), shapes)}
        np.testing.assert_allclose(_forward(outs, args)[0], _forward(plain, args)[0], rtol=1e-6)


def test_dropout_cell_drops_in_training():
    cell = rnn.dropout_cell(0.5)
    outs, states = rnn.unroll(cell, 2, inputs=mx.sym.var("data"), merge_outputs=True)
    assert states == []
    exe = mx.executor.bind(outs, mx.cpu(), {"data": np.ones((50, 2, 4))}, grad_req="null")
    got = _np(mx.executor.outputs(mx.executor.forward(exe, is_train=True))[0])
    assert set(np.unique(got)) <= {0.0, 2.0} and 0 < (got == 0).mean() < 1


# -- MXNet's bucketing model, both ways ---------------------------------------------------

def test_mxfn_build_of_the_bucketing_model_lists_mxnets_names(mxnet_lm):
    _, meta = mxnet_lm
    sym, states = H.lm_symbol(H.LM["length"], H.zeros_of_batch(H.LM["batch"]))
    assert sym.list_arguments() == meta["arguments"]
    assert sym.list_outputs() == meta["outputs"]
    assert [s.name for s in states] == meta["states"]


def test_mxfn_default_begin_state_build_matches_mxnet(mxnet_lm):
    _, meta = mxnet_lm
    sym, states = H.lm_symbol(H.LM["length"])
    assert sym.list_arguments() == meta["arguments"]
    zeros = [n for n in json.loads(sym.tojson())["nodes"] if n["op"] == "_zeros"]
    assert [n["name"] for n in zeros] == [f"lstm_l{i}_begin_state_{j}" for i in range(2) for j in range(2)]


def test_mxnet_bucketing_checkpoint_predicts_the_same_in_mxfn(mxnet_lm):
    d, _ = mxnet_lm
    mod = m.load_checkpoint(str(d / "lm"), 1)
    x = np.load(d / "lm-x.npy")
    m.bind(mod, data_shapes=[("data", x.shape)], label_shapes=[("softmax_label", x.shape)], for_training=False)
    m.forward(mod, {"data": [x], "label": [np.zeros(x.shape)]}, is_train=False)
    np.testing.assert_allclose(_np(m.outputs_merged(mod)[0]), np.load(d / "lm-out.npy"), rtol=1e-4, atol=1e-6)


def test_mxnet_bucketing_params_run_in_the_mxfn_build(mxnet_lm):
    # MXNet's checkpoint weights in mxfn's own build of the model: the same predictions.
    d, _ = mxnet_lm
    params = mx.nd.load(str(d / "lm-0001.params"))
    args = {k[4:]: v for k, v in params.items() if k.startswith("arg:")}
    x = np.load(d / "lm-x.npy")
    sym, _ = H.lm_symbol(H.LM["length"], H.zeros_of_batch(x.shape[0]))
    mod = m.module(sym)
    m.bind(mod, data_shapes=[("data", x.shape)], label_shapes=[("softmax_label", x.shape)], for_training=False)
    m.init_params(mod, arg_params=args)
    m.forward(mod, {"data": [x], "label": [np.zeros(x.shape)]}, is_train=False)
    np.testing.assert_allclose(_np(m.outputs_merged(mod)[0]), np.load(d / "lm-out.npy"), rtol=1e-4, atol=1e-6)


def test_mxfn_checkpoint_of_an_rnn_model_predicts_the_same_in_mxnet(mxnet_python, tmp_path):
    x = np.random.RandomState(4).randint(0, H.LM["vocab"], size=(H.LM["batch"], 5)).astype("float32")
    sym, _ = H.lm_symbol(5, H.zeros_of_batch(x.shape[0]))
    mod = m.module(sym)
    m.bind(mod, data_shapes=[("data", x.shape)], label_shapes=[("softmax_label", x.shape)], for_training=False)
    mx.random.seed(2)
    m.init_params(mod, initializer=mx.init.xavier())
    m.forward(mod, {"data": [x], "label": [np.zeros(x.shape)]}, is_train=False)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "want.npy", _np(m.outputs_merged(mod)[0]))
    m.save_checkpoint(mod, prefix=str(tmp_path / "lm"), epoch=1)
    res = json.loads(_run_mxnet(H.CHECK_MXFN_LM, str(tmp_path / "lm"), str(tmp_path / "x.npy"),
                                str(tmp_path / "want.npy")))
    assert res["shape"] == [x.size, H.LM["vocab"]]
    assert res["max_abs_diff"] < 1e-5
    assert "lstm_l1_h2h_weight" in res["arguments"]


def test_a_bucketing_lm_of_rnn_cells_trains():
    v, batch = H.LM["vocab"], 8
    rng = np.random.RandomState(0)

    def sym_gen(seq_len):
        sym, _ = H.lm_symbol(seq_len, H.zeros_of_batch(batch))
        return sym, ["data"], ["softmax_label"]

    def make_batch(key):
        # a learnable language: each token is followed by the next id (mod vocab)
        start = rng.randint(0, v, size=(batch, 1))
        seq = (start + np.arange(key + 1)) % v
        return {"data": [seq[:, :-1].astype("float32")], "label": [seq[:, 1:].astype("float32")],
                "bucket_key": key, "provide_data": [("data", (batch, key))],
                "provide_label": [("softmax_label", (batch, key))]}

    mx.random.seed(1)
    bm = m.bucketing_module(sym_gen, default_bucket_key=6)
    m.bind(bm, data_shapes=[("data", (batch, 6))], label_shapes=[("softmax_label", (batch, 6))])
    m.init_params(bm, initializer=mx.init.xavier())
    m.init_optimizer(bm, optimizer="adam", optimizer_params={"learning_rate": 0.02})
    losses = []
    for i in range(60):
        b = make_batch([3, 4, 6][i % 3])
        m.forward_backward(bm, b)
        prob = _np(m.outputs_merged(bm)[0])
        lab = b["label"][0].reshape(-1).astype(int)
        losses.append(float(-np.log(prob[np.arange(lab.size), lab] + 1e-9).mean()))
        m.update(bm)
    assert sorted(m.buckets(bm)) == [3, 4, 6]
    assert np.mean(losses[-6:]) < 0.6 * np.mean(losses[:6]), losses
    # the shared weights are the rnn cells' names
    assert {"lstm_l0_i2h_weight", "lstm_l1_h2h_bias", "embed_weight", "pred_weight"} <= set(m.get_params(bm)[0])


# -- fused cells, pack / unpack -----------------------------------------------------------

@pytest.fixture(scope="session")
def mxnet_packs(mxnet_python, tmp_path_factory):
    d = tmp_path_factory.mktemp("rnn_pack")
    _run_mxnet(H.RECORD_PACK, str(d), json.dumps(H.PACK_CASES))
    return d


@pytest.mark.parametrize("case", sorted(H.PACK_CASES))
def test_unpack_and_pack_agree_with_mxnet(case, mxnet_packs):
    h, layers, mode, bi, _ = H.PACK_CASES[case]
    cell = rnn.fused_rnn_cell(h, num_layers=layers, mode=mode, bidirectional=bi, prefix=case + "_")
    flat = mx.nd.load(str(mxnet_packs / f"{case}-flat.params"))["p"]
    given = {case + "_parameters": flat, "other": np.ones(2)}
    unpacked = rnn.unpack_weights(cell, given)
    want = mx.nd.load(str(mxnet_packs / f"{case}-unpacked.params"))
    assert sorted(unpacked) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(_np(unpacked[k]), _np(want[k]), err_msg=k)
    assert set(given) == {case + "_parameters", "other"}  # the input is not changed
    packed = rnn.pack_weights(rnn.unfuse(cell), unpacked)
    want = mx.nd.load(str(mxnet_packs / f"{case}-packed.params"))
    assert sorted(packed) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(_np(packed[k]), _np(want[k]), err_msg=k)
    # and back: unpack the per-cell weights, pack them into the fused vector
    again = rnn.pack_weights(cell, rnn.unpack_weights(rnn.unfuse(cell), packed))
    np.testing.assert_array_equal(_np(again[case + "_parameters"]), _np(flat))


@pytest.mark.parametrize("make,prefix,gates", [
    (lambda: rnn.lstm_cell(3), "lstm_", ["_i", "_f", "_c", "_o"]),
    (lambda: rnn.gru_cell(3), "gru_", ["_r", "_z", "_o"]),
    (lambda: rnn.rnn_cell(3), "rnn_", [""]),
])
def test_plain_cell_unpack_pack_round_trip(make, prefix, gates):
    cell = make()
    rng = np.random.RandomState(0)
    n = 3 * len(gates)
    args = {f"{prefix}i2h_weight": rng.rand(n, 5), f"{prefix}i2h_bias": rng.rand(n),
            f"{prefix}h2h_weight": rng.rand(n, 3), f"{prefix}h2h_bias": rng.rand(n)}
    unpacked = rnn.unpack_weights(cell, args)
    assert sorted(unpacked) == sorted(f"{prefix}{g}{gate}_{k}" for g in ("i2h", "h2h") for gate in gates
                                      for k in ("weight", "bias"))
    np.testing.assert_array_equal(_np(unpacked[f"{prefix}h2h{gates[-1]}_weight"]), args[f"{prefix}h2h_weight"][-3:])
    back = rnn.pack_weights(cell, unpacked)
    for k, v in args.items():
        np.testing.assert_allclose(_np(back[k]), v, rtol=1e-6)


def test_fused_cell_values_names_and_states():
    c = rnn.fused_rnn_cell(4, num_layers=2, mode="gru", bidirectional=True, dropout=0.5, get_next_state=True)
    assert c.prefix == "gru_" and c.parameters.name == "gru_parameters"
    # MXNet's init.FusedRNN(None, …).dumps(), so MXNet initialises a saved symbol the same way
    assert json.loads(c.parameters.attr("__init__")) == [
        "fusedrnn", {"init": None, "num_hidden": 4, "num_layers": 2, "mode": "gru", "bidirectional": True,
                     "forget_bias": 1.0}]
    assert [dict(i) for i in rnn.state_info(c)] == [{"shape": (4, 0, 4), "__layout__": "LNC"}]
    lstm = rnn.fused_rnn_cell(3, prefix="f_")
    assert [s.name for s in rnn.begin_state(lstm, func=mx.sym.var)] == ["f_begin_state_0", "f_begin_state_1"]
    with pytest.raises(mx.MXFNError, match="cannot be stepped"):
        rnn.step(lstm, mx.sym.var("x"), rnn.begin_state(lstm, func=mx.sym.var))
    u = rnn.unfuse(c)
    assert [type(x).__name__ for x in u.cells] == ["BidirectionalCell", "DropoutCell", "BidirectionalCell"]
    assert u.cells[2].output_prefix == "gru_bi_l1_" and u.cells[1].prefix == "gru__dropout0_"


RECORD_FUSED_NODES = r'''
import json, sys
import mxnet as mx
out = []
for mode, layers, bi, layout, next_state in json.loads(sys.argv[1]):
    cell = mx.rnn.FusedRNNCell(4, num_layers=layers, mode=mode, bidirectional=bi, dropout=0.25,
                               get_next_state=next_state, prefix="fz_")
    outs, states = cell.unroll(3, inputs=mx.sym.Variable("data"), layout=layout, merge_outputs=True,
                               begin_state=cell.begin_state(func=mx.sym.Variable))
    nodes = json.loads(outs.tojson())["nodes"]
    node = [n for n in nodes if n["op"] == "RNN"][0]
    out.append({"name": node["name"], "attrs": node["attrs"], "n_states": len(states),
                "inputs": [nodes[i[0]]["op"] if nodes[i[0]]["op"] != "null" else nodes[i[0]]["name"]
                           for i in node["inputs"]],
                "head_op": nodes[-1]["op"]})
print(json.dumps(out))
'''

FUSED_NODE_CASES = [("lstm", 2, False, "TNC", True), ("gru", 1, True, "NTC", False),
                    ("rnn_relu", 3, True, "TNC", True), ("rnn_tanh", 1, False, "NTC", True)]


def test_fused_unroll_calls_the_rnn_operator_as_mxnet(mxnet_python, monkeypatch):
    # The RNN operator's node as MXNet writes it, checked on the call mxfn makes (the operator
    # itself stands in by a group of its inputs, so this runs without it).
    want = json.loads(_run_mxnet(RECORD_FUSED_NODES, json.dumps(FUSED_NODE_CASES)))
    calls = []

    def fake_rnn(**kw):
        calls.append(kw)
        states = [kw["state"]] + ([kw["state_cell"]] if "state_cell" in kw else [])
        return mx.sym.group([kw["data"]] + (states if kw["state_outputs"] else []))

    monkeypatch.setattr(mx.sym, "RNN", fake_rnn, raising=False)
    for (mode, layers, bi, layout, next_state), w in zip(FUSED_NODE_CASES, want):
        cell = rnn.fused_rnn_cell(4, num_layers=layers, mode=mode, bidirectional=bi, dropout=0.25,
                                  get_next_state=next_state, prefix="fz_")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outs, states = rnn.unroll(cell, 3, inputs=mx.sym.var("data"), layout=layout, merge_outputs=True,
                                      begin_state=rnn.begin_state(cell, func=mx.sym.var))
        assert any("NTC layout" in str(c.message) for c in caught) == (layout == "NTC")
        kw = calls[-1]
        inputs = {k: v for k, v in kw.items() if isinstance(v, mx.sym.Symbol)}
        attrs = {k: attr_str(v) for k, v in kw.items() if k not in inputs and k not in ("name", "attr")}
        attrs.update(kw["attr"])
        assert kw["name"] == w["name"] and attrs == w["attrs"]
        names = [("SwapAxis" if v.name.startswith("swapaxis") else v.name) for v in inputs.values()]
        assert names == w["inputs"]
        assert len(states) == w["n_states"]
        assert isinstance(outs, mx.sym.Symbol)


FUSED_RUNS = [("lstm", 2, False, "TNC"), ("gru", 1, True, "NTC"), ("rnn_tanh", 2, True, "TNC"),
              ("rnn_relu", 1, False, "NTC")]

RECORD_FUSED = r'''
import json, os, sys
import numpy as np
import mxnet as mx
out_dir, runs = sys.argv[1], json.loads(sys.argv[2])
for i, (mode, layers, bi, layout) in enumerate(runs):
    cell = mx.rnn.FusedRNNCell(4, num_layers=layers, mode=mode, bidirectional=bi, get_next_state=True)
    begin = cell.begin_state(func=mx.sym.Variable)
    outs, states = cell.unroll(3, inputs=mx.sym.Variable("data"), begin_state=begin, layout=layout,
                               merge_outputs=True)
    sym = mx.sym.Group([outs] + states)
    shapes = {"data": (2, 3, 5) if layout == "NTC" else (3, 2, 5)}
    for s, info in zip(begin, cell.state_info):
        shapes[s.name] = tuple(2 if d == 0 else d for d in info["shape"])
    arg_shapes, _, _ = sym.infer_shape(**shapes)
    rng = np.random.RandomState(i)
    args = {n: mx.nd.array(rng.uniform(-0.5, 0.5, size=s)) for n, s in zip(sym.list_arguments(), arg_shapes)}
    exe = sym.bind(mx.cpu(), args, grad_req="null")
    exe.forward(is_train=False)
    mx.nd.save(os.path.join(out_dir, "%d-args.params" % i), args)
    mx.nd.save(os.path.join(out_dir, "%d-out.params" % i), [o.copy() for o in exe.outputs])
    json.dump(sym.list_arguments(), open(os.path.join(out_dir, "%d-args.json" % i), "w"))
'''


def test_fused_cell_runs_as_mxnet(mxnet_python, tmp_path):
    _run_mxnet(RECORD_FUSED, str(tmp_path), json.dumps(FUSED_RUNS))
    for i, (mode, layers, bi, layout) in enumerate(FUSED_RUNS):
        cell = rnn.fused_rnn_cell(4, num_layers=layers, mode=mode, bidirectional=bi, get_next_state=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs, states = rnn.unroll(cell, 3, inputs=mx.sym.var("data"), layout=layout, merge_outputs=True,
                                      begin_state=rnn.begin_state(cell, func=mx.sym.var))
        sym = mx.sym.group([outs] + states)
        assert sym.list_arguments() == json.loads((tmp_path / f"{i}-args.json").read_text())
        got = _forward(sym, mx.nd.load(str(tmp_path / f"{i}-args.params")))
        for g, w in zip(got, mx.nd.load(str(tmp_path / f"{i}-out.params"))):
            np.testing.assert_allclose(g, _np(w), rtol=1e-4, atol=1e-5, err_msg=f"{mode} {layers} {bi} {layout}")


@pytest.mark.parametrize("mode,bi", [("lstm", False), ("gru", True), ("rnn_relu", True)])
def test_fused_and_unfused_cells_compute_the_same(mode, bi):
    cell = rnn.fused_rnn_cell(3, num_layers=2, mode=mode, bidirectional=bi, prefix="f_")
    x = mx.sym.var("data")
    fused, _ = rnn.unroll(cell, 4, inputs=x, layout="TNC", merge_outputs=True,
                          begin_state=rnn.begin_state(cell, func=mx.sym.var))
    unfused_cell = rnn.unfuse(cell)
    unfused, _ = rnn.unroll(unfused_cell, 4, inputs=x, layout="TNC", merge_outputs=True,
                            begin_state=rnn.begin_state(unfused_cell, func=mx.sym.var))
    rng = np.random.RandomState(0)
    b = 2 if bi else 1
    size = dict(zip(fused.list_arguments(), mx.sym.infer_shape(
        fused, data=(4, 2, 5), **{f"f_begin_state_{j}": (2 * b, 2, 3) for j in range(1 + (mode == "lstm"))})[0]))
    flat = rng.uniform(-0.5, 0.5, size["f_parameters"])
    data = rng.uniform(-1, 1, (4, 2, 5))
    zeros_f = {n: np.zeros(s) for n, s in size.items() if "begin_state" in n}
    got_f = _forward(fused, {"data": data, "f_parameters": flat, **zeros_f})[0]
    args = rnn.pack_weights(unfused_cell, rnn.unpack_weights(cell, {"f_parameters": flat}))
    zeros_u = {n: np.zeros((2, 3)) for n in unfused.list_arguments() if "begin_state" in n}
    got_u = _forward(unfused, {"data": data, **args, **zeros_u})[0]
    np.testing.assert_allclose(got_f, got_u, rtol=1e-4, atol=1e-5)


# -- encode_sentences ---------------------------------------------------------------------

def test_encode_sentences_matches_mxnet(mxnet_python):
    want = json.loads(_run_mxnet(H.RECORD_ENCODE, json.dumps(H.ENCODE_CASES)))
    for (sents, kw), (enc, vocab) in zip(H.ENCODE_CASES, want):
        given = dict(kw.get("vocab") or {})
        got_enc, got_vocab = rnn.encode_sentences(sents, kw)
        assert got_enc == enc and sorted(got_vocab.items()) == [tuple(p) for p in vocab]
        assert (kw.get("vocab") or {}) == given  # a given vocab is not modified


def test_encode_sentences_unknown_tokens():
    with pytest.raises(mx.MXFNError, match="unknown token 'zz'"):
        rnn.encode_sentences([["a", "zz"]], vocab={"a": 0})
    enc, vocab = rnn.encode_sentences([["a", "zz", "yy"]], vocab={"a": 0, "\n": -1}, unknown_token="<unk>")
    assert enc == [[0, 1, 1]] and vocab == {"a": 0, "\n": -1, "<unk>": 1}


# -- errors -------------------------------------------------------------------------------

@pytest.mark.parametrize("call,exc,match", [
    (lambda: rnn.lstm_cell(0), mx.MXFNError, '"num_hidden" expects a positive int, got 0'),
    (lambda: rnn.lstm_cell(4.5), TypeError, '"num_hidden" expects a positive int, got float'),
    (lambda: rnn.lstm_cell(4, prefx="a_"), mx.MXFNError, 'unknown option "prefx"; did you mean "prefix"'),
    (lambda: rnn.gru_cell(4, prefix=3), TypeError, 'option "prefix" expects str, got int'),
    (lambda: rnn.rnn_cell(4, activation=3), TypeError, 'option "activation" expects'),
    (lambda: rnn.fused_rnn_cell(4, mode="lstmx"), mx.MXFNError, 'option "mode" expects one of .*got \'lstmx\''),
    (lambda: rnn.fused_rnn_cell(4, num_layers=0), mx.MXFNError, '"num_layers" expects a positive int, got 0'),
    (lambda: rnn.fused_rnn_cell(4, dropout=1.5), mx.MXFNError, r'option "dropout" expects a number in \[0, 1\), got 1.5'),
    (lambda: rnn.zoneout_cell(rnn.lstm_cell(4), zoneout_states=2.0), mx.MXFNError, '"zoneout_states" expects'),
    (lambda: rnn.zoneout_cell(rnn.fused_rnn_cell(4)), mx.MXFNError, "FusedRNNCell cannot be stepped"),
    (lambda: rnn.sequential_rnn_cell([rnn.lstm_cell(4), "x"]), TypeError, r'"cells\[1\]" expects a cell'),
    (lambda: rnn.unroll(rnn.lstm_cell(4), 3), mx.MXFNError, 'missing required option "inputs"'),
    (lambda: rnn.unroll(rnn.lstm_cell(4), 3, inputs=mx.sym.var("x"), layout="NCW"), mx.MXFNError,
     'option "layout" expects .*got \'NCW\''),
    (lambda: rnn.unroll(rnn.lstm_cell(4), 0, inputs=mx.sym.var("x")), mx.MXFNError, '"length" expects a positive int'),
    (lambda: rnn.unroll(rnn.lstm_cell(4), 3, inputs=[mx.sym.var("x")]), mx.MXFNError,
     '"inputs" expects 3 symbols .*got 1'),
    (lambda: rnn.unroll(rnn.lstm_cell(4), 3, inputs=mx.sym.var("x"), begin_state=[mx.sym.var("s")]),
     mx.MXFNError, '"begin_state" expects 2 state symbols for this cell, got 1'),
    (lambda: rnn.unroll(rnn.lstm_cell(4), 3, inputs=mx.sym.var("x"), merge_outputs="yes"), TypeError,
     'option "merge_outputs" expects bool or None'),
    (lambda: rnn.begin_state(rnn.lstm_cell(4), func=3), TypeError, 'option "func" expects a function'),
    (lambda: rnn.step(rnn.bidirectional_cell(rnn.gru_cell(2), rnn.gru_cell(2, prefix="r_")), mx.sym.var("x"),
                      [mx.sym.var("a"), mx.sym.var("b")]), mx.MXFNError, "cannot be stepped"),
    (lambda: rnn.unpack_weights(rnn.lstm_cell(4), {}), mx.MXFNError, 'args has no "lstm_i2h_weight"'),
    (lambda: rnn.unpack_weights(rnn.fused_rnn_cell(4), {"lstm_parameters": np.zeros(7)}), mx.MXFNError,
     '"lstm_parameters" has 7 values'),
    (lambda: rnn.pack_weights(rnn.gru_cell(2), {"gru_i2h_r_weight": np.zeros((2, 2))}), mx.MXFNError,
     'args has no "gru_i2h_z_weight"'),
    (lambda: rnn.unfuse(rnn.lstm_cell(4)), TypeError, "expects a fused cell"),
    (lambda: rnn.encode_sentences("abc"), TypeError, "list of token lists"),
])
def test_bad_input_is_named(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_cells_are_immutable_values():
    c = rnn.lstm_cell(4)
    with pytest.raises(AttributeError):
        c.num_hidden = 5
    with pytest.raises(TypeError):
        rnn.rnn_params("p_").prefix = "q_"
    # an unrolled graph uses one variable per weight, however many steps
    outs, _ = rnn.unroll(c, 4, inputs=mx.sym.var("data"), begin_state=rnn.begin_state(c, func=mx.sym.var))
    args = mx.sym.group(outs).list_arguments()
    assert args.count("lstm_i2h_weight") == 1 and len(args) == len(set(args))


def test_final_states_of_a_bidirectional_stack_feed_the_next_unroll():
    # MXNet returns a bidirectional cell's states nested ([l_states, r_states]); given back as
    # begin_state they are flattened, so a second unroll continues from them.
    stack = rnn.sequential_rnn_cell([rnn.bidirectional_cell(rnn.gru_cell(3, prefix="l_"), rnn.gru_cell(3, prefix="r_")),
                                     rnn.lstm_cell(2, prefix="top_")])
    x = mx.sym.var("data")
    _, st = rnn.unroll(stack, 2, inputs=x, begin_state=rnn.begin_state(stack, func=mx.sym.var))
    assert [[s.name for s in part] for part in st[:2]] == [["l_t1_out"], ["r_t1_out"]]
    outs, st2 = rnn.unroll(stack, 2, inputs=x, begin_state=st, merge_outputs=True)
    shapes = {"data": (4, 2, 5), "l_begin_state_0": (4, 3), "r_begin_state_0": (4, 3),
              "top_begin_state_0": (4, 2), "top_begin_state_1": (4, 2)}
    assert mx.sym.infer_shape(outs, shapes)[1] == [(4, 2, 2)]


def test_shared_params_tie_two_cells():
    p = rnn.rnn_params("tied_")
    a, b = rnn.gru_cell(3, prefix="a_", params=p), rnn.gru_cell(3, prefix="b_", params=p)
    stack = rnn.sequential_rnn_cell([a, b])
    outs, _ = rnn.unroll(stack, 2, inputs=mx.sym.var("data"), merge_outputs=True,
                         begin_state=rnn.begin_state(stack, func=mx.sym.var))
    assert [n for n in outs.list_arguments() if n.startswith("tied_")] == [
        "tied_i2h_weight", "tied_i2h_bias", "tied_h2h_weight", "tied_h2h_bias"]
    assert "a_t1_out_output" not in outs.list_outputs()  # node names keep each cell's prefix
    assert any(n.startswith("b_t1_") for n in mx.sym.get_internals(outs).list_outputs())


def test_default_begin_state_is_mxnets_zeros():
    c = rnn.lstm_cell(4)
    states = rnn.begin_state(c)
    node = json.loads(states[0].tojson())["nodes"][-1]
    assert node["op"] == "_zeros" and node["name"] == "lstm_begin_state_0"
    assert node["attrs"] == {"__layout__": "NC", "dtype": "float32", "shape": "(0, 4)"}


def test_inference_forward_sees_every_parameter_change():
    """The fused RNN's packed weights are kept between the inference forwards of a module bound
    for inference: a parameter array replaced, or written in place by the optimizer, must still
    be what the next inference computes with (judged against a freshly bound module with the
    same parameters)."""
    rng = np.random.default_rng(3)
    cell = rnn.fused_rnn_cell(8, num_layers=2, mode="lstm", prefix="l_")
    with warnings.catch_warnings():  # NTC is fine here (the advice is about speed)
        warnings.simplefilter("ignore")
        out, _ = rnn.unroll(cell, 5, inputs=mx.sym.variable("data"), layout="NTC", merge_outputs=True)
    net = mx.sym.linear_regression_output(mx.sym.reshape(out, shape=(0, -1)), mx.sym.variable("label"), name="lro")
    shapes = dict(data_shapes=[("data", (3, 5, 4))], label_shapes=[("label", (3, 40))])
    mod = m.bind(m.module(net, label_names=["label"]), **shapes)
    mod = m.init_params(mod, initializer=mx.init.uniform(0.5))
    mod = m.init_optimizer(mod, optimizer="sgd", optimizer_params={"learning_rate": 0.5})
    batch = mx.io.data_batch(data=[mx.nd.array(rng.standard_normal((3, 5, 4)))],
                             label=[mx.nd.array(rng.standard_normal((3, 40)))])

    def infer(module):
        m.forward(module, batch, is_train=False)
        return m.outputs_merged(module)[0].asnumpy()

    def fresh(args=None):
        f = m.bind(m.module(net, label_names=["label"]), for_training=False, **shapes)
        return m.set_params(f, arg_params=m.get_params(mod)[0] if args is None else args)

    first = infer(mod)
    np.testing.assert_array_equal(infer(mod), first)  # packed once, reused
    m.forward_backward(mod, batch)
    m.update(mod)  # writes the parameters
    after = infer(mod)
    assert not np.allclose(after, first)
    np.testing.assert_array_equal(after, infer(fresh()))
    args = m.get_params(mod)[0]
    args["l_parameters"] = mx.nd.array(args["l_parameters"].asnumpy() * 0.5)
    mod = m.set_params(mod, arg_params=args)  # a new array
    np.testing.assert_array_equal(infer(mod), infer(fresh()))
    pred = fresh()  # keeps its packed weights
    kept = infer(pred)
    np.testing.assert_array_equal(infer(pred), kept)
    args["l_parameters"] = mx.nd.array(args["l_parameters"].asnumpy() * 2.0)
    pred = m.set_params(pred, arg_params=args)
    after = infer(pred)
    assert not np.allclose(after, kept)
    np.testing.assert_array_equal(after, infer(fresh(args)))
