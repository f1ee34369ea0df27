"""Converters of the network layers: FullyConnected, Convolution, Deconvolution, Pooling,
BatchNorm, LayerNorm, Activation, LeakyReLU, Dropout, Embedding, the softmax family and the
loss outputs (exported for inference), and the Sequence* operators."""

from __future__ import annotations

import math

import numpy as np

from ._graph import Converter, Graph, Node, Outputs, converts

_NC_LAYOUTS = (None, "NCW", "NCHW", "NCDHW")


def _layout(node: Node) -> None:
    if node.get("layout") not in _NC_LAYOUTS:
        raise node.fail(f"layout {node.get('layout')} is not supported (only NCW, NCHW, NCDHW)")


def _per_axis(node: Node, key: str, n: int, default: int) -> list[int]:
    """A per-spatial-axis attribute (stride, dilate, pad); MXNet's empty tuple = ``default``."""
    v = node.ints(key)
    return list(v) if v else [default] * n


def _bias(g: Graph, node: Node, i: int = 2) -> list[str]:
    """``[bias]`` when the node has one (no_bias False and the input present), else ``[]``."""
    return [] if node.flag("no_bias") or not g.has_input(node, i) else [g.x(node, i)]


@converts("FullyConnected")
def fully_connected(g: Graph, node: Node) -> Outputs:
    """MXNet's flatten=True: the input is flattened to (batch, rest), then Gemm with the
    weight transposed; flatten=False applies the weight to the last axis (MatMul)."""
    x, w, b = g.x(node, 0), g.x(node, 1), _bias(g, node)
    if node.flag("flatten", True):
        if g.ndim(node) != 2:
            x = g.op("Flatten", [x], axis=1)
        return g.op("Gemm", [x, w, *b], g.out(node), transB=1)
    y = g.op("MatMul", [x, g.op("Transpose", [w], perm=[1, 0])], None if b else g.out(node))
    return g.op("Add", [y, b[0]], g.out(node)) if b else y


@converts("Convolution")
def convolution(g: Graph, node: Node) -> Outputs:
    """Conv over 1, 2 or 3 spatial axes: kernel, stride, dilate, symmetric pad, num_group."""
    _layout(node)
    kernel = list(node.ints("kernel"))
    n = len(kernel)
    pad = _per_axis(node, "pad", n, 0)
    return g.op("Conv", [g.x(node, 0), g.x(node, 1), *_bias(g, node)], g.out(node),
                kernel_shape=kernel, strides=_per_axis(node, "stride", n, 1),
                dilations=_per_axis(node, "dilate", n, 1), pads=pad + pad,
                group=int(node.get("num_group", 1)))


