"""Converters of the tensor operators: elementwise and broadcast arithmetic, the scalar
operators (``_plus_scalar``, …), unary math, reductions, shape operators (Flatten, Reshape,
transpose, expand_dims, squeeze, Concat, SliceChannel, stack, slice, slice_axis), indexing
(take, pick, one_hot, where), products (dot, batch_dot), fills and broadcast_like."""

from __future__ import annotations

import numpy as np

from ._graph import INT64_MAX, INT64_MIN, Converter, Graph, Node, Outputs, converts

# -- elementwise -----------------------------------------------------------------------------

_UNARY = {"abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "negative": "Neg", "relu": "Relu",
          "sigmoid": "Sigmoid", "tanh": "Tanh"}

_BINARY = {"elemwise_add": "Add", "elemwise_sub": "Sub", "elemwise_mul": "Mul", "elemwise_div": "Div",
           "_maximum": "Max", "_minimum": "Min", "_power": "Pow",
           "broadcast_add": "Add", "broadcast_sub": "Sub", "broadcast_mul": "Mul", "broadcast_div": "Div",
           "broadcast_maximum": "Max", "broadcast_minimum": "Min", "broadcast_power": "Pow"}

# MXNet scalar operator -> (ONNX operator, scalar on the left).
_SCALAR = {"_plus_scalar": ("Add", False), "_minus_scalar": ("Sub", False), "_rminus_scalar": ("Sub", True),
           "_mul_scalar": ("Mul", False), "_div_scalar": ("Div", False), "_rdiv_scalar": ("Div", True),
           "_power_scalar": ("Pow", False), "_rpower_scalar": ("Pow", True),
           "_maximum_scalar": ("Max", False), "_minimum_scalar": ("Min", False)}


def _unary(onnx_op: str) -> Converter:
    def convert(g: Graph, node: Node) -> Outputs:
        return g.op(onnx_op, [g.x(node)], g.out(node))
    convert.__doc__ = f"The elementwise ONNX {onnx_op}."
    return convert


def _binary(onnx_op: str) -> Converter:
    def convert(g: Graph, node: Node) -> Outputs:
        return g.op(onnx_op, [g.x(node, 0), g.x(node, 1)], g.out(node))
    convert.__doc__ = f"ONNX {onnx_op} (numpy broadcasting, which covers MXNet's broadcast_*)."
    return convert


def _scalar(onnx_op: str, left: bool) -> Converter:
    def convert(g: Graph, node: Node) -> Outputs:
        c = g.scalar(node.num("scalar", 1.0), g.dtype(node), "scalar")
        x = g.x(node)
        return g.op(onnx_op, [c, x] if left else [x, c], g.out(node))
    convert.__doc__ = (f"ONNX {onnx_op} with the scalar as a 0-d constant of the input's dtype "
                       f"(MXNet casts the scalar to the input's type), on the {'left' if left else 'right'}.")
    return convert


for _name, _op in _UNARY.items():
    converts(_name)(_unary(_op))
for _name, _op in _BINARY.items():
    converts(_name)(_binary(_op))
for _name, (_op, _left) in _SCALAR.items():
    converts(_name)(_scalar(_op, _left))


@converts("square")
def square(g: Graph, node: Node) -> Outputs:
    """x · x."""
    x = g.x(node)
    return g.op("Mul", [x, x], g.out(node))


@converts("add_n")
def add_n(g: Graph, node: Node) -> Outputs:
    """Sum of every input (MXNet's ElementWiseSum)."""
    return g.op("Sum", [g.x(node, i) for i in range(len(node.inputs))], g.out(node))


@converts("clip")
def clip(g: Graph, node: Node) -> Outputs:
    """Clip with a_min and a_max as constants of the input's dtype."""
    dt = g.dtype(node)
    return g.op("Clip", [g.x(node), g.scalar(node.num("a_min"), dt, "min"),
                         g.scalar(node.num("a_max"), dt, "max")], g.out(node))


@converts("where")
def where(g: Graph, node: Node) -> Outputs:
    """Where on condition ≠ 0; a condition of shape (N,) selects whole rows, as in MXNet."""
    cond = g.cast(g.x(node, 0), np.bool_)
    nd = g.ndim(node, 1)
    if g.ndim(node, 0) == 1 and nd > 1:
        cond = g.unsqueeze(cond, range(1, nd))
    return g.op("Where", [cond, g.x(node, 1), g.x(node, 2)], g.out(node))


