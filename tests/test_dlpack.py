"""DLPack (SPEC §9.3): NDArray.__dlpack__ / __dlpack_device__ and nd.from_dlpack."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import MXFNError


def test_numpy_reads_an_ndarray_without_a_copy_and_read_only():
    x = mx.nd.array([[1, 2, 3], [4, 5, 6]])
    v = np.from_dlpack(x)
    assert v.shape == (2, 3) and v.dtype == np.float32
    assert np.shares_memory(v, np.asarray(x))  # the same buffer
    assert not v.flags.writeable
    np.testing.assert_array_equal(v, [[1, 2, 3], [4, 5, 6]])


def test_an_exported_view_never_sees_a_later_write():
    x = mx.nd.array([1, 2, 3])
    v = np.from_dlpack(x)
    x[:] = 7
    x += 1
    np.testing.assert_array_equal(v, [1, 2, 3])
    np.testing.assert_array_equal(x.asnumpy(), [8, 8, 8])


def test_a_consumer_of_the_unversioned_protocol_gets_a_private_copy():
    x = mx.nd.array([1, 2, 3], dtype="int64")

    class Legacy:  # a producer wrapper that speaks only the pre-1.0 protocol
        def __dlpack__(self, stream=None):
            return x.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return x.__dlpack_device__()

    v = np.from_dlpack(Legacy())
    assert not np.shares_memory(v, np.asarray(x))
    np.testing.assert_array_equal(v, [1, 2, 3])


def test_device_and_bad_stream():
    x = mx.nd.ones((2,), ctx=mx.cpu(1))
    assert x.__dlpack_device__() == (1, 0)
    with pytest.raises(MXFNError, match=r"stream must be None.*got 3"):
        x.__dlpack__(stream=3)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64", "uint8", "int8"])
def test_from_dlpack_keeps_dtype_and_values(dtype):
    src = (np.arange(6) % 5).reshape(2, 3).astype(dtype)
    a = mx.nd.from_dlpack(src)
    assert a.dtype == np.dtype(dtype) and a.shape == (2, 3)
    np.testing.assert_array_equal(a.asnumpy(), src)
    src[0, 0] = 4  # a copy: the producer's later writes do not reach it
    assert a.asnumpy()[0, 0] == 0
    back = mx.nd.from_dlpack(a)
    np.testing.assert_array_equal(back.asnumpy(), a.asnumpy())


def test_from_dlpack_refuses_what_is_not_a_producer():
    with pytest.raises(TypeError, match=r"nd.from_dlpack: obj must support the DLPack protocol.*list"):
        mx.nd.from_dlpack([1, 2, 3])


def test_torch_round_trip():
    torch = pytest.importorskip("torch")
    x = mx.nd.array([1.5, 2.5])
    t = torch.from_dlpack(x)
    assert t.tolist() == [1.5, 2.5]
    np.testing.assert_array_equal(mx.nd.from_dlpack(torch.arange(3)).asnumpy(), [0, 1, 2])
