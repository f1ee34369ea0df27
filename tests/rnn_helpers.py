"""Shared by tests/test_rnn_cells.py: one table of cell graphs built both in MXNet 1.9.1
(``mx.rnn``) and in mxfn (``mxfn.rnn``), and the MXNet scripts that record them.

Each case is unrolled over ``LENGTH`` steps on a ``data`` variable with begin states made by
``begin_state(func=Variable)``, so the recorded graphs need no ``_zeros`` node; its heads are
the outputs (a list or one symbol) followed by the flattened final states.
"""

import json
import re

import mxfn as mx
import mxfn.rnn as rnn

BATCH, LENGTH, IN_DIM = 2, 3, 5


def _seq(*cells):
    return rnn.sequential_rnn_cell(list(cells))


# name -> (MXNet code defining `cell`, mxfn builder, layout, merge_outputs)
CASES = {
    "lstm_ntc_merged": ("cell = mx.rnn.LSTMCell(4, prefix='lstm_')",
                        lambda: rnn.lstm_cell(4, prefix="lstm_"), "NTC", True),
    "lstm_tnc_none": ("cell = mx.rnn.LSTMCell(4, prefix='lstm_', forget_bias=2.0)",
                      lambda: rnn.lstm_cell(4, prefix="lstm_", forget_bias=2.0), "TNC", None),
    "gru_ntc_list": ("cell = mx.rnn.GRUCell(4)", lambda: rnn.gru_cell(4), "NTC", False),
    "rnn_relu_tnc_merged": ("cell = mx.rnn.RNNCell(4, activation='relu')",
                            lambda: rnn.rnn_cell(4, activation="relu"), "TNC", True),
    "rnn_tanh_ntc_none": ("cell = mx.rnn.RNNCell(4, prefix='r_')",
                          lambda: rnn.rnn_cell(4, prefix="r_"), "NTC", None),
    "sequential_merged": (
        "cell = mx.rnn.SequentialRNNCell()\n"
        "cell.add(mx.rnn.LSTMCell(4, prefix='l0_'))\ncell.add(mx.rnn.GRUCell(3, prefix='l1_'))",
        lambda: _seq(rnn.lstm_cell(4, prefix="l0_"), rnn.gru_cell(3, prefix="l1_")), "NTC", True),
    "sequential_dropout_list": (
        "cell = mx.rnn.SequentialRNNCell()\ncell.add(mx.rnn.LSTMCell(4, prefix='a_'))\n"
        "cell.add(mx.rnn.DropoutCell(0.5))\ncell.add(mx.rnn.RNNCell(4, prefix='b_'))",
        lambda: _seq(rnn.lstm_cell(4, prefix="a_"), rnn.dropout_cell(0.5), rnn.rnn_cell(4, prefix="b_")),
        "TNC", False),
    "bidirectional_merged": (
        "cell = mx.rnn.BidirectionalCell(mx.rnn.LSTMCell(4, prefix='l_'), mx.rnn.LSTMCell(4, prefix='r_'))",
        lambda: rnn.bidirectional_cell(rnn.lstm_cell(4, prefix="l_"), rnn.lstm_cell(4, prefix="r_")),
        "NTC", True),
    "bidirectional_tnc_merged": (
        "cell = mx.rnn.BidirectionalCell(mx.rnn.GRUCell(3, prefix='l_'), mx.rnn.GRUCell(3, prefix='r_'),"
        " output_prefix='bo_')",
        lambda: rnn.bidirectional_cell(rnn.gru_cell(3, prefix="l_"), rnn.gru_cell(3, prefix="r_"),
                                       output_prefix="bo_"), "TNC", True),
    "bidirectional_list": (
        "cell = mx.rnn.BidirectionalCell(mx.rnn.GRUCell(3, prefix='l_'), mx.rnn.RNNCell(3, prefix='r_'))",
        lambda: rnn.bidirectional_cell(rnn.gru_cell(3, prefix="l_"), rnn.rnn_cell(3, prefix="r_")),
        "TNC", False),
    "residual_merged": ("cell = mx.rnn.ResidualCell(mx.rnn.LSTMCell(5))",
                        lambda: rnn.residual_cell(rnn.lstm_cell(5)), "NTC", True),
    "residual_list": ("cell = mx.rnn.ResidualCell(mx.rnn.GRUCell(5))",
                      lambda: rnn.residual_cell(rnn.gru_cell(5)), "TNC", None),
    "zoneout": ("cell = mx.rnn.ZoneoutCell(mx.rnn.LSTMCell(4), zoneout_outputs=0.3, zoneout_states=0.2)",
                lambda: rnn.zoneout_cell(rnn.lstm_cell(4), zoneout_outputs=0.3, zoneout_states=0.2),
                "NTC", None),
    "unfused_bidirectional_lstm": (
        "cell = mx.rnn.FusedRNNCell(4, num_layers=2, mode='lstm', bidirectional=True, prefix='f_').unfuse()",
        lambda: rnn.unfuse(rnn.fused_rnn_cell(4, num_layers=2, mode="lstm", bidirectional=True, prefix="f_")),
        "NTC", True),
    "unfused_gru_dropout": (
        "cell = mx.rnn.FusedRNNCell(3, num_layers=2, mode='gru', dropout=0.3).unfuse()",
        lambda: rnn.unfuse(rnn.fused_rnn_cell(3, num_layers=2, mode="gru", dropout=0.3)), "TNC", False),
    "unfused_rnn_relu": (
        "cell = mx.rnn.FusedRNNCell(4, mode='rnn_relu').unfuse()",
        lambda: rnn.unfuse(rnn.fused_rnn_cell(4, mode="rnn_relu")), "NTC", None),
}