@converts("Deconvolution")
def deconvolution(g: Graph, node: Node) -> Outputs:
    """ConvTranspose. With target_shape, pad and adj are derived as MXNet's InferPad does
    (total = stride·(x − 1) + dilated kernel − target; pad = ⌈total/2⌉, adj = total mod 2).
    adj (extra size at the end) becomes a smaller end pad where the pad allows, else
    output_padding."""
    _layout(node)
    kernel = list(node.ints("kernel"))
    n = len(kernel)
    stride, dilate = _per_axis(node, "stride", n, 1), _per_axis(node, "dilate", n, 1)
    pad, adj = _per_axis(node, "pad", n, 0), _per_axis(node, "adj", n, 0)
    target = node.ints("target_shape")
    if target and any(target):
        spatial = g.shape(node)[2:]
        pad, adj = [], []
        for i in range(n):
            total = stride[i] * (spatial[i] - 1) + dilate[i] * (kernel[i] - 1) + 1 - target[i]
            if total < 0:
                raise node.fail(f"target_shape {target} is larger than the full output")
            adj.append(total % 2)
            pad.append((total + 1) // 2)
    ends = [p - a if a <= p else p for p, a in zip(pad, adj)]
    out_pad = [0 if a <= p else a for p, a in zip(pad, adj)]
    return g.op("ConvTranspose", [g.x(node, 0), g.x(node, 1), *_bias(g, node)], g.out(node),
                kernel_shape=kernel, strides=stride, dilations=dilate, pads=pad + ends,
                output_padding=out_pad if any(out_pad) else None,
                group=int(node.get("num_group", 1)))


@converts("Pooling")
def pooling(g: Graph, node: Node) -> Outputs:
    """max → MaxPool, avg → AveragePool (count_include_pad None means True, as MXNet),
    sum → a depthwise Conv with a kernel of ones (exact: padding adds zeros); global_pool →
    GlobalMaxPool / GlobalAveragePool / ReduceSum. lp is MXNet's signed (Σ x^p)^(1/p):
    LpPool for p = 2 (where it equals ONNX's Σ|x|^p), a sum pool of x for p = 1 and the cube
    root of a sum pool of x³ for p = 3. pooling_convention="full" (ceil rounding) → ceil_mode,
    or extra end padding for the sum pools (zeros are neutral there)."""
    _layout(node)
    x, kind = g.x(node), node.get("pool_type", "max")
    out = g.out(node)
    p = node.get("p_value")
    if kind == "lp":
        if p not in (1, 2, 3):
            raise node.fail(f"lp pooling needs p_value 1, 2 or 3, got {p}")
        if p != 2:
            dt = g.dtype(node)
            xp = x if p == 1 else g.op("Pow", [x, g.scalar(3, dt)])
            s = _sum_pool(g, node, xp, out if p == 1 else None)
            if p == 1:
                return s
            root = g.op("Pow", [g.op("Abs", [s]), g.scalar(1 / 3, dt)])
            return g.op("Mul", [g.op("Sign", [s]), root], out)
    if node.flag("global_pool"):
        if kind == "sum":
            return _sum_pool(g, node, x, out)
        op = {"max": "GlobalMaxPool", "avg": "GlobalAveragePool", "lp": "GlobalLpPool"}[kind]
        return g.op(op, [x], out, p=2 if kind == "lp" else None)
    kernel, stride, pad, ceil = _pool_geometry(g, node)
    common = dict(kernel_shape=kernel, strides=stride, pads=pad + pad, ceil_mode=int(ceil))
    if kind == "max":
        return g.op("MaxPool", [x], out, **common)
    if kind == "avg":
        include = node.get("count_include_pad")
        include = True if include is None else node.flag("count_include_pad")
        return g.op("AveragePool", [x], out, count_include_pad=int(include), **common)
    if kind == "lp":
        if ceil and g.opset < 18:  # LpPool has ceil_mode from opset 18 on
            return g.op("LpPool", [x], out, kernel_shape=kernel, strides=stride,
                        pads=pad + [a + b for a, b in zip(pad, _ceil_extra(g, node, kernel, stride, pad))], p=2)
        return g.op("LpPool", [x], out, p=2, **{**common, "ceil_mode": int(ceil) if ceil else None})
    return _sum_pool(g, node, x, out)


def _pool_geometry(g: Graph, node: Node) -> tuple[list[int], list[int], list[int], bool]:
    """(kernel, stride, pad, ceil) of a non-global Pooling node."""
    kernel = list(node.ints("kernel"))
    n = len(kernel)
    convention = node.get("pooling_convention", "valid")
    if convention not in ("valid", "full"):
        raise node.fail(f"pooling_convention={convention} is not supported (valid, full)")
    return kernel, _per_axis(node, "stride", n, 1), _per_axis(node, "pad", n, 0), convention == "full"


def _ceil_extra(g: Graph, node: Node, kernel: list[int], stride: list[int], pad: list[int]) -> list[int]:
    """The end padding per axis that makes floor rounding give the ceil-rounded size."""
    spatial = g.shape(node)[2:]
    return [(-(spatial[i] + 2 * pad[i] - kernel[i])) % stride[i] for i in range(len(kernel))]


def _sum_pool(g: Graph, node: Node, x: str, out: str | None) -> str:
    """Sum over each pooling window of ``x`` (the node's geometry): ReduceSum for
    global_pool, else a depthwise Conv with ones (pads, and the ceil convention as extra end
    padding, add zeros)."""
    if node.flag("global_pool"):
        return g.reduce("Sum", x, range(2, g.ndim(node)), True, out)
    kernel, stride, pad, ceil = _pool_geometry(g, node)
    ends = pad
    if ceil:
        ends = [a + b for a, b in zip(pad, _ceil_extra(g, node, kernel, stride, pad))]
    channels = g.shape(node)[1]
    ones = g.const(np.ones([channels, 1] + kernel, dtype=g.dtype(node)), hint=f"{node.name}_ones")
    return g.op("Conv", [x, ones], out, kernel_shape=kernel, strides=stride, pads=pad + ends, group=channels)


@converts("BatchNorm")
def batch_norm(g: Graph, node: Node) -> Outputs:
    """BatchNormalization with the moving statistics (inference; use_global_stats and
    momentum do not matter then). fix_gamma=True (MXNet's default) uses ones for gamma; a
    channel axis other than 1 is moved to 1 and back. Only output 0 is exported."""
    nd = g.ndim(node)
    if nd < 2:
        raise node.fail("BatchNorm needs an input with at least 2 axes")
    axis = int(node.get("axis", 1)) % nd
    x = g.x(node)
    if node.flag("fix_gamma", True):
        gamma = g.const(np.ones(g.shape(node)[axis], dtype=g.dtype(node, 1)), hint=f"{node.name}_gamma_fixed")
    else:
        gamma = g.x(node, 1)
    ins = [gamma, g.x(node, 2), g.x(node, 3), g.x(node, 4)]
    eps = node.num("eps", 1e-3)
    if axis == 1:
        return g.op("BatchNormalization", [x, *ins], g.out(node), epsilon=eps)
    perm = [0, axis] + [a for a in range(1, nd) if a != axis]
    inverse = [perm.index(a) for a in range(nd)]
    y = g.op("BatchNormalization", [g.op("Transpose", [x], perm=perm), *ins], epsilon=eps)
    return g.op("Transpose", [y], g.out(node), perm=inverse)


@converts("LayerNorm")
def layer_norm(g: Graph, node: Node) -> Outputs:
    """(x − mean) / sqrt(var + eps) · gamma + beta over one axis, written out (ONNX's
    LayerNormalization normalises over every axis from ``axis`` on, which differs for an axis
    that is not the last). With output_mean_var the mean and the standard deviation are
    outputs 1 and 2."""
    nd = g.ndim(node)
    axis = int(node.get("axis", -1)) % nd
    x = g.x(node)
    dt = g.dtype(node)
    mean = g.reduce("Mean", x, [axis], True)
    d = g.op("Sub", [x, mean])
    var = g.reduce("Mean", g.op("Mul", [d, d]), [axis], True)
    std = g.op("Sqrt", [g.op("Add", [var, g.scalar(node.num("eps", 1e-5), dt, "eps")])])
    y = g.op("Div", [d, std])
    gamma, beta = g.x(node, 1), g.x(node, 2)
    if axis != nd - 1:
        shape = g.ints([-1] + [1] * (nd - 1 - axis), "shape")
        gamma, beta = g.op("Reshape", [gamma, shape]), g.op("Reshape", [beta, shape])
    out = g.op("Add", [g.op("Mul", [y, gamma]), beta], g.out(node, 0))
    if g.n_outputs.get(node.index, 1) == 3:
        return [out, g.op("Identity", [mean], g.out(node, 1)), g.op("Identity", [std], g.out(node, 2))]
    return out


_ACTIVATIONS = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus",
                "softsign": "Softsign"}


