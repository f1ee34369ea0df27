"""PyTorch (CPU, 2 threads) on the fused-RNN workloads (benchmarks/rnn_op_cases.py):
`torch.nn.LSTM`, measured as benchmarks/rnn_op_bench.py measures mxfn. Run in the torch peer
venv. usage: torch_rnn_op.py [--quick] [--buckets]"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import rnn_op_cases as c  # noqa: E402

emit = c.emitter("torch-" + torch.__version__.split("+")[0])


def main(argv):
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    lstm = torch.nn.LSTM(c.INPUT, c.HIDDEN, c.LAYERS)
    for phase, seq, batch, warm, reps in c.cases(argv):
        x = torch.tensor(rng.uniform(-1, 1, (seq, batch, c.INPUT)).astype(np.float32),
                         requires_grad=phase != "infer")
        h0 = torch.zeros(c.LAYERS, batch, c.HIDDEN)
        c0 = torch.zeros(c.LAYERS, batch, c.HIDDEN)
        dy = torch.tensor(rng.uniform(-1, 1, (seq, batch, c.HIDDEN)).astype(np.float32))

        def step():
            if phase == "infer":
                with torch.inference_mode():
                    lstm(x, (h0, c0))
                return
            y, _ = lstm(x, (h0, c0))
            if phase == "fwdbwd":
                lstm.zero_grad(set_to_none=True)
                y.backward(dy)

        emit(c.workload(phase, seq, batch), c.best_ms(step, warm, reps), "ms")


if __name__ == "__main__":
    main(sys.argv[1:])
