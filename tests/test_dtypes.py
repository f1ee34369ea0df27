"""One math layer: NDArray methods and registry operators compute in the array's own dtype, as
MXNet 1.9.1 does, and agree with numpy exactly in float64, int32 and int64.

The inputs are chosen so that float32 arithmetic would show: float64 values carry more than 24
significant bits, int64 values sit near 2**40. Each operator runs twice — imperatively
(``mx.nd``) and inside a bound symbol (``mx.sym`` + executor) — so both paths into the kernels
are checked.
"""

import numpy as np
import pytest

import mxfn as mx
from mxfn import executor as ex
from mxfn import nd, sym

DTYPES = ["float64", "int32", "int64"]
FINE = 2.0 ** -20  # float64 values are multiples of this: exact sums, not float32-representable


def values(dtype, shape, seed, low=-40, high=40, nonzero=False):
    """Test data: integers in [low, high) scaled or shifted so that float32 would round them."""
    rng = np.random.default_rng(seed)
    k = rng.integers(low, high, size=shape)
    if nonzero:
        k = np.where(k == 0, 1, k)
    if dtype == "float64":
        return k * (1 + FINE)
    if dtype == "int64":
        return (k + np.sign(k) * (1 << 40)).astype(np.int64) if nonzero else (k + (1 << 40)).astype(np.int64)
    return k.astype(dtype)


def run_sym(s, **arrays):
    """Forward of symbol ``s`` bound to ``arrays`` (numpy, by argument name); numpy outputs."""
    args = {k: nd.array(v, dtype=str(v.dtype)) for k, v in arrays.items()}
    e = ex.bind(s, mx.cpu(), args, grad_req="null")
    ex.forward(e)
    return [o.asnumpy() for o in ex.outputs(e)]


def both(op, *arrays, **attrs):
    """``op`` run through ``mx.nd`` and through a bound symbol: the two results."""
    imperative = getattr(nd, op)(*[nd.array(a, dtype=str(a.dtype)) for a in arrays], **attrs).asnumpy()
    names = [f"x{i}" for i in range(len(arrays))]
    s = getattr(sym, op)(*[sym.variable(n) for n in names], **attrs)
    symbolic = run_sym(s, **dict(zip(names, arrays)))[0]
    return imperative, symbolic


def assert_exact(got, want, dtype):
    assert got.dtype == np.dtype(dtype), (got.dtype, dtype)
    np.testing.assert_array_equal(got, np.asarray(want).astype(dtype))