# -- fills -----------------------------------------------------------------------------------

def _fill(g: Graph, shape_tensor: str, value: float, dtype: np.dtype, out: str) -> str:
    return g.op("ConstantOfShape", [shape_tensor], out, value=np.asarray([value], dtype=dtype))


@converts("zeros_like")
def zeros_like(g: Graph, node: Node) -> Outputs:
    """ConstantOfShape(Shape(x)) with 0 of x's dtype."""
    return _fill(g, g.op("Shape", [g.x(node)]), 0, g.dtype(node), g.out(node))


@converts("ones_like")
def ones_like(g: Graph, node: Node) -> Outputs:
    """ConstantOfShape(Shape(x)) with 1 of x's dtype."""
    return _fill(g, g.op("Shape", [g.x(node)]), 1, g.dtype(node), g.out(node))


@converts("_zeros", "_ones", "_full")
def full(g: Graph, node: Node) -> Outputs:
    """ConstantOfShape of the node's shape, dtype and value (0 for _zeros, 1 for _ones)."""
    value = {"_zeros": 0.0, "_ones": 1.0}.get(node.op)
    value = node.num("value") if value is None else value
    return _fill(g, g.ints(node.ints("shape"), "shape"), value, g.out_dtype(node), g.out(node))


# -- reductions ------------------------------------------------------------------------------

def _reduce_axes(node: Node, nd: int) -> list[int]:
    """MXNet's axis / exclude: None or () means every axis; exclude takes the complement."""
    axis = node.get("axis")
    axes = list(range(nd)) if axis is None or axis == () else [a % nd for a in node.ints("axis")]
    if node.flag("exclude") and axis not in (None, ()):
        axes = [a for a in range(nd) if a not in axes]
    return sorted(set(axes))


def _reduction(kind: str) -> Converter:
    def convert(g: Graph, node: Node) -> Outputs:
        x, nd = g.x(node), g.ndim(node)
        if kind == "NanSum":
            zero = g.scalar(0, g.dtype(node))
            x = g.op("Where", [g.op("IsNaN", [x]), zero, x])
        axes = _reduce_axes(node, nd)
        keep = node.flag("keepdims")
        out_rank = len(g.out_dims(node))
        if not axes:
            return g.op("Identity", [x], g.out(node))
        onnx_kind = "Sum" if kind == "NanSum" else kind
        if (nd if keep else nd - len(axes)) == out_rank:
            return g.reduce(onnx_kind, x, axes, keep, g.out(node))
        # A reduction over every axis: MXNet gives shape (1,) where ONNX gives a scalar.
        return g.op("Reshape", [g.reduce(onnx_kind, x, axes, keep), g.ints([1], "shape")], g.out(node))
    convert.__doc__ = (f"Reduce{kind} over MXNet's axis (None: all; exclude: the others), keepdims; a "
                       f"reduction over every axis has shape (1,) as in MXNet.")
    return convert


for _name, _kind in {"sum": "Sum", "mean": "Mean", "max": "Max", "min": "Min", "prod": "Prod",
                     "nansum": "NanSum"}.items():
    converts(_name)(_reduction(_kind))


def _arg(kind: str) -> Converter:
    def convert(g: Graph, node: Node) -> Outputs:
        x = g.x(node)
        axis = node.get("axis")
        if axis is None:
            y = g.op(kind, [g.op("Reshape", [x, g.ints([-1], "shape")])], axis=0, keepdims=1)
        else:
            y = g.op(kind, [x], axis=int(axis), keepdims=int(node.flag("keepdims")))
        return g.cast(y, g.out_dtype(node), g.out(node))
    convert.__doc__ = (f"{kind} (the first index on ties), cast to float32 as MXNet returns it; "
                       f"without an axis over the flattened input, shape (1,).")
    return convert


converts("argmax")(_arg("ArgMax"))
converts("argmin")(_arg("ArgMin"))


# -- shapes ----------------------------------------------------------------------------------

