"""Records operator conformance cases from the real MXNet 1.9.1, in the format of the shared
conformance data (its README): one entry of tests/data/conformance/ops/cases.json and one
ops/<id>.npz per case. Run it with MXNet's venv for the cases mxfn adds after the shared set:

    MXNET_SUBGRAPH_BACKEND=NONE .venv-peers/mxnet/bin/python tools/record_conformance_ops.py

The shared cases were recorded with MKLDNN off (MXNET_MKLDNN_ENABLED=0), and the cases before
the RNN ones give the same values either way. The RNN cases need MKLDNN on: with it off,
MXNet 1.9.1's RNN fails its own input-count checks; with it on, its oneDNN RNN and its plain
CPU RNN (MXNET_USE_MKLDNN_RNN=0) agree within 4e-6 on these cases.

Cases with an id already in cases.json are re-recorded in place; the rest are appended.
Inputs are seeded, so a re-run writes the same files.
"""

import itertools
import json
import os

import mxnet as mx
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPS = os.path.join(ROOT, "tests", "data", "conformance", "ops")


def case(cid, op, sym, inputs, is_train=True, backward=True, rtol=1e-4, atol=1e-5, grad_req=None):
    """Runs `sym` on `inputs` (name -> array; arguments only) in MXNet and returns the case
    entry and its arrays."""
    args = sym.list_arguments()
    req = grad_req or {a: "write" for a in args}
    exe = sym.bind(mx.cpu(), {a: mx.nd.array(inputs[a]) for a in args},
                   args_grad={a: mx.nd.zeros(inputs[a].shape) for a in args if req[a] != "null"},
                   grad_req=req)
    outs = exe.forward(is_train=is_train)
    arrays = {f"arg:{a}": inputs[a].astype(np.float32) for a in args}
    for i, o in enumerate(outs):
        arrays[f"out:{i}"] = o.asnumpy()
    if backward:
        rng = np.random.RandomState(len(cid))
        heads = [rng.uniform(-1, 1, o.shape).astype(np.float32) for o in outs]
        exe.backward([mx.nd.array(h) for h in heads])
        for i, h in enumerate(heads):
            arrays[f"head_grad:{i}"] = h
        for a in args:
            if req[a] != "null":
                arrays[f"grad:{a}"] = exe.grad_dict[a].asnumpy()
    entry = {"id": cid, "op": op, "symbol": sym.tojson(), "is_train": is_train,
             "grad_req": "write" if grad_req is None else grad_req, "backward": backward,
             "rtol": rtol, "atol": atol}
    return entry, arrays


def rand(shape, seed):
    return np.random.RandomState(seed).uniform(-1, 1, shape).astype(np.float32)