def data_shape(layout):
    return (BATCH, LENGTH, IN_DIM) if layout == "NTC" else (LENGTH, BATCH, IN_DIM)


def flatten(states):
    out = []
    for s in states:
        out.extend(flatten(s) if isinstance(s, (list, tuple)) else [s])
    return out


def mxfn_graph(name):
    """mxfn's build of case ``name``: (grouped heads, state names, cell)."""
    _, build, layout, merge = CASES[name]
    cell = build()
    begin = rnn.begin_state(cell, func=mx.sym.var)
    outs, states = rnn.unroll(cell, LENGTH, inputs=mx.sym.var("data"), begin_state=begin, layout=layout,
                              merge_outputs=merge)
    heads = (list(outs) if isinstance(outs, list) else [outs]) + flatten(states)
    return mx.sym.group(heads), [s.name for s in flatten(states)], outs


def state_shapes(cell_state_info):
    return [tuple(BATCH if d == 0 else d for d in i["shape"]) for i in cell_state_info]


def normalize_output_names(names):
    """Automatic node names count per process (concat0 vs concat7, also inside derived names like
    concat5_plus_residual): compare them without the count. A count follows an op name of three
    letters or more, so the layer and step numbers of cell names (l0, t0, i2h) stay."""
    return [re.sub(r"([a-z]{3,})\d+", r"\1#", n) for n in names]


