"""mx.monitor over mx.executor directly (no module needed)."""

import logging

import numpy as np
import pytest

import mxfn as mx
from mxfn import monitor as mon_ns


def _exe():
    x = mx.sym.variable("data")
    fc = mx.sym.fully_connected(x, num_hidden=3, name="fc1")
    act = mx.sym.activation(fc, act_type="relu", name="relu1")
    net = mx.sym.softmax_output(act, name="softmax")
    exe = mx.executor.simple_bind(net, mx.cpu(), data=(2, 4))
    return exe


def _step(exe, mon, x):
    mon_ns.tic(mon)
    mx.executor.forward(exe, is_train=True, data=x, softmax_label=np.array([0.0, 1.0]),
                        fc1_weight=np.full((3, 4), 0.5), fc1_bias=np.zeros(3))
    mx.executor.backward(exe)
    return mon_ns.toc(mon)


def test_toc_covers_outputs_args_and_grads():
    exe = _exe()
    mon = mon_ns.install(mon_ns.monitor(1), exe)
    res = _step(exe, mon, np.ones((2, 4)))
    names = [n for _, n, _ in res]
    for expected in ["fc1_output", "relu1_output", "softmax_output", "data", "fc1_weight", "fc1_bias",
                     "fc1_weight_grad", "fc1_bias_grad", "softmax_label"]:
        assert expected in names
    assert all(step == 1 for step, _, _ in res)
    values = {n: v for _, n, v in res}
    # default stat: norm(x) / sqrt(size(x)); fc1_output is 2.0 everywhere, the weight 0.5
    assert float(values["fc1_output"]) == pytest.approx(2.0)
    assert float(values["fc1_weight"]) == pytest.approx(0.5)
    assert values["fc1_weight"].endswith("\t")


def test_interval_pattern_and_sort():
    exe = _exe()
    mon = mon_ns.install(mon_ns.monitor(2, pattern=".*weight.*", sort=True), exe)
    first = _step(exe, mon, np.ones((2, 4)))
    second = _step(exe, mon, np.ones((2, 4)))
    third = _step(exe, mon, np.ones((2, 4)))
    assert [n for _, n, _ in first] == ["fc1_weight", "fc1_weight_grad"]
    assert second == []
    assert [s for s, _, _ in third] == [3, 3]


def test_custom_stat_func_and_array_values():
    exe = _exe()
    mon = mon_ns.install(mon_ns.monitor(1, lambda x: mx.nd.array(np.asarray(x).max(axis=-1)),
                                        pattern="fc1_output"), exe)
    res = _step(exe, mon, np.ones((2, 4)))
    assert len(res) == 1
    step, name, value = res[0]
    assert name == "fc1_output" and value.strip() == str(np.array([2.0, 2.0], dtype=np.float32))


def test_toc_print_logs(caplog):
    exe = _exe()
    mon = mon_ns.install(mon_ns.monitor(1, pattern="relu1_output"), exe)
    mon_ns.tic(mon)
    mx.executor.forward(exe, is_train=False, data=np.ones((2, 4)))
    with caplog.at_level(logging.INFO, logger="mxfn"):
        assert mon_ns.toc_print(mon) is mon
    assert "Batch:       1 relu1_output" in caplog.text


def test_not_active_collects_nothing():
    exe = _exe()
    mon = mon_ns.install(mon_ns.monitor(1), exe)
    mx.executor.forward(exe, is_train=False, data=np.ones((2, 4)))
    assert mon_ns.toc(mon) == [] and mon.queue == []


def test_methods_for_mxnet_habits():
    exe = _exe()
    mon = mon_ns.monitor(1)
    mon.install(exe)
    mon.tic()
    mx.executor.forward(exe, is_train=False, data=np.ones((2, 4)))
    assert any(n == "fc1_output" for _, n, _ in mon.toc())


def test_bad_input():
    with pytest.raises(mx.MXFNError):
        mon_ns.monitor(0)
    with pytest.raises(TypeError):
        mon_ns.monitor(1.5)
    with pytest.raises(mx.MXFNError):
        mon_ns.monitor(1, pattern="(")
    with pytest.raises(mx.MXFNError):
        mon_ns.monitor(1, patern=".*")
    with pytest.raises(TypeError):
        mon_ns.tic("not a monitor")