def cases():
    d = mx.sym.var("data")
    yield case("SwapAxis-0-2", "SwapAxis", mx.sym.SwapAxis(d, dim1=0, dim2=2, name="sw"),
               {"data": rand((2, 3, 4), 1)})
    yield case("SwapAxis-1-neg1", "SwapAxis", mx.sym.SwapAxis(d, dim1=1, dim2=-1, name="sw"),
               {"data": rand((2, 3, 4, 5), 2)})
    yield case("reverse-0", "reverse", mx.sym.reverse(d, axis=0, name="rv"), {"data": rand((3, 4), 30)})
    yield case("reverse-1-2", "reverse", mx.sym.reverse(d, axis=(1, 2), name="rv"),
               {"data": rand((2, 3, 4), 31)})
    yield case("SwapAxis-default", "SwapAxis", mx.sym.SwapAxis(d, name="sw"), {"data": rand((3, 2), 3)})
    lhs, rhs = mx.sym.var("lhs"), mx.sym.var("rhs")
    yield case("broadcast_like-all", "broadcast_like", mx.sym.broadcast_like(lhs, rhs, name="bl"),
               {"lhs": rand((2, 1, 4), 4), "rhs": rand((2, 3, 4), 5)})
    yield case("broadcast_like-axes", "broadcast_like", mx.sym.broadcast_like(lhs, rhs, lhs_axes=(0, 2), rhs_axes=(1, 0),
                                                            name="bl"),
               {"lhs": rand((1, 3, 1), 6), "rhs": rand((5, 2), 7)})
    yield case("_zeros-plus", "_zeros", d + mx.sym.zeros((2, 3), name="z"), {"data": rand((2, 3), 8)})
    yield case("_ones-mul", "_ones", d * mx.sym.ones((2, 3), name="o"), {"data": rand((2, 3), 9)})
    yield case("_full-mul", "_full", d * mx.sym.full((2, 3), 2.5, name="f"), {"data": rand((2, 3), 10)})
    a, ind = mx.sym.var("a"), mx.sym.var("indices")
    no_idx = {"a": "write", "indices": "null"}
    yield case("take-axis0", "take", mx.sym.take(a, ind, name="t"),
               {"a": rand((4, 3), 11), "indices": np.array([3, 0, 0, 2], np.float32)}, grad_req=no_idx)
    yield case("take-axis1-2d-clip", "take", mx.sym.take(a, ind, axis=1, name="t"),
               {"a": rand((2, 3, 2), 12), "indices": np.array([[0, 5], [-2, 1]], np.float32)},
               grad_req=no_idx)
    yield case("take-wrap", "take", mx.sym.take(a, ind, axis=-1, mode="wrap", name="t"),
               {"a": rand((2, 3), 13), "indices": np.array([4, -1, 2], np.float32)}, grad_req=no_idx)
    data, index = mx.sym.var("data"), mx.sym.var("index")
    pick_req = {"data": "write", "index": "null"}
    yield case("pick-last", "pick", mx.sym.pick(data, index, name="p"),
               {"data": rand((3, 4), 14), "index": np.array([0, 3, 1], np.float32)}, grad_req=pick_req)
    yield case("pick-axis0-keepdims", "pick", mx.sym.pick(data, index, axis=0, keepdims=True, name="p"),
               {"data": rand((3, 2, 2), 15), "index": np.array([[[2, 0], [1, 7]]], np.float32)},
               grad_req=pick_req)
    yield case("pick-wrap", "pick", mx.sym.pick(data, index, axis=1, mode="wrap", name="p"),
               {"data": rand((2, 3), 16), "index": np.array([-1, 4], np.float32)}, grad_req=pick_req)
    sl = mx.sym.var("sequence_length")
    seq_req = {"data": "write", "sequence_length": "null"}
    lens = np.array([2, 4, 1], np.float32)
    yield case("SequenceMask-len", "SequenceMask",
               mx.sym.SequenceMask(data, sl, use_sequence_length=True, value=-1.5, name="m"),
               {"data": rand((4, 3, 2), 17), "sequence_length": lens}, grad_req=seq_req)
    yield case("SequenceMask-axis1", "SequenceMask",
               mx.sym.SequenceMask(data, sl, use_sequence_length=True, axis=1, name="m"),
               {"data": rand((3, 4), 18), "sequence_length": lens}, grad_req=seq_req)
    yield case("SequenceMask-nolen", "SequenceMask", mx.sym.SequenceMask(data, name="m"),
               {"data": rand((2, 3), 19)})
    yield case("SequenceLast-len", "SequenceLast",
               mx.sym.SequenceLast(data, sl, use_sequence_length=True, name="l"),
               {"data": rand((4, 3, 2), 20), "sequence_length": lens}, grad_req=seq_req)
    yield case("SequenceLast-axis1", "SequenceLast",
               mx.sym.SequenceLast(data, sl, use_sequence_length=True, axis=1, name="l"),
               {"data": rand((3, 4, 2), 21), "sequence_length": lens}, grad_req=seq_req)
    yield case("SequenceLast-nolen", "SequenceLast", mx.sym.SequenceLast(data, name="l"),
               {"data": rand((3, 2), 22)})
    yield case("SequenceReverse-len", "SequenceReverse",
               mx.sym.SequenceReverse(data, sl, use_sequence_length=True, name="r"),
               {"data": rand((4, 3, 2), 23), "sequence_length": lens}, grad_req=seq_req)
    yield case("SequenceReverse-nolen", "SequenceReverse", mx.sym.SequenceReverse(data, name="r"),
               {"data": rand((3, 2), 24)})


def rnn_sym(mode, layers, bidirectional, hidden, state_outputs=True, use_len=False, params=None, **kw):
    """MXNet's RNN over variables data, parameters (or `params`), state, state_cell (LSTM)
    and sequence_length (with use_len)."""
    # By keyword: MXNet maps positional inputs onto its full list (state_cell included).
    args = {"data": mx.sym.var("data"),
            "parameters": params if params is not None else mx.sym.var("parameters"),
            "state": mx.sym.var("state")}
    if mode == "lstm":
        args["state_cell"] = mx.sym.var("state_cell")
    if use_len:
        args["sequence_length"] = mx.sym.var("sequence_length")
    return mx.sym.RNN(**args, state_size=hidden, num_layers=layers, mode=mode,
                      bidirectional=bidirectional, state_outputs=state_outputs,
                      use_sequence_length=use_len, name="rnn", **kw)