@converts("Activation")
def activation(g: Graph, node: Node) -> Outputs:
    """relu, sigmoid, tanh, softrelu (Softplus), softsign."""
    act = node.get("act_type")
    if act not in _ACTIVATIONS:
        raise node.fail(f"act_type={act} has no ONNX equivalent")
    return g.op(_ACTIVATIONS[act], [g.x(node)], g.out(node))


@converts("LeakyReLU")
def leaky_relu(g: Graph, node: Node) -> Outputs:
    """leaky → LeakyRelu(slope), elu → Elu(slope), selu → Selu (MXNet's α and λ), prelu →
    PRelu with gamma along axis 1, gelu → Gelu (opset 20) or x·Φ(x) through Erf, rrelu →
    LeakyRelu with the inference slope (lower_bound + upper_bound) / 2."""
    act, x, out = node.get("act_type", "leaky"), g.x(node), g.out(node)
    slope = node.num("slope", 0.25)
    if act == "leaky":
        return g.op("LeakyRelu", [x], out, alpha=slope)
    if act == "elu":
        return g.op("Elu", [x], out, alpha=slope)
    if act == "selu":
        return g.op("Selu", [x], out, alpha=1.6732632423543772, gamma=1.0507009873554805)
    if act == "rrelu":
        return g.op("LeakyRelu", [x], out, alpha=(node.num("lower_bound") + node.num("upper_bound")) / 2)
    if act == "prelu":
        gamma, nd = g.x(node, 1), g.ndim(node)
        if nd > 2:
            gamma = g.op("Reshape", [gamma, g.ints([-1] + [1] * (nd - 2), "shape")])
        return g.op("PRelu", [x, gamma], out)
    if act == "gelu":
        if g.opset >= 20:
            return g.op("Gelu", [x], out)
        dt = g.dtype(node)
        erf = g.op("Erf", [g.op("Mul", [x, g.scalar(1 / math.sqrt(2), dt)])])
        half = g.op("Mul", [x, g.scalar(0.5, dt)])
        return g.op("Mul", [half, g.op("Add", [erf, g.scalar(1, dt)])], out)
    raise node.fail(f"act_type={act} has no ONNX equivalent")