@converts("Flatten")
def flatten(g: Graph, node: Node) -> Outputs:
    """ONNX Flatten at axis 1: (batch, everything else)."""
    if g.ndim(node) >= 2:
        return g.op("Flatten", [g.x(node)], g.out(node), axis=1)
    return g.reshape(g.x(node), g.dims(node), g.out_dims(node), g.out(node))


@converts("Reshape")
def reshape(g: Graph, node: Node) -> Outputs:
    """MXNet's codes (0, -1, -2, -3, -4, reverse, target_shape) resolved by shape inference
    into the concrete target shape; sizes that follow a dynamic input axis are written 0
    (copy the input's size at that axis, e.g. the batch), read from the input, or -1."""
    return g.reshape(g.x(node), g.dims(node), g.out_dims(node), g.out(node))


@converts("transpose")
def transpose(g: Graph, node: Node) -> Outputs:
    """Transpose by ``axes`` (empty: reverse the axes)."""
    axes = node.ints("axes") or tuple(reversed(range(g.ndim(node))))
    return g.op("Transpose", [g.x(node)], g.out(node), perm=[a % g.ndim(node) for a in axes])


@converts("SwapAxis")
def swap_axis(g: Graph, node: Node) -> Outputs:
    """Transpose exchanging dim1 and dim2."""
    nd = g.ndim(node)
    perm = list(range(nd))
    a, b = int(node.get("dim1", 0)) % nd, int(node.get("dim2", 0)) % nd
    perm[a], perm[b] = perm[b], perm[a]
    return g.op("Transpose", [g.x(node)], g.out(node), perm=perm)


@converts("expand_dims")
def expand_dims(g: Graph, node: Node) -> Outputs:
    """Unsqueeze at ``axis`` (negative counts in the output, as in both)."""
    return g.unsqueeze(g.x(node), [int(node.get("axis"))], g.out(node))


@converts("squeeze")
def squeeze(g: Graph, node: Node) -> Outputs:
    """Squeeze the listed axes, or (axis None) every axis of static size 1 (a dynamic axis is
    never removed); a result with no axes left has shape (1,), as in MXNet."""
    x, dims = g.x(node), g.dims(node)
    if node.get("axis") is None:
        axes = [k for k, d in enumerate(dims) if set(d) == {1}]
    else:
        axes = sorted({a % len(dims) for a in node.ints("axis")})
    if len(axes) == len(dims):
        return g.op("Reshape", [x, g.ints([1], "shape")], g.out(node))
    if not axes:
        return g.op("Identity", [x], g.out(node))
    return g.squeeze(x, axes, g.out(node))


@converts("Concat")
def concat(g: Graph, node: Node) -> Outputs:
    """Concat along ``dim``."""
    return g.op("Concat", [g.x(node, i) for i in range(len(node.inputs))], g.out(node),
                axis=int(node.get("dim", 1)))


@converts("stack")
def stack(g: Graph, node: Node) -> Outputs:
    """Unsqueeze every input at ``axis``, then Concat."""
    nd = g.ndim(node) + 1
    axis = int(node.get("axis", 0)) % nd
    parts = [g.unsqueeze(g.x(node, i), [axis]) for i in range(len(node.inputs))]
    return g.op("Concat", parts, g.out(node), axis=axis)


