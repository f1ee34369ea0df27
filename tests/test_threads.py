"""Threads and Ctrl-C against the native layer: no deadlock between a Rust lock and the GIL,
and KeyboardInterrupt reaching a long native call. Each scenario runs in a child process so a
deadlock shows up as a timeout here instead of hanging the test run."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


# Two Python threads drive one module. Thread "train" runs forward/backward/update with a
# monitor installed and a Python lr scheduler: the core calls back into Python (taking the
# GIL) while the pass holds the module's and the optimizer's locks. Thread "poll" keeps
# calling cheap accessors that lock the module from a thread holding the GIL. Before the
# binding released the GIL while waiting for a lock, this deadlocked within a few steps.
TWO_THREADS = """
    import threading
    import numpy as np
    import mxfn as mx
    from mxfn import module as m, monitor as mon_ns, optimizer as opt, sym

    x = sym.variable("data")
    h = sym.activation(sym.fully_connected(x, num_hidden=64, name="fc1"), act_type="relu")
    net = sym.softmax_output(sym.fully_connected(h, num_hidden=4, name="fc2"), name="softmax")
    mod = m.module(net)
    mod = m.bind(mod, data_shapes=[("data", (256, 32))], label_shapes=[("softmax_label", (256,))])
    mod = m.init_params(mod, initializer=mx.init.xavier())
    scheduled = []
    def schedule(n):
        scheduled.append(n)
        return 0.05
    m.init_optimizer(mod, {"optimizer": opt.sgd(lr_scheduler=schedule)})
    monitor = mon_ns.monitor(1, pattern=".*output")
    m.install_monitor(mod, monitor)
    rng = np.random.default_rng(0)
    batch = mx.io.data_batch(data=[rng.normal(size=(256, 32)).astype(np.float32)],
                             label=[rng.integers(0, 4, 256).astype(np.float32)])
    errors = []
    stop = threading.Event()

    def train():
        try:
            for _ in range(60):
                mon_ns.tic(monitor)
                m.update(m.forward_backward(mod, batch))
                mon_ns.toc(monitor)
        except BaseException as e:
            errors.append(e)
        finally:
            stop.set()

    def poll():
        try:
            while not stop.is_set():
                m.data_names(mod); m.binded(mod); m.optimizer(mod); repr(mod)
                m.outputs_merged(mod) if m.params_initialized(mod) else None
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=train), threading.Thread(target=poll)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(scheduled) >= 60, len(scheduled)
    print("finished")
"""


def test_two_threads_with_a_monitor_and_a_python_scheduler_do_not_deadlock():
    proc = subprocess.run(_child(TWO_THREADS), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "finished" in proc.stdout


# predict over a core iterator runs its whole loop natively; Ctrl-C must still stop it.
LONG_PREDICT = """
    import numpy as np
    import mxfn as mx
    from mxfn import module as m, sym

    net = sym.variable("data")
    for i in range(8):  # ~7 GFLOP per batch: one predict call takes many seconds
        net = sym.activation(sym.fully_connected(net, num_hidden=2048, name=f"fc{i}"), act_type="relu")
    mod = m.init_params(m.bind(m.module(net, label_names=[]), data_shapes=[("data", (100, 512))]))
    it = mx.io.ndarray_iter(np.ones((100 * 400, 512), np.float32), batch_size=100)
    print("predicting", flush=True)
    try:
        m.predict(mod, eval_data=it)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        raise
"""


def test_ctrl_c_interrupts_a_native_predict_loop():
    proc = subprocess.Popen(_child(LONG_PREDICT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "predicting"
        time.sleep(1.5)  # inside the one native predict call
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        waited = time.monotonic() - sent
    finally:
        proc.kill()
    assert "interrupted" in out, err[-3000:]
    assert "KeyboardInterrupt" in err
    assert proc.returncode != 0
    # Between batches, not after the call: the whole call takes well over ten seconds.
    assert waited < 3.0, f"KeyboardInterrupt took {waited:.1f} s"