@converts("Dropout")
def dropout(g: Graph, node: Node) -> Outputs:
    """The identity at inference; mode="always" (dropout in inference too) is refused, as by
    MXNet's exporter."""
    if node.get("mode", "training") != "training":
        raise node.fail('mode="always" (dropout at inference) has no ONNX equivalent')
    return g.x(node)


@converts("BlockGrad", "MakeLoss", "LinearRegressionOutput", "MAERegressionOutput")
def identity(g: Graph, node: Node) -> Outputs:
    """The forward value is the input (gradient-only operators; regression outputs without
    their label)."""
    return g.x(node)


@converts("LogisticRegressionOutput")
def logistic_regression_output(g: Graph, node: Node) -> Outputs:
    """Sigmoid of the input (the label is dropped)."""
    return g.op("Sigmoid", [g.x(node)], g.out(node))


def _instance_softmax(g: Graph, node: Node, out: str) -> str:
    """Softmax over all axes but the first, keeping the input's shape (SoftmaxOutput's and
    SoftmaxActivation's default)."""
    x = g.x(node)
    if g.ndim(node) == 2:
        return g.op("Softmax", [x], out, axis=1)
    s = g.op("Softmax", [g.op("Flatten", [x], axis=1)], axis=1)
    return g.op("Reshape", [s, g.op("Shape", [x])], out)


@converts("SoftmaxOutput")
def softmax_output(g: Graph, node: Node) -> Outputs:
    """Softmax without the label: over axis 1 with multi_output, the last axis with
    preserve_shape, else over all but the first axis (MXNet's exporter writes Softmax)."""
    if node.flag("multi_output"):
        return g.op("Softmax", [g.x(node)], g.out(node), axis=1)
    if node.flag("preserve_shape"):
        return g.op("Softmax", [g.x(node)], g.out(node), axis=-1)
    return _instance_softmax(g, node, g.out(node))


@converts("SoftmaxActivation")
def softmax_activation(g: Graph, node: Node) -> Outputs:
    """mode="instance": over all but the first axis; "channel": over axis 1."""
    if node.get("mode", "instance") == "channel":
        return g.op("Softmax", [g.x(node)], g.out(node), axis=1)
    return _instance_softmax(g, node, g.out(node))


def _softmax(kind: str) -> Converter:
    def convert(g: Graph, node: Node) -> Outputs:
        """Softmax / LogSoftmax along ``axis``, the input divided by ``temperature`` first;
        ``dtype`` casts the result."""
        if node.flag("use_length"):
            raise node.fail("use_length=True is not supported")
        x, dt = g.x(node), g.dtype(node)
        t = node.get("temperature")
        if t is not None and float(t) != 1.0:
            x = g.op("Div", [x, g.scalar(float(t), dt, "temperature")])
        cast = g.out_dtype(node) != dt
        y = g.op(kind, [x], None if cast else g.out(node), axis=int(node.get("axis", -1)))
        return g.cast(y, g.out_dtype(node), g.out(node)) if cast else y
    return convert