RECORD_CASES = r'''
import json, os, sys
import numpy as np
import mxnet as mx

out_dir, cases = sys.argv[1], json.loads(sys.argv[2])
B, T, C = %(B)d, %(T)d, %(C)d

def flatten(states):
    out = []
    for s in states:
        out.extend(flatten(s) if isinstance(s, list) else [s])
    return out

meta = {}
for i, (name, (code, layout, merge)) in enumerate(sorted(cases.items())):
    ns = {"mx": mx}
    exec(code, ns)
    cell = ns["cell"]
    # a modifier cell calls the argument init_sym, a stack takes keywords only
    key = "init_sym" if isinstance(cell, mx.rnn.rnn_cell.ModifierCell) else "func"
    begin = cell.begin_state(**{key: mx.sym.Variable})
    outs, states = cell.unroll(T, inputs=mx.sym.Variable("data"), begin_state=begin, layout=layout,
                               merge_outputs=merge)
    heads = (outs if isinstance(outs, list) else [outs]) + flatten(states)
    sym = mx.sym.Group(heads)
    shapes = {"data": (B, T, C) if layout == "NTC" else (T, B, C)}
    for s, info in zip(begin, cell.state_info):
        shapes[s.name] = tuple(B if d == 0 else d for d in info["shape"])
    arg_shapes, _, _ = sym.infer_shape(**shapes)
    rng = np.random.RandomState(100 + i)
    args = {n: mx.nd.array(rng.uniform(-0.8, 0.8, size=s)) for n, s in zip(sym.list_arguments(), arg_shapes)}
    exe = sym.bind(mx.cpu(), args, grad_req="null")
    exe.forward(is_train=False)
    sym.save(os.path.join(out_dir, name + "-symbol.json"))
    mx.nd.save(os.path.join(out_dir, name + "-args.params"), args)
    mx.nd.save(os.path.join(out_dir, name + "-out.params"), [o.copy() for o in exe.outputs])
    meta[name] = {"arguments": sym.list_arguments(), "outputs": sym.list_outputs(),
                  "states": [s.name for s in flatten(states)], "begin": [s.name for s in begin],
                  "state_info": [{"shape": list(x["shape"]), "layout": x["__layout__"]} for x in cell.state_info]}
json.dump(meta, open(os.path.join(out_dir, "meta.json"), "w"))
''' % {"B": BATCH, "T": LENGTH, "C": IN_DIM}


def case_table_for_mxnet():
    return json.dumps({k: (v[0], v[2], v[3]) for k, v in CASES.items()})


# MXNet's example/rnn/bucketing/lstm_bucketing.py model at small sizes.
LM = {"vocab": 12, "embed": 6, "hidden": 8, "layers": 2, "batch": 4, "length": 3}

RECORD_LM = r'''
import json, os, sys
import numpy as np
import mxnet as mx

out_dir = sys.argv[1]
V, E, H, L, B, T = %(vocab)d, %(embed)d, %(hidden)d, %(layers)d, %(batch)d, %(length)d
stack = mx.rnn.SequentialRNNCell()
for i in range(L):
    stack.add(mx.rnn.LSTMCell(num_hidden=H, prefix="lstm_l%%d_" %% i))
data = mx.sym.Variable("data")
label = mx.sym.Variable("softmax_label")
embed = mx.sym.Embedding(data=data, input_dim=V, output_dim=E, name="embed")
stack.reset()
outputs, states = stack.unroll(T, inputs=embed, merge_outputs=True)
pred = mx.sym.Reshape(outputs, shape=(-1, H))
pred = mx.sym.FullyConnected(data=pred, num_hidden=V, name="pred")
label = mx.sym.Reshape(label, shape=(-1,))
pred = mx.sym.SoftmaxOutput(data=pred, label=label, name="softmax")

mod = mx.mod.Module(pred, data_names=["data"], label_names=["softmax_label"])
mod.bind(data_shapes=[("data", (B, T))], label_shapes=[("softmax_label", (B, T))], for_training=False)
mx.random.seed(7)
mod.init_params(mx.init.Xavier())
rng = np.random.RandomState(3)
x = rng.randint(0, V, size=(B, T)).astype("float32")
mod.forward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.zeros((B, T))]), is_train=False)
mod.save_checkpoint(os.path.join(out_dir, "lm"), 1)
np.save(os.path.join(out_dir, "lm-x.npy"), x)
np.save(os.path.join(out_dir, "lm-out.npy"), mod.get_outputs()[0].asnumpy())
json.dump({"arguments": pred.list_arguments(), "outputs": pred.list_outputs(),
           "states": [s.name for s in states]}, open(os.path.join(out_dir, "lm-meta.json"), "w"))
''' % LM


