"""The fused-RNN operator workloads (issue #13's language model), shared by rnn_op_bench.py
(mxfn) and the peers' scripts (peers/mxnet_rnn_op.py, peers/torch_rnn_op.py): a 2-layer
unidirectional LSTM, 200 hidden units over 200 input features (the embedding), float32.

Phases, each milliseconds per call (best of the repeats after a warm-up):
  fwd     training forward (keeps what backward needs), batch 32
  fwdbwd  training forward + backward (gradients of the data and the parameters), batch 32
  infer   inference forward of one sequence (batch 1)
The main case is T=35; --buckets adds fwdbwd at the bucket lengths T=10..60.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_models import best_ms, emitter  # noqa: E402,F401

LAYERS, HIDDEN, INPUT = 2, 200, 200
TRAIN_BATCH, SEQ = 32, 35
BUCKETS = (10, 20, 30, 40, 50, 60)


def param_len():
    """MXNet's flat LSTM parameter vector: per layer W_i2h, W_h2h, then the biases."""
    g = 4 * HIDDEN
    weights = g * (INPUT + HIDDEN) + (LAYERS - 1) * g * (HIDDEN + HIDDEN)
    return weights + LAYERS * 2 * g


def workload(phase, seq, batch):
    return f"lstm{LAYERS}x{HIDDEN}-T{seq}-N{batch}-{phase}"


def cases(argv):
    """[--quick] [--buckets] → [(phase, seq, batch, warm-up calls, timed calls)]."""
    quick = "--quick" in argv
    warm, reps = (1, 3) if quick else (3, 15)
    out = [("fwd", SEQ, TRAIN_BATCH, warm, reps), ("fwdbwd", SEQ, TRAIN_BATCH, warm, reps),
           ("infer", SEQ, 1, warm, 5 * reps)]
    if "--buckets" in argv:
        out += [("fwdbwd", t, TRAIN_BATCH, warm, reps) for t in BUCKETS if t != SEQ]
    return out
