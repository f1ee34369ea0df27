"""mx.nd: creation, numpy interop, operators, indexing, reductions, repr, random."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import nd

DTYPES = ["float32", "float64", "float16", "uint8", "int8", "int32", "int64"]


def sample(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.uniform(-3, 3, shape).astype(dtype)
    lo = 0 if dtype == "uint8" else -5
    return rng.integers(lo, 6, shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_round_trip_keeps_dtype_shape_values(dtype):
    a = sample((2, 3, 4), dtype)
    x = nd.array(a, dtype=dtype)
    assert x.dtype == np.dtype(dtype) and x.shape == (2, 3, 4) and x.size == 24 and x.ndim == 3
    np.testing.assert_array_equal(x.asnumpy(), a)
    assert nd.to_list(x) == a.tolist()


def test_array_defaults_and_options():
    assert nd.array([1, 2]).dtype == np.float32  # lists default to float32, as MXNet
    assert nd.array(np.arange(3)).dtype == np.float32  # numpy too, as MXNet
    assert nd.array(nd.array([1], dtype="int8")).dtype == np.int8  # an NDArray keeps its dtype
    assert nd.array([1, 2], {"dtype": "int8"}).dtype == np.int8
    assert nd.array([1, 2], dtype=np.float16).dtype == np.float16
    assert nd.array([[1, 2]], ctx=mx.cpu(1)).context == mx.cpu(1)
    assert nd.zeros((2, 3)).asnumpy().sum() == 0 and nd.ones(4, dtype="int32").asnumpy().tolist() == [1] * 4
    assert nd.full((2,), 2.5).asnumpy().tolist() == [2.5, 2.5]
    assert nd.empty((0, 3)).shape == (0, 3)
    np.testing.assert_array_equal(nd.arange(2, 8, 2).asnumpy(), [2, 4, 6])


def test_asarray_is_a_zero_copy_read_only_view():
    x = nd.array(np.arange(12, dtype=np.float32).reshape(3, 4))
    v1, v2 = np.asarray(x), np.asarray(x)
    assert np.shares_memory(v1, v2)  # both views point at the core's buffer
    assert not v1.flags.writeable
    c = x.asnumpy()
    assert c.flags.writeable and not np.shares_memory(c, v1)
    x[0] = 100  # copy-on-write: the earlier view keeps the old values
    assert v1[0, 0] == 0 and x.asnumpy()[0, 0] == 100


def test_inputs_are_never_mutated():
    a = np.ones((2, 2), np.float32)
    x = nd.array(a)
    x[0, 0] = 5
    assert a[0, 0] == 1


BINARY = [
    ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
    ("lt", lambda a, b: a < b), ("ge", lambda a, b: a >= b), ("eq", lambda a, b: a == b),
]
SHAPES = [((2, 3), (2, 3)), ((2, 1), (3,)), ((4, 1, 3), (1, 5, 1)), ((3,), ())]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("name,f", BINARY)
@pytest.mark.parametrize("sa,sb", SHAPES)
def test_binary_ops_broadcast_like_numpy(dtype, name, f, sa, sb):
    a, b = sample(sa, dtype, 1), sample(sb, dtype, 2)
    got = f(nd.array(a, dtype=dtype), nd.array(b, dtype=dtype)).asnumpy()
    want = np.asarray(f(a, b)).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_division_and_power_float(dtype):
    a, b = sample((3, 4), dtype, 3), sample((3, 4), dtype, 4) + np.asarray(4, dtype)
    x, y = nd.array(a, dtype=dtype), nd.array(b, dtype=dtype)
    np.testing.assert_allclose((x / y).asnumpy(), a / b, rtol=2e-3)
    np.testing.assert_allclose((nd.array(np.abs(a), dtype=dtype) ** 2).asnumpy(), np.abs(a) ** 2, rtol=2e-3)


def test_scalar_and_reverse_ops_and_numpy_operands():
    a = np.array([[1.0, 2.0], [4.0, 8.0]], np.float32)
    x = nd.array(a)
    for got, want in [(x + 1, a + 1), (1 - x, 1 - a), (2 * x, 2 * a), (8 / x, 8 / a),
                      (x ** 2, a ** 2), (2 ** x, 2 ** a), (-x, -a), (x % 3, a % 3),
                      (x + a, a + a), (a * x, a * a), (abs(-x), a)]:
        assert isinstance(got, nd.NDArray)
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-6)
    assert (nd.array([7], dtype="int32") / 2).asnumpy().tolist() == [3]  # int stays int
    assert (nd.array([7], dtype="int32") / 0).asnumpy().tolist() == [0]  # no crash


@pytest.mark.parametrize("key", [0, -1, (1, 2), slice(1, 3), slice(None, None, -1), slice(None, None, 2),
                                 (slice(None), 1), (slice(0, 2), slice(1, None)), (2, slice(None, None, -2)),
                                 slice(5, 1), (-2, -1)])
def test_indexing_matches_numpy(key):
    a = np.arange(3 * 4, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(nd.array(a)[key].asnumpy(), a[key])


@pytest.mark.parametrize("key", [1, (0, 1), slice(0, 2), (slice(None), slice(None, None, 2))])
def test_setitem_matches_numpy(key):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = nd.array(a)
    x[key] = 7
    want = a.copy()
    want[key] = 7
    np.testing.assert_array_equal(x.asnumpy(), want)


def test_index_errors_and_iteration():
    x = nd.arange(6).reshape(2, 3)
    with pytest.raises(IndexError):
        x[2]
    with pytest.raises(IndexError):
        x[0, 0, 0]
    assert [r.shape for r in x] == [(3,), (3,)] and len(x) == 2
    assert x.T.shape == (3, 2)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), ((0, 2), True), (-1, True)])
def test_reductions_match_numpy(name, axis, keepdims):
    a = sample((3, 4, 5), "float32", 5) / 3 + 1
    got = getattr(nd, name)(nd.array(a), axis=axis, keepdims=keepdims).asnumpy()
    want = getattr(np, name)(a, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(got, np.reshape(want, got.shape) if axis is None else want, rtol=1e-5)


def test_reduction_exclude_and_argmax_channel():
    a = sample((2, 3, 4), "float32", 6)
    np.testing.assert_allclose(nd.sum(a, axis=1, exclude=True).asnumpy(), a.sum(axis=(0, 2)), rtol=1e-5)
    np.testing.assert_array_equal(nd.argmax_channel(nd.array(a)).asnumpy(), a.argmax(-1).astype(np.float32))


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_dot_matches_numpy(ta, tb):
    a, b = sample((64, 33), "float32", 7), sample((33, 48), "float32", 8)
    a2, b2 = (a.T.copy() if ta else a), (b.T.copy() if tb else b)
    got = nd.dot(a2, b2, transpose_a=ta, transpose_b=tb).asnumpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    big = sample((300, 200), "float64", 9)
    np.testing.assert_allclose(nd.dot(nd.array(big, dtype="float64"), nd.array(big.T, dtype="float64")).asnumpy(),
                               big @ big.T, rtol=1e-10)
    c = sample((2, 3, 4), "float32", 10)
    np.testing.assert_allclose(nd.batch_dot(c, c, transpose_b=True).asnumpy(), c @ c.transpose(0, 2, 1), rtol=1e-5)


def test_reshape_concat_slice_transpose_stack():
    x = nd.arange(12)
    assert x.reshape(3, 4).shape == (3, 4) and x.reshape((2, -1)).shape == (2, 6)
    assert nd.reshape(x, (4, 3)).shape == (4, 3)
    a, b = np.ones((2, 2), np.float32), np.zeros((2, 1), np.float32)
    np.testing.assert_array_equal(nd.concat(a, b).asnumpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(nd.concat([a, a], dim=0).asnumpy(), np.concatenate([a, a], 0))
    np.testing.assert_array_equal(nd.stack(a, a, axis=1).asnumpy(), np.stack([a, a], 1))
    m = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(nd.slice(m, (0, 1), (2, 3)).asnumpy(), m[0:2, 1:3])
    np.testing.assert_array_equal(nd.slice(m, (None, None), (None, None), (1, -1)).asnumpy(), m[:, ::-1])
    np.testing.assert_array_equal(nd.slice_axis(m, 2, 1, None).asnumpy(), m[:, :, 1:])
    np.testing.assert_array_equal(nd.transpose(m, (2, 0, 1)).asnumpy(), m.transpose(2, 0, 1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_astype_like_numpy(dtype):
    a = np.array([-2.7, 0.5, 3.9], np.float32)
    np.testing.assert_array_equal(nd.array(a).astype(dtype).asnumpy(), a.astype(dtype))


def test_repr_is_numpy_text_with_context():
    x = nd.array([[1, 2], [3, 4]])
    assert repr(x) == "\n[[1. 2.]\n [3. 4.]]\n<NDArray 2x2 @cpu(0)>"
    assert repr(nd.ones(2, ctx=mx.cpu(3))).endswith("<NDArray 2 @cpu(3)>")


def test_scalar_accessors():
    assert nd.to_scalar(nd.array([3.5])) == 3.5 and float(nd.array([2])) == 2.0
    assert nd.shape([[1, 2]]) == (1, 2) and nd.size(np.zeros((2, 5))) == 10
    assert nd.dtype(nd.zeros(1, dtype="int8")) == np.int8
    assert nd.context(nd.zeros(1)) == mx.cpu(0) and nd.as_in_context(nd.zeros(1), mx.cpu(2)).context == mx.cpu(2)
    y = nd.copy(nd.ones(2))
    assert y.asnumpy().tolist() == [1, 1]


def test_random_seed_gives_the_same_numbers():
    mx.random.seed(123)
    a = nd.random_uniform(-1, 1, (1000,)).asnumpy()
    b = nd.random_normal(0, 2, (50, 50), dtype="float64").asnumpy()
    mx.random.seed(123)
    np.testing.assert_array_equal(a, mx.random.uniform(-1, 1, (1000,)).asnumpy())
    np.testing.assert_array_equal(b, mx.random.normal(0, 2, (50, 50), dtype="float64").asnumpy())
    assert a.min() >= -1 and a.max() < 1 and abs(b.std() - 2) < 0.15
    mx.random.seed(124)
    assert not np.array_equal(a, nd.random_uniform(-1, 1, (1000,)).asnumpy())
