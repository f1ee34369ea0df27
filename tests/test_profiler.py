"""mx.profiler: per-operator and per-layer times from the executors (mxfn.profiler)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import mxfn as mx
import mxfn.profiler as profiler
from mxfn import module as m


def _net():
    x = mx.sym.variable("data")
    x = mx.sym.convolution(x, kernel=(3, 3), num_filter=4, name="conv1")
    x = mx.sym.activation(x, act_type="tanh", name="tanh1")
    x = mx.sym.fully_connected(mx.sym.flatten(x, name="flat"), num_hidden=3, name="fc1")
    return mx.sym.softmax_output(x, name="softmax")


def _module():
    mod = m.module(_net())
    m.bind(mod, data_shapes=[("data", (2, 1, 6, 6))], label_shapes=[("softmax_label", (2,))])
    m.init_params(mod, initializer=mx.init.xavier())
    batch = mx.io.data_batch(data=[mx.nd.array(np.random.rand(2, 1, 6, 6))], label=[mx.nd.array([0, 1])])
    return mod, batch


@pytest.fixture(autouse=True)
def _stopped():
    profiler.set_state("stop")
    profiler.reset()
    yield
    profiler.set_state("stop")
    profiler.reset()


def test_counts_equal_forward_calls_per_operator_and_layer():
    mod, batch = _module()
    profiler.set_state("run")
    assert profiler.state() == "run"
    for _ in range(3):
        m.forward(mod, batch, is_train=False)
    m.forward_backward(mod, batch)
    profiler.set_state("stop")
    ops = {(op, p): calls for op, p, calls, _ in profiler.rows()["operators"]}
    for op in ("Convolution", "Activation", "Flatten", "FullyConnected", "SoftmaxOutput"):
        assert ops[(op, "forward")] == 4, (op, ops)
    assert ops[("Convolution", "backward")] == 1
    layers = {(n, p): (op, calls) for n, op, p, calls, _ in profiler.rows()["layers"]}
    assert layers[("conv1", "forward")] == ("Convolution", 4)
    assert layers[("fc1", "backward")] == ("FullyConnected", 1)
    table = profiler.dumps()
    for word in ("Convolution", "FullyConnected", "conv1", "fc1", "Calls", "Total ms", "%"):
        assert word in table
    # Stopped: further calls are not recorded.
    m.forward(mod, batch, is_train=False)
    assert {(op, p): c for op, p, c, _ in profiler.rows()["operators"]} == ops


def test_empty_when_off():
    mod, batch = _module()
    m.forward(mod, batch, is_train=False)
    assert profiler.state() == "stop"
    assert profiler.rows() == {"operators": [], "layers": []}
    assert "Convolution" not in profiler.dumps()


def test_reset_and_dumps_reset():
    mod, batch = _module()
    profiler.set_state("run")
    m.forward(mod, batch, is_train=False)
    assert "conv1" in profiler.dumps(reset=True)
    assert profiler.rows()["operators"] == []
    m.forward(mod, batch, is_train=False)
    assert ("conv1", "Convolution", "forward") in [r[:3] for r in profiler.rows()["layers"]]
    profiler.reset()
    assert profiler.rows()["layers"] == []
    assert profiler.state() == "run"
    assert '"operators": []' in profiler.dumps(format="json")


def test_bad_arguments_raise_mxfn_error():
    with pytest.raises(mx.MXFNError, match="state must be"):
        profiler.set_state("go")
    with pytest.raises(mx.MXFNError, match="unknown option"):
        profiler.set_config(profile_everything=True)
    profiler.set_config(profile_all=True, aggregate_stats=True, filename="profile.json")
    with pytest.raises(mx.MXFNError, match="format"):
        profiler.dumps(format="csv")


def test_environment_switch_prints_the_table_at_exit():
    code = ("import numpy as np, mxfn as mx, mxfn.profiler\n"
            "from mxfn import module as m\n"
            "x = mx.sym.fully_connected(mx.sym.variable('data'), num_hidden=2, name='fc_env')\n"
            "mod = m.init_params(m.bind(m.module(x, label_names=[]), data_shapes=[('data', (1, 3))],"
            " for_training=False))\n"
            "m.forward(mod, mx.io.data_batch(data=[mx.nd.ones((1, 3))]))\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, MXFN_PROFILE="1"),
                         capture_output=True, text=True, check=True)
    assert "fc_env" in out.stderr and "FullyConnected" in out.stderr
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, MXFN_PROFILE="0"),
                         capture_output=True, text=True, check=True)
    assert "fc_env" not in out.stderr