def lm_symbol(seq_len, begin_func=None, batch=None):
    """mxfn's build of the lstm_bucketing.py model; ``begin_func`` None = MXNet's default zeros."""
    v, e, h, layers = LM["vocab"], LM["embed"], LM["hidden"], LM["layers"]
    stack = rnn.sequential_rnn_cell([rnn.lstm_cell(h, prefix=f"lstm_l{i}_") for i in range(layers)])
    embed = mx.sym.Embedding(mx.sym.var("data"), input_dim=v, output_dim=e, name="embed")
    begin = rnn.begin_state(stack, func=begin_func) if begin_func is not None else None
    outputs, states = rnn.unroll(stack, seq_len, inputs=embed, merge_outputs=True, begin_state=begin)
    pred = mx.sym.FullyConnected(mx.sym.Reshape(outputs, shape=(-1, h)), num_hidden=v, name="pred")
    label = mx.sym.Reshape(mx.sym.var("softmax_label"), shape=(-1,))
    return mx.sym.SoftmaxOutput(pred, label, name="softmax"), states


def zeros_of_batch(batch):
    """A begin_state func making zeros of a known batch size (named as MXNet's begin states)."""
    def make(name, opts):
        return mx.sym.zeros(tuple(batch if d == 0 else d for d in opts["shape"]), name=name)
    return make


CHECK_MXFN_LM = r'''
import json, sys
import numpy as np
import mxnet as mx

prefix, x_path, want_path = sys.argv[1], sys.argv[2], sys.argv[3]
sym, args, aux = mx.model.load_checkpoint(prefix, 1)
x = np.load(x_path)
mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"])
mod.bind(data_shapes=[("data", x.shape)], label_shapes=[("softmax_label", x.shape)], for_training=False)
mod.set_params(args, aux)
mod.forward(mx.io.DataBatch([mx.nd.array(x)], [mx.nd.zeros(x.shape)]), is_train=False)
got = mod.get_outputs()[0].asnumpy()
want = np.load(want_path)
print(json.dumps({"max_abs_diff": float(np.abs(got - want).max()), "shape": list(got.shape),
                  "arguments": sym.list_arguments()}))
'''

RECORD_PACK = r'''
import json, os, sys
import numpy as np
import mxnet as mx

out_dir, cases = sys.argv[1], json.loads(sys.argv[2])
for name, (h, layers, mode, bi, li) in sorted(cases.items()):
    cell = mx.rnn.FusedRNNCell(h, num_layers=layers, mode=mode, bidirectional=bi, prefix=name + "_")
    b, m = 1 + bi, {"lstm": 4, "gru": 3}.get(mode, 1)
    total = (li + h + 2) * h * m * b + (layers - 1) * m * h * (h + b * h + 2) * b
    flat = mx.nd.array(np.random.RandomState(5).uniform(-1, 1, size=total))
    unpacked = cell.unpack_weights({name + "_parameters": flat, "other": mx.nd.ones((2,))})
    packed = cell.unfuse().pack_weights(unpacked)
    mx.nd.save(os.path.join(out_dir, name + "-flat.params"), {"p": flat})
    mx.nd.save(os.path.join(out_dir, name + "-unpacked.params"), unpacked)
    mx.nd.save(os.path.join(out_dir, name + "-packed.params"), packed)
'''

PACK_CASES = {"lstm1": (4, 1, "lstm", False, 3), "gru2bi": (3, 2, "gru", True, 5),
              "tanh2": (2, 2, "rnn_tanh", False, 4), "relu1bi": (3, 1, "rnn_relu", True, 2),
              "lstm3bi": (2, 3, "lstm", True, 3)}

RECORD_ENCODE = r'''
import json, sys
import mxnet as mx
cases = json.loads(sys.argv[1])
out = []
for sents, kw in cases:
    enc, vocab = mx.rnn.encode_sentences(sents, **kw)
    out.append([enc, sorted(vocab.items())])
print(json.dumps(out))
'''

ENCODE_CASES = [
    ([["a", "b", "c"], ["b", "d"], ["a"]], {}),
    ([["a", "b", "c"], ["b", "d"], ["a"]], {"invalid_label": 0, "start_label": 0}),
    ([["the", "cat"], ["the", "dog", "\n"]], {"invalid_label": 2, "start_label": 1, "invalid_key": "<eos>"}),
    ([["x", "y"], ["y", "x", "z"]], {"vocab": {"x": 3, "y": 4, "z": 5, "\n": 0}}),
    ([[]], {"start_label": 7}),
]