@converts("SliceChannel")
def slice_channel(g: Graph, node: Node) -> Outputs:
    """Split into num_outputs equal parts along ``axis``; squeeze_axis removes the axis.
    The outputs are named ``name0``, ``name1``, … (MXNet's exporter)."""
    nd = g.ndim(node)
    axis = int(node.get("axis", 1)) % nd
    n = int(node.get("num_outputs"))
    names = [g.out(node, k) for k in range(n)]
    squeeze_axis = node.flag("squeeze_axis")
    split_outs = [g.fresh(f"{nm}_split") for nm in names] if squeeze_axis else names
    size = g.dims(node)[axis]
    if len(set(size)) == 1:
        outs = g.op_n("Split", [g.x(node), g.ints([size[0] // n] * n, "split")], n, split_outs, axis=axis)
    elif g.opset >= 18:
        outs = g.op_n("Split", [g.x(node)], n, split_outs, axis=axis, num_outputs=n)
    else:
        outs = g.op_n("Split", [g.x(node)], n, split_outs, axis=axis)
    if squeeze_axis:
        outs = [g.squeeze(o, [axis], nm) for o, nm in zip(outs, names)]
    return outs


def _slice_bounds(begin: tuple, end: tuple, step: tuple) -> tuple[list[int], list[int], list[int]]:
    """MXNet's (begin, end, step) with None entries as ONNX Slice starts/ends/steps."""
    steps = [1 if s is None else int(s) for s in step] or [1] * len(begin)
    starts = [(0 if s > 0 else INT64_MAX) if b is None else int(b) for b, s in zip(begin, steps)]
    ends = [(INT64_MAX if s > 0 else INT64_MIN) if e is None else int(e) for e, s in zip(end, steps)]
    return starts, ends, steps


def _tuple(v: object) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (v,)


@converts("slice")
def slice_(g: Graph, node: Node) -> Outputs:
    """Slice with one (begin, end, step) per leading axis; None entries take the whole axis
    (reversed for a negative step)."""
    begin, end = _tuple(node.get("begin", ())), _tuple(node.get("end", ()))
    step = _tuple(node.get("step", ())) if node.get("step", ()) != () else ()
    if step and len(step) != len(begin):
        raise node.fail("step must be empty or as long as begin")
    starts, ends, steps = _slice_bounds(begin, end, step)
    return g.op("Slice", [g.x(node), g.ints(starts, "starts"), g.ints(ends, "ends"),
                          g.ints(range(len(starts)), "axes"), g.ints(steps, "steps")], g.out(node))


@converts("reverse")
def reverse(g: Graph, node: Node) -> Outputs:
    """Slice walking each reversed axis backwards (start -1, step -1, to before index 0)."""
    nd = g.ndim(node)
    axes = sorted({int(a) % nd for a in _tuple(node.get("axis"))})
    return g.op("Slice", [g.x(node), g.ints([-1] * len(axes), "starts"),
                          g.ints([-(2 ** 63)] * len(axes), "ends"), g.ints(axes, "axes"),
                          g.ints([-1] * len(axes), "steps")], g.out(node))


@converts("slice_axis")
def slice_axis(g: Graph, node: Node) -> Outputs:
    """Slice of one axis from ``begin`` to ``end`` (None: the end)."""
    end = node.get("end")
    return g.op("Slice", [g.x(node), g.ints([int(node.get("begin"))], "starts"),
                          g.ints([INT64_MAX if end is None else int(end)], "ends"),
                          g.ints([int(node.get("axis"))], "axes")], g.out(node))


@converts("broadcast_like")
def broadcast_like(g: Graph, node: Node) -> Outputs:
    """Expand lhs to rhs's shape, or (lhs_axes, rhs_axes) to the inferred output shape."""
    lhs, rhs = g.x(node, 0), g.x(node, 1)
    if node.get("lhs_axes") is None:
        return g.op("Expand", [lhs, g.op("Shape", [rhs])], g.out(node))
    shape = g.shape_input(g.out_dims(node), [(rhs, g.dims(node, 1)), (lhs, g.dims(node, 0))])
    return g.op("Expand", [lhs, shape], g.out(node))


# -- products --------------------------------------------------------------------------------

def _prod(dims: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Per-variant product of several axes' variant tuples."""
    n = len(dims[0]) if dims else 1
    return tuple(int(np.prod([d[v] for d in dims])) for v in range(n))


@converts("dot")
def dot(g: Graph, node: Node) -> Outputs:
    """MatMul (Gemm-like transposes for 1-D/2-D operands); N-D operands are viewed as
    matrices (leading axes × last axis of lhs, first axis × the rest of rhs) and the product
    reshaped to lhs's outer axes + rhs's. Two vectors give shape (1,)."""
    a, b = g.x(node, 0), g.x(node, 1)
    da, db = g.dims(node, 0), g.dims(node, 1)
    ta, tb = node.flag("transpose_a"), node.flag("transpose_b")
    if len(da) == 1 and len(db) == 1:
        return g.op("Reshape", [g.op("MatMul", [a, b]), g.ints([1], "shape")], g.out(node))
    if len(da) <= 2 and len(db) <= 2:
        if ta and len(da) == 2:
            a = g.op("Transpose", [a], perm=[1, 0])
        if tb and len(db) == 2:
            b = g.op("Transpose", [b], perm=[1, 0])
        return g.op("MatMul", [a, b], g.out(node))
    if ta or tb:
        raise node.fail("transpose_a/transpose_b with operands of more than 2 axes are not supported")
    a2 = g.reshape(a, da, [_prod(da[:-1]), da[-1]])
    b2 = g.reshape(b, db, [db[0], _prod(db[1:])])
    return g.reshape(g.op("MatMul", [a2, b2]), [_prod(da[:-1]), _prod(db[1:])], g.out_dims(node), g.out(node),
                     sources=[(a, da), (b, db)])


@converts("batch_dot")
def batch_dot(g: Graph, node: Node) -> Outputs:
    """MatMul over the leading (batch) axes, the last two axes transposed on request."""
    ins = []
    for i, flag in ((0, "transpose_a"), (1, "transpose_b")):
        x, nd = g.x(node, i), g.ndim(node, i)
        if node.flag(flag):
            x = g.op("Transpose", [x], perm=list(range(nd - 2)) + [nd - 1, nd - 2])
        ins.append(x)
    return g.op("MatMul", ins, g.out(node))


# -- indexing --------------------------------------------------------------------------------

def _indices(g: Graph, node: Node, i: int, data_i: int, axis: int, mode: str) -> str:
    """Input ``i`` as int64 indices into axis ``axis`` of input ``data_i``: clipped to
    [0, size − 1] ("clip"), wrapped modulo the size ("wrap"), or as given ("raise")."""
    idx = g.x(node, i)
    if g.dtype(node, i) != np.int64:
        idx = g.cast(idx, np.int64)
    if mode not in ("clip", "wrap"):
        return idx
    size = g.dim_value(g.x(node, data_i), g.dims(node, data_i), axis)
    if isinstance(size, int):
        hi, n = g.scalar(size - 1, np.int64, "max"), g.scalar(size, np.int64, "size")
    else:
        n = g.squeeze(size, [0])
        hi = g.op("Sub", [n, g.scalar(1, np.int64)])
    if mode == "clip":
        return g.op("Clip", [idx, g.scalar(0, np.int64, "min"), hi])
    return g.op("Mod", [idx, n])


@converts("take")
def take(g: Graph, node: Node) -> Outputs:
    """Gather along ``axis`` at the indices (cast to int64; mode clip, wrap or raise)."""
    axis = int(node.get("axis", 0)) % g.ndim(node, 0)
    idx = _indices(g, node, 1, 0, axis, node.get("mode", "clip"))
    return g.op("Gather", [g.x(node, 0), idx], g.out(node), axis=axis)


@converts("pick")
def pick(g: Graph, node: Node) -> Outputs:
    """GatherElements along ``axis`` with the index given that axis (size 1); the axis is
    squeezed unless keepdims; mode clip or wrap."""
    if node.get("axis") is None:
        raise node.fail("axis=None is not supported")
    nd = g.ndim(node, 0)
    axis = int(node.get("axis")) % nd
    idx = _indices(g, node, 1, 0, axis, node.get("mode", "clip"))
    if g.ndim(node, 1) == nd - 1:
        idx = g.unsqueeze(idx, [axis])
    keep = node.flag("keepdims")
    y = g.op("GatherElements", [g.x(node, 0), idx], g.out(node) if keep else None, axis=axis)
    return y if keep else g.squeeze(y, [axis], g.out(node))


@converts("one_hot")
def one_hot(g: Graph, node: Node) -> Outputs:
    """OneHot over a new last axis with (off_value, on_value) in the output dtype. A negative
    index gives a row of off_value as in MXNet (ONNX would count it from the end)."""
    depth = int(node.get("depth"))
    idx = g.x(node)
    if g.dtype(node) != np.int64:
        idx = g.cast(idx, np.int64)
    d = g.scalar(depth, np.int64, "depth")
    idx = g.op("Where", [g.op("Less", [idx, g.scalar(0, np.int64)]), d, idx])
    values = g.const(np.asarray([node.num("off_value", 0.0), node.num("on_value", 1.0)])
                     .astype(g.out_dtype(node)), hint="values")
    return g.op("OneHot", [idx, d, values], g.out(node), axis=-1)
