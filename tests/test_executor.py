"""mx.executor: bind / simple_bind, grad_req write / add / null, forward with new values,
backward, monitor, reshape."""

import numpy as np
import pytest

import mxfn as mx
from mxfn import executor as ex
from mxfn import sym


def net():
    x = sym.variable("x")
    return sym.fully_connected(x, num_hidden=2, name="fc")


def test_simple_bind_forward_backward_matches_numpy():
    e = ex.simple_bind(net(), mx.cpu(), x=(3, 4))
    w = np.arange(8, dtype=np.float32).reshape(2, 4) / 10
    x = np.ones((3, 4), np.float32)
    ex.forward(e, is_train=True, x=x, fc_weight=w, fc_bias=np.array([1, 2], np.float32))
    np.testing.assert_allclose(ex.outputs(e)[0].asnumpy(), x @ w.T + [1, 2], rtol=1e-6)
    g = np.ones((3, 2), np.float32)
    ex.backward(e, g)
    grads = ex.grad_dict(e)
    np.testing.assert_allclose(grads["fc_weight"].asnumpy(), g.T @ x)
    np.testing.assert_allclose(grads["x"].asnumpy(), g @ w, rtol=1e-6)
    np.testing.assert_allclose(grads["fc_bias"].asnumpy(), [3, 3])


def test_grad_req_add_accumulates_and_null_skips():
    e = ex.simple_bind(net(), mx.cpu(), x=(1, 4), grad_req={"fc_weight": "add", "x": "null", "fc_bias": "write"})
    ex.forward(e, is_train=True, x=np.ones((1, 4)))
    for _ in range(3):
        ex.backward(e, [np.ones((1, 2))])
    gd = ex.grad_dict(e)
    assert "x" not in gd
    np.testing.assert_allclose(gd["fc_weight"].asnumpy(), 3 * np.ones((2, 4)))
    np.testing.assert_allclose(gd["fc_bias"].asnumpy(), [1, 1])


def test_bind_with_dict_and_list_and_args_grad():
    s = net()
    args = {"x": np.ones((2, 4)), "fc_weight": np.ones((2, 4)), "fc_bias": np.zeros(2)}
    e1 = ex.bind(s, mx.cpu(), args)
    e2 = ex.bind(s, mx.cpu(), [args[n] for n in s.list_arguments()], grad_req="null")
    for e in (e1, e2):
        ex.forward(e)
        np.testing.assert_allclose(ex.outputs(e)[0].asnumpy(), 4 * np.ones((2, 2)))
    assert ex.grad_dict(e2) == {}
    with pytest.raises(mx.MXFNError, match="fc_bias"):
        ex.bind(s, mx.cpu(), {"x": np.ones((2, 4)), "fc_weight": np.ones((2, 4))})
    with pytest.raises(mx.MXFNError, match="fc_weight"):
        ex.bind(s, mx.cpu(), {**args, "fc_weight": np.ones((3, 4))})


def test_monitor_sees_every_op_output():
    seen = []
    s = sym.relu(net(), name="r")
    e = ex.simple_bind(s, mx.cpu(), x=(1, 4))
    ex.set_monitor_callback(e, lambda name, arr: seen.append((name, arr.shape)))
    ex.forward(e)
    assert seen == [("fc_output", (1, 2)), ("r_output", (1, 2))]


def test_reshape_shares_parameters():
    e = ex.simple_bind(net(), mx.cpu(), x=(2, 4))
    ex.forward(e, fc_weight=np.ones((2, 4)))
    e2 = ex.reshape(e, x=(5, 4))
    ex.forward(e2, x=np.ones((5, 4)))
    assert ex.outputs(e2)[0].shape == (5, 2)
    np.testing.assert_allclose(ex.outputs(e2)[0].asnumpy(), 4 * np.ones((5, 2)))


def test_backward_before_forward_and_gpu_are_errors():
    e = ex.simple_bind(net(), mx.cpu(), x=(2, 4))
    with pytest.raises(mx.MXFNError, match="forward"):
        ex.backward(e, np.ones((2, 2)))
    with pytest.raises(mx.MXFNError, match="GPU"):
        ex.simple_bind(net(), mx.gpu(0), x=(2, 4))
