"""Converters of the recurrent operators: MXNet's fused ``RNN`` as one ONNX LSTM / GRU / RNN
node per layer, and ``_rnn_param_concat`` (Gluon's join of the flattened weights) as Concat.

The fused ``parameters`` vector is cut apart inside the ONNX graph (Slice, Reshape, gate
reordering), so it works whether the vector is a stored parameter or built by
``_rnn_param_concat`` from the per-layer weights, as Gluon exports it. MXNet's gate orders
become ONNX's: LSTM i, f, g, o → i, o, f, c; GRU r, z, n → z, r, h (with
``linear_before_reset=1``, MXNet's GRU)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from ._graph import Graph, Node, Outputs, converts

# mode -> (ONNX operator, gates, MXNet gate order as ONNX's: the MXNet gate index of each ONNX gate)
_MODES = {
    "lstm": ("LSTM", 4, [0, 3, 1, 2]),
    "gru": ("GRU", 3, [1, 0, 2]),
    "rnn_relu": ("RNN", 1, [0]),
    "rnn_tanh": ("RNN", 1, [0]),
}


@converts("_rnn_param_concat")
def rnn_param_concat(g: Graph, node: Node) -> Outputs:
    """Concat along ``dim`` (the same join as Concat)."""
    return g.op("Concat", [g.x(node, i) for i in range(len(node.inputs))], g.out(node),
                axis=int(node.get("dim", 1)))


_Span = Tuple[int, int, int]  # (start, rows, cols) in the flat vector
_Pair = Tuple[_Span, _Span]  # the i2h and the h2h part


def _layout(mode: str, layers: int, dirs: int, inp: int, hidden: int) -> Tuple[List[_Pair], List[_Pair]]:
    """Offsets into the flat vector: per (layer, direction), the (start, rows, cols) of the
    i2h and h2h weights, then of the i2h and h2h biases (cols 0) — MXNet's layout: every
    weight first, then every bias, both in layer-major, direction-minor order."""
    gates = _MODES[mode][1]
    weights: List[_Pair] = []
    biases: List[_Pair] = []
    pos = 0
    for layer in range(layers):
        cols = inp if layer == 0 else dirs * hidden
        for _ in range(dirs):
            weights.append(((pos, gates * hidden, cols), (pos + gates * hidden * cols, gates * hidden, hidden)))
            pos += gates * hidden * (cols + hidden)
    for _ in range(layers * dirs):
        biases.append(((pos, gates * hidden, 0), (pos + gates * hidden, gates * hidden, 0)))
        pos += 2 * gates * hidden
    return weights, biases


def _piece(g: Graph, flat: str, start: int, rows: int, cols: int, order: List[int], hidden: int) -> str:
    """Rows ``start…`` of the flat vector as a (rows, cols) matrix (or a (rows,) bias when cols
    is 0), its gate blocks reordered to ONNX's."""
    size = rows * (cols or 1)
    part = g.op("Slice", [flat, g.ints([start], "starts"), g.ints([start + size], "ends"), g.ints([0], "axes")])
    part = g.op("Reshape", [part, g.ints([len(order), hidden, cols] if cols else [len(order), hidden], "shape")])
    if order != list(range(len(order))):
        part = g.op("Gather", [part, g.ints(order, "gate_order")], axis=0)
    return g.op("Reshape", [part, g.ints([rows, cols] if cols else [rows], "shape")])


@converts("RNN")
def rnn(g: Graph, node: Node) -> Outputs:
    """One ONNX LSTM / GRU / RNN node per layer, both directions in one node; the layers
    chained through (seq, batch, directions·state_size); ``sequence_length`` (cast to int32)
    as ``sequence_lens``; the final states gathered per layer. Dropout between layers is
    an inference no-op. LSTM state clipping has no ONNX equivalent (ONNX clips gate inputs,
    not the cell) and is refused."""
    mode = str(node.get("mode"))
    onnx_op, _, order = _MODES[mode]
    hidden, layers = int(node.get("state_size")), int(node.get("num_layers"))
    dirs = 2 if node.flag("bidirectional") else 1
    if node.get("lstm_state_clip_min") not in (None, "None") or node.get("lstm_state_clip_max") not in (None, "None"):
        raise node.fail("lstm_state_clip_min/max have no ONNX equivalent (ONNX's clip bounds the gate inputs)")
    if node.get("projection_size") not in (None, "None"):
        raise node.fail("projection_size is not supported")
    lstm = mode == "lstm"
    inp = g.shape(node)[2]
    flat = g.x(node, 1)
    weights, biases = _layout(mode, layers, dirs, inp, hidden)
    seq_lens = ""
    if node.flag("use_sequence_length"):
        seq_lens = g.cast(g.x(node, 4 if lstm else 3), "int32")
    attrs: Dict[str, Any] = {"hidden_size": hidden, "direction": "bidirectional" if dirs == 2 else "forward"}
    if onnx_op == "RNN":
        attrs["activations"] = ["Relu" if mode == "rnn_relu" else "Tanh"] * dirs
    if onnx_op == "GRU":
        attrs["linear_before_reset"] = 1
    x, hs, cs = g.x(node), [], []
    for layer in range(layers):
        ws, rs, bs = [], [], []
        for d in range(dirs):
            (wi, wh), (bi, bh) = weights[layer * dirs + d], biases[layer * dirs + d]
            ws.append(g.unsqueeze(_piece(g, flat, *wi, order, hidden), [0]))
            rs.append(g.unsqueeze(_piece(g, flat, *wh, order, hidden), [0]))
            b = g.op("Concat", [_piece(g, flat, *bi, order, hidden), _piece(g, flat, *bh, order, hidden)], axis=0)
            bs.append(g.unsqueeze(b, [0]))
        stack = (lambda parts: parts[0] if dirs == 1 else g.op("Concat", parts, axis=0))
        sl = (g.ints([layer * dirs], "starts"), g.ints([(layer + 1) * dirs], "ends"), g.ints([0], "axes"))
        h0 = g.op("Slice", [g.x(node, 2), *sl])
        inputs = [x, stack(ws), stack(rs), stack(bs), seq_lens, h0]
        if lstm:
            inputs.append(g.op("Slice", [g.x(node, 3), *sl]))
        y, y_h, *y_c = g.op_n(onnx_op, inputs, 3 if lstm else 2, **attrs)
        hs.append(y_h)
        cs.extend(y_c)
        # Y is (seq, directions, batch, hidden): back to MXNet's (seq, batch, directions·hidden).
        y = g.op("Transpose", [y], perm=[0, 2, 1, 3])
        x = g.op("Reshape", [y, g.ints([0, 0, dirs * hidden], "shape")])
    outs = [g.op("Identity", [x], g.out(node, 0))]
    if node.flag("state_outputs"):
        outs.append(g.op("Concat", hs, g.out(node, 1), axis=0) if layers > 1 else g.op("Identity", hs, g.out(node, 1)))
        if lstm:
            outs.append(g.op("Concat", cs, g.out(node, 2), axis=0) if layers > 1 else g.op("Identity", cs, g.out(node, 2)))
    return outs if len(outs) > 1 else outs[0]
