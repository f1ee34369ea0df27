"""Inputs a hostile user tries (issue #16): shapes that cannot exist and arrays numpy cannot
describe raise MXFNError instead of crashing, and a module or executor with a monitor is freed like any other value."""

import gc
import weakref

import numpy as np
import pytest

import mxfn as mx
from mxfn import MXFNError
from mxfn import module as m
from mxfn import monitor as mon_ns


@pytest.mark.parametrize("shape", [(0, 2**61), (0, 2**62, 4), (2**61, 0), (2**62, 784)])
def test_a_shape_whose_bytes_overflow_is_refused_before_allocating(shape):
    with pytest.raises(MXFNError, match=r"nd.full: shape"):
        mx.nd.zeros(shape)


def test_a_big_empty_array_that_fits_converts():
    a = mx.nd.zeros((0, 2**40))
    assert a.asnumpy().shape == (0, 2**40)


def test_more_axes_than_numpy_takes_raise_mxfnerror():
    a = mx.nd.reshape(mx.nd.ones((1,)), (1,) * 40)
    assert a.shape == (1,) * 40
    with pytest.raises(MXFNError, match="40 dimensions; numpy takes at most 32"):
        a.asnumpy()
    assert repr(a).startswith("<NDArray 1x1x")


def _net():
    x = mx.sym.variable("data")
    return mx.sym.softmax_output(mx.sym.fully_connected(x, num_hidden=3, name="fc"), name="softmax")


def test_a_module_with_a_monitor_is_collected():
    mod = m.init_params(m.bind(m.module(_net()), data_shapes=[("data", (4, 5))],
                               label_shapes=[("softmax_label", (4,))]))
    mon = mon_ns.monitor(1)
    m.install_monitor(mod, mon)
    mon_ns.tic(mon)
    m.forward(mod, {"data": [np.ones((4, 5))]}, is_train=False)
    assert any(n == "fc_output" for _, n, _ in mon_ns.toc(mon))  # the monitor still works
    dead = weakref.ref(mod)
    del mod, mon
    gc.collect()
    assert dead() is None


def test_an_executor_with_a_monitor_is_collected():
    exe = mx.executor.simple_bind(_net(), mx.cpu(), data=(2, 5))
    mon = mon_ns.install(mon_ns.monitor(1), exe)
    mon_ns.tic(mon)
    mx.executor.forward(exe, is_train=False, data=np.ones((2, 5)))
    assert any(n == "fc_output" for _, n, _ in mon_ns.toc(mon))
    dead = weakref.ref(mon)
    del exe, mon
    gc.collect()
    assert dead() is None


@pytest.mark.parametrize("call", [
    lambda mod, p: m.save_checkpoint(mod, prefix=p, epoch=-1),
    lambda mod, p: m.load_checkpoint(p, -1),
])
def test_a_negative_epoch_is_refused_by_name(call, tmp_path):
    mod = m.init_params(m.bind(m.module(_net()), data_shapes=[("data", (4, 5))],
                               label_shapes=[("softmax_label", (4,))]))
    with pytest.raises(MXFNError, match=r'"epoch" must be >= 0, got -1'):
        call(mod, str(tmp_path / "ck"))