converts("softmax")(_softmax("Softmax"))
converts("log_softmax")(_softmax("LogSoftmax"))


@converts("Embedding")
def embedding(g: Graph, node: Node) -> Outputs:
    """Gather of the weight's rows at the indices (cast to int64, the fraction dropped)."""
    return g.op("Gather", [g.x(node, 1), _as_int64(g, node, 0)], g.out(node), axis=0)


def _as_int64(g: Graph, node: Node, i: int) -> str:
    """Input ``i`` as int64 indices (Cast truncates toward zero, as MXNet's float indices)."""
    x = g.x(node, i)
    return x if g.dtype(node, i) == np.int64 else g.cast(x, np.int64)


def _lengths(g: Graph, node: Node) -> str:
    """The sequence_length input as int64 (shape (batch,))."""
    return _as_int64(g, node, 1)


def _steps(g: Graph, node: Node, x: str, axis: int) -> str:
    """0, 1, …, T − 1 along the time axis, as int64 (a constant when T is static)."""
    t = g.dim_value(x, g.dims(node), axis)
    if isinstance(t, int):
        return g.ints(range(t), "steps")
    limit = g.squeeze(t, [0])
    return g.op("Range", [g.scalar(0, np.int64), limit, g.scalar(1, np.int64)])


@converts("SequenceMask")
def sequence_mask(g: Graph, node: Node) -> Outputs:
    """Steps at or past each sequence's length become ``value`` (Where over a step < length
    mask); the identity without use_sequence_length."""
    x = g.x(node)
    if not node.flag("use_sequence_length"):
        return x
    axis, nd = int(node.get("axis", 0)), g.ndim(node)
    steps, lens = _steps(g, node, x, axis), _lengths(g, node)
    if axis == 0:
        mask = g.op("Less", [g.unsqueeze(steps, [1]), g.unsqueeze(lens, [0])])
    else:
        mask = g.op("Less", [g.unsqueeze(steps, [0]), g.unsqueeze(lens, [1])])
    if nd > 2:
        mask = g.unsqueeze(mask, range(2, nd))
    value = g.scalar(node.num("value", 0.0), g.dtype(node), "value")
    return g.op("Where", [mask, x, value], g.out(node))


@converts("SequenceLast")
def sequence_last(g: Graph, node: Node) -> Outputs:
    """The last step (index −1 along the time axis), or step length − 1 of every sequence
    (GatherElements) with use_sequence_length."""
    x, axis = g.x(node), int(node.get("axis", 0))
    if not node.flag("use_sequence_length"):
        return g.op("Gather", [x, g.scalar(-1, np.int64)], g.out(node), axis=axis)
    nd = g.ndim(node)
    last = g.op("Sub", [_lengths(g, node), g.ints([1], "one")])
    batch_axis = 1 - axis
    idx = g.unsqueeze(last, [a for a in range(nd) if a != batch_axis])
    # The index must have the data's shape with the time axis of size 1.
    pieces = [g.ints([1], "one") if a == axis else g.shape_slice(x, a, a + 1) for a in range(nd)]
    idx = g.op("Expand", [idx, g.op("Concat", pieces, axis=0)])
    return g.squeeze(g.op("GatherElements", [x, idx], axis=axis), [axis], g.out(node))


@converts("SequenceReverse")
def sequence_reverse(g: Graph, node: Node) -> Outputs:
    """Reverses the time axis (0): ReverseSequence with the lengths, else a Slice with step −1."""
    x = g.x(node)
    if int(node.get("axis", 0)) != 0:
        raise node.fail("only axis=0 is supported, as in MXNet")
    if node.flag("use_sequence_length"):
        return g.op("ReverseSequence", [x, _lengths(g, node)], g.out(node), batch_axis=1, time_axis=0)
    return g.op("Slice", [x, g.ints([-1]), g.ints([np.iinfo(np.int64).min]), g.ints([0]), g.ints([-1])],
                g.out(node))