def trunc_div(a, b):
    """C division (toward zero), as MXNet divides integers; exact for int64."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda a, b: a / b if a.dtype.kind == "f" else trunc_div(a, b),
    "maximum": np.maximum,
    "minimum": np.minimum,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_operators_compute_in_the_dtype(dtype, name):
    a = values(dtype, (3, 4), 1, nonzero=True)
    b = values(dtype, (3, 4), 2, low=1, high=9) if dtype != "int64" else values("int32", (3, 4), 2, 1, 9).astype(np.int64)
    want = BINARY[name](a, b)
    if name in ("add", "sub", "mul", "div"):
        for got in both(f"elemwise_{name}", a, b):
            assert_exact(got, want, dtype)
    # Broadcasting: b's first row against every row of a.
    row = b[:1]
    want_b = BINARY[name](a, row)
    for got in both(f"broadcast_{name}", a, row):
        assert_exact(got, want_b, dtype)
    # The NDArray methods (`a + b`, nd.maximum) run the same kernel.
    x, y = nd.array(a, dtype=dtype), nd.array(row, dtype=dtype)
    method = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}.get(name)
    if method is not None:
        assert_exact(method.asnumpy(), want_b, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_int64_beyond_float32_and_float64_beyond_float32(dtype):
    # The example: 2**40 + 1 plus 1 stays exact (float32 would give 2**40).
    big = np.array([(1 << 40) + 1], dtype=np.int64)
    one = np.ones(1, np.int64)
    for got in both("elemwise_add", big, one) + both("broadcast_add", big, one):
        assert_exact(got, big + 1, "int64")
    x = np.array([1 + 2.0 ** -40], np.float64)
    for got in both("elemwise_mul", x, x):
        assert got[0] == x[0] * x[0] and got[0] != np.float32(x[0]) ** 2


SCALAR = {
    "_plus_scalar": lambda x, s: x + s,
    "_minus_scalar": lambda x, s: x - s,
    "_rminus_scalar": lambda x, s: s - x,
    "_mul_scalar": lambda x, s: x * s,
    "_div_scalar": lambda x, s: x / s if x.dtype.kind == "f" else trunc_div(x, np.full_like(x, s)),
    "_maximum_scalar": lambda x, s: np.maximum(x, s),
    "_minimum_scalar": lambda x, s: np.minimum(x, s),
    "_power_scalar": lambda x, s: x ** s,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SCALAR))
def test_scalar_operators_compute_in_the_dtype(dtype, name):
    x = values(dtype if name != "_power_scalar" else "int32", (2, 5), 3, nonzero=True).astype(dtype)
    s = 3
    want = SCALAR[name](x, x.dtype.type(s))
    for got in both(name, x, scalar=s):
        assert_exact(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_n_clip_where(dtype):
    a, b, c = (values(dtype, (4, 3), s) for s in (4, 5, 6))
    for got in both("add_n", a, b, c):
        assert_exact(got, a + b + c, dtype)
    lo, hi = (-10, 10) if dtype != "int64" else ((1 << 40) - 10, (1 << 40) + 10)
    for got in both("clip", a, a_min=lo, a_max=hi):
        assert_exact(got, np.clip(a, lo, hi), dtype)
    cond = (values("int32", (4, 3), 7) > 0).astype(np.float32)
    for got in both("where", cond, a, b):
        assert_exact(got, np.where(cond != 0, a, b), dtype)


REDUCERS = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "nansum": np.nansum}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(REDUCERS) + ["mean"])
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)])
def test_reductions_compute_in_the_dtype(dtype, name, axis):
    low, high = (-3, 4) if name == "prod" else (-40, 40)
    x = values(dtype, (2, 3, 4), 8, low, high)
    if name == "prod" and dtype == "int64":
        x = values("int32", (2, 3, 4), 8, low, high).astype(np.int64) * 1000
    if name == "mean":
        count = x.size if axis is None else np.prod([x.shape[a] for a in np.atleast_1d(axis)])
        s = np.sum(x, axis=axis)
        want = s / count if dtype == "float64" else trunc_div(s, np.full_like(s, count))
    else:
        want = REDUCERS[name](x, axis=axis)
    attrs = {} if axis is None else {"axis": axis}
    want = np.atleast_1d(want)
    for got in both(name, x, **attrs):
        assert_exact(got, want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax_argmin_compare_in_the_dtype(dtype):
    # Neighbours one apart near 2**40: indistinguishable in float32.
    x = np.array([[5, 7, 6], [9, 8, 9]]) + (1 << 40 if dtype == "int64" else 0)
    x = x.astype(dtype)
    for got in both("argmax", x, axis=1):
        np.testing.assert_array_equal(got, [1, 0])
    for got in both("argmin", x, axis=1):
        np.testing.assert_array_equal(got, [0, 1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_dot_and_batch_dot_compute_in_the_dtype(dtype, ta, tb):
    def m(shape, seed):
        k = np.random.default_rng(seed).integers(-30, 30, size=shape)
        # float64: multiples of 2**-10 whose products need more than float32's 24 bits.
        return k * (1 + 2.0 ** -10) if dtype == "float64" else k.astype(dtype)

    a, b = m((3, 4), 9), m((4, 5), 10)
    a_in, b_in = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    want = a @ b
    for got in both("dot", a_in, b_in, transpose_a=ta, transpose_b=tb):
        assert_exact(got, want, dtype)
    assert_exact(nd.dot(nd.array(a_in, dtype=dtype), nd.array(b_in, dtype=dtype), ta, tb).asnumpy(), want, dtype)
    ba, bb = m((2, 3, 4), 11), m((2, 4, 5), 12)
    for got in both("batch_dot", ba, bb):
        assert_exact(got, ba @ bb, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_concat_transpose_keep_values(dtype):
    x, y = values(dtype, (2, 3, 4), 13), values(dtype, (2, 2, 4), 14)
    for got in both("slice_axis", x, axis=1, begin=1, end=3):
        assert_exact(got, x[:, 1:3], dtype)
    for got in both("slice", x, begin=(0, 1, 1), end=(2, 3, 4)):
        assert_exact(got, x[0:2, 1:3, 1:4], dtype)
    for got in both("concat", x, y, dim=1):
        assert_exact(got, np.concatenate([x, y], axis=1), dtype)
    for got in both("transpose", x, axes=(2, 0, 1)):
        assert_exact(got, np.transpose(x, (2, 0, 1)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,f", [("square", np.square), ("abs", np.abs), ("negative", np.negative),
                                    ("relu", lambda x: np.maximum(x, 0))])
def test_integer_closed_unary_operators_are_exact(dtype, name, f):
    x = values(dtype, (3, 4), 15)
    if name == "square" and dtype == "int64":
        x = x - (1 << 40) + (1 << 30)  # squares near 2**60: exact in int64, not in float32
    for got in both(name, x):
        assert_exact(got, f(x), dtype)


@pytest.mark.parametrize("name,f", [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh),
                                    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)))])
def test_float64_transcendental_operators_have_float64_precision(name, f):
    x = np.linspace(0.1, 3.0, 12) * (1 + FINE)
    for got in both(name, x):
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, f(x), rtol=1e-14)


def test_float64_gradients_stay_float64():
    a = values("float64", (3, 4), 16)
    b = values("float64", (1, 4), 17, nonzero=True)
    s = sym.broadcast_mul(sym.variable("a"), sym.variable("b"))
    args = {"a": nd.array(a, dtype="float64"), "b": nd.array(b, dtype="float64")}
    e = ex.bind(s, mx.cpu(), args)
    ex.forward(e, is_train=True)
    g = np.full((3, 4), 1 + FINE)
    ex.backward(e, nd.array(g, dtype="float64"))
    grads = ex.grad_dict(e)
    assert_exact(grads["a"].asnumpy(), g * b, "float64")
    assert_exact(grads["b"].asnumpy(), np.sum(g * a, axis=0, keepdims=True), "float64")