def rnn_inputs(sym, data_shape, seed):
    """Seeded values for every argument of `sym`, shapes inferred from the data's."""
    shapes, _, _ = sym.infer_shape(data=data_shape)
    return {a: rand(s, seed + i) for i, (a, s) in enumerate(zip(sym.list_arguments(), shapes))}


def rnn_case(cid, mode, layers, bidirectional, tnc, hidden, seed, **kw):
    sym = rnn_sym(mode, layers, bidirectional, hidden, **kw)
    return case(cid, "RNN", sym, rnn_inputs(sym, tnc, seed))


def rnn_lengths_case(cid, mode, layers, bidirectional, tnc, hidden, lens, seed):
    """RNN with use_sequence_length. MXNet 1.9.1's CPU RNN ignores sequence_length (the option
    is cuDNN's), so the expected values are assembled from MXNet running each sample alone
    over its valid steps, which is cuDNN's documented meaning: zeros past a sample's length,
    final states from its last valid step, the reverse direction starting there."""
    t, n, c = tnc
    sym = rnn_sym(mode, layers, bidirectional, hidden, use_len=True)
    inputs = rnn_inputs(sym, tnc, seed)
    inputs["sequence_length"] = np.array(lens, np.float32)
    args = sym.list_arguments()
    outs = [np.zeros(s, np.float32) for s in sym.infer_shape(data=tnc)[1]]
    rng = np.random.RandomState(len(cid))
    heads = [rng.uniform(-1, 1, o.shape).astype(np.float32) for o in outs]
    grads = {a: np.zeros(inputs[a].shape, np.float32) for a in args if a != "sequence_length"}
    alone = rnn_sym(mode, layers, bidirectional, hidden)
    for s, ln in enumerate(lens):
        mine = {"data": inputs["data"][:ln, s:s + 1], "parameters": inputs["parameters"]}
        for a in ("state", "state_cell"):
            if a in inputs:
                mine[a] = inputs[a][:, s:s + 1]
        names = alone.list_arguments()
        exe = alone.bind(mx.cpu(), {a: mx.nd.array(mine[a]) for a in names},
                         args_grad={a: mx.nd.zeros(mine[a].shape) for a in names})
        res = [o.asnumpy() for o in exe.forward(is_train=True)]
        outs[0][:ln, s] = res[0][:, 0]
        for k in range(1, len(res)):
            outs[k][:, s] = res[k][:, 0]
        exe.backward([mx.nd.array(heads[0][:ln, s:s + 1])] +
                     [mx.nd.array(h[:, s:s + 1]) for h in heads[1:]])
        grads["data"][:ln, s] = exe.grad_dict["data"].asnumpy()[:, 0]
        grads["parameters"] += exe.grad_dict["parameters"].asnumpy()
        for a in ("state", "state_cell"):
            if a in grads:
                grads[a][:, s] = exe.grad_dict[a].asnumpy()[:, 0]
    arrays = {f"arg:{a}": inputs[a].astype(np.float32) for a in args}
    for i, (o, h) in enumerate(zip(outs, heads)):
        arrays[f"out:{i}"] = o
        arrays[f"head_grad:{i}"] = h
    for a, g in grads.items():
        arrays[f"grad:{a}"] = g
    req = {a: ("null" if a == "sequence_length" else "write") for a in args}
    entry = {"id": cid, "op": "RNN", "symbol": sym.tojson(), "is_train": True, "grad_req": req,
             "backward": True, "rtol": 1e-4, "atol": 1e-5,
             "note": "use_sequence_length: MXNet 1.9.1's CPU RNN ignores it (cuDNN only); the "
                     "values are MXNet's RNN run on each sample alone over its valid steps."}
    return entry, arrays


