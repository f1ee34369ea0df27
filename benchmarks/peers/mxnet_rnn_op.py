"""MXNet 1.9.1 (MKLDNN on) on the fused-RNN workloads (benchmarks/rnn_op_cases.py): `mx.nd.RNN`
under autograd, measured as benchmarks/rnn_op_bench.py measures mxfn. Run in the MXNet peer venv.
usage: mxnet_rnn_op.py [--quick] [--buckets]"""

import os
import sys

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import rnn_op_cases as c  # noqa: E402

emit = c.emitter("mxnet-" + mx.__version__)


def main(argv):
    rng = np.random.default_rng(0)
    params = mx.nd.array(rng.uniform(-0.1, 0.1, c.param_len()).astype(np.float32))
    params.attach_grad()
    for phase, seq, batch, warm, reps in c.cases(argv):
        x = mx.nd.array(rng.uniform(-1, 1, (seq, batch, c.INPUT)).astype(np.float32))
        x.attach_grad()
        h0 = mx.nd.zeros((c.LAYERS, batch, c.HIDDEN))
        c0 = mx.nd.zeros((c.LAYERS, batch, c.HIDDEN))
        dy = mx.nd.array(rng.uniform(-1, 1, (seq, batch, c.HIDDEN)).astype(np.float32))

        def run():
            return mx.nd.RNN(x, params, h0, c0, state_size=c.HIDDEN, num_layers=c.LAYERS, mode="lstm")

        def step():
            if phase == "infer":
                run().wait_to_read()
                return
            with mx.autograd.record():
                y = run()
            if phase == "fwdbwd":
                y.backward(dy)
                params.grad.wait_to_read()
            else:
                y.wait_to_read()

        emit(c.workload(phase, seq, batch), c.best_ms(step, warm, reps), "ms")


if __name__ == "__main__":
    main(sys.argv[1:])
