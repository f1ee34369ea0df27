"""Records operator conformance cases from the real MXNet 1.9.1, in the format of the shared
conformance data (its README): one entry of tests/data/conformance/ops/cases.json and one
ops/<id>.npz per case. Run it with MXNet's venv for the cases mxfn adds after the shared set:

    MXNET_MKLDNN_ENABLED=0 MXNET_SUBGRAPH_BACKEND=NONE \
        .venv-peers/mxnet/bin/python tools/record_conformance_ops.py

(MKLDNN off, as the shared cases were recorded.)

Cases with an id already in cases.json are re-recorded in place; the rest are appended.
Inputs are seeded, so a re-run writes the same files.
"""

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


def main():
    path = os.path.join(OPS, "cases.json")
    with open(path) as f:
        existing = json.load(f)
    index = {c["id"]: i for i, c in enumerate(existing)}
    for entry, arrays in cases():
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