def gluon_params_case(cid, mode, layers, bidirectional, tnc, hidden, seed):
    """The graph a hybridized Gluon rnn layer exports: each weight and bias flattened and
    joined by _rnn_param_concat (dim=0) in the order weights then biases, per layer, per
    direction (l, r), i2h then h2h."""
    gates = {"lstm": 4, "gru": 3}.get(mode, 1)
    dirs = ["l", "r"][:2 if bidirectional else 1]
    shapes = {}
    for layer in range(layers):
        width = tnc[2] if layer == 0 else hidden * len(dirs)
        for d in dirs:
            shapes[f"{d}{layer}_i2h_weight"] = (gates * hidden, width)
            shapes[f"{d}{layer}_h2h_weight"] = (gates * hidden, hidden)
            shapes[f"{d}{layer}_i2h_bias"] = (gates * hidden,)
            shapes[f"{d}{layer}_h2h_bias"] = (gates * hidden,)
    order = [f"{d}{layer}_{g}_{t}" for t in ("weight", "bias") for layer in range(layers)
             for d in dirs for g in ("i2h", "h2h")]
    flat = [mx.sym.reshape(mx.sym.var(n), shape=(-1,)) for n in order]
    params = mx.sym._internal._rnn_param_concat(*flat, dim=0, name="rnn_param_concat")
    sym = rnn_sym(mode, layers, bidirectional, hidden, params=params)
    inputs = {"data": rand(tnc, seed)}
    for i, n in enumerate(order):
        inputs[n] = rand(shapes[n], seed + 1 + i)
    state = (layers * len(dirs), tnc[1], hidden)
    inputs["state"] = rand(state, seed + 50)
    if mode == "lstm":
        inputs["state_cell"] = rand(state, seed + 51)
    return case(cid, "_rnn_param_concat", sym, inputs)


def rnn_cases():
    """The fused RNN operator: every mode, 1 and 2 layers, bidirectional, with and without
    state outputs, dropout (inactive in inference), sequence lengths, Gluon's parameter
    concat. (LSTM state clipping is not recorded: MXNet 1.9.1's CPU RNN ignores it too, and
    no MXNet computation gives cuDNN's clipped values; finite differences check it.)"""
    yield rnn_case("RNN-lstm-1", "lstm", 1, False, (3, 2, 4), 5, 100)
    yield rnn_case("RNN-lstm-2-bi", "lstm", 2, True, (4, 3, 3), 4, 110)
    yield rnn_case("RNN-lstm-2-nostate", "lstm", 2, False, (5, 2, 4), 3, 120, state_outputs=False)
    yield rnn_case("RNN-gru-1-nostate", "gru", 1, False, (3, 2, 4), 5, 130, state_outputs=False)
    yield rnn_case("RNN-gru-2-bi", "gru", 2, True, (4, 3, 3), 4, 140)
    yield rnn_case("RNN-rnn_relu-1", "rnn_relu", 1, False, (3, 3, 4), 5, 150)
    yield rnn_case("RNN-rnn_relu-2-bi", "rnn_relu", 2, True, (4, 2, 3), 4, 160)
    yield rnn_case("RNN-rnn_tanh-1-bi", "rnn_tanh", 1, True, (3, 2, 4), 5, 170)
    yield rnn_case("RNN-rnn_tanh-2", "rnn_tanh", 2, False, (5, 3, 2), 4, 180)
    sym = rnn_sym("lstm", 2, True, 4, p=0.5)
    yield case("RNN-lstm-dropout-inference", "RNN", sym, rnn_inputs(sym, (3, 2, 3), 190),
               is_train=False, backward=False)
    yield rnn_lengths_case("RNN-lstm-2-bi-lengths", "lstm", 2, True, (4, 3, 3), 4, [2, 4, 1], 200)
    yield rnn_lengths_case("RNN-gru-1-lengths", "gru", 1, False, (4, 3, 2), 3, [3, 1, 4], 210)
    yield rnn_lengths_case("RNN-rnn_tanh-1-bi-lengths", "rnn_tanh", 1, True, (5, 2, 3), 4, [5, 2],
                           220)
    yield gluon_params_case("_rnn_param_concat-lstm-2-bi", "lstm", 2, True, (3, 2, 3), 4, 230)
    yield gluon_params_case("_rnn_param_concat-gru-1", "gru", 1, False, (3, 2, 4), 5, 260)


def main():
    path = os.path.join(OPS, "cases.json")
    with open(path) as f:
        existing = json.load(f)
    index = {c["id"]: i for i, c in enumerate(existing)}
    for entry, arrays in itertools.chain(cases(), rnn_cases()):
        np.savez(os.path.join(OPS, entry["id"] + ".npz"), **arrays)
        if entry["id"] in index:
            existing[index[entry["id"]]] = entry
        else:
            existing.append(entry)
        print("recorded", entry["id"])
    with open(path, "w") as f:
        f.write(json.dumps(existing, indent=1))  # the shared file's layout


if __name__ == "__main__":
    main()
