"""The fused RNN operator on issue #13's LSTM language-model sizes (benchmarks/rnn_op_cases.py),
in mxfn, MXNet 1.9.1 and PyTorch, one process per system, then one table.

usage: python benchmarks/rnn_op_bench.py [--quick] [--buckets] [--mxfn-only]
Each figure is ms per call (best of the repeats); the ratios are peer ms / mxfn ms (above 1 =
mxfn faster). Peers run from .venv-peers/{mxnet,torch} of this tree or of the main worktree
(benchmarks/setup_peers.sh), each on 2 threads. --mxfn-only prints mxfn's JSON rows alone.
"""

import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rnn_op_cases as c  # noqa: E402
from run import run, table  # noqa: E402


def mxfn_rows(argv):
    import mxfn as mx
    from mxfn import executor as ex

    emit = c.emitter("mxfn-" + mx.__version__)
    rng = np.random.default_rng(0)
    params = rng.uniform(-0.1, 0.1, c.param_len()).astype(np.float32)
    net = mx.sym.RNN(mx.sym.variable("data"), state_size=c.HIDDEN, num_layers=c.LAYERS, mode="lstm",
                     name="rnn")
    for phase, seq, batch, warm, reps in c.cases(argv):
        train = phase != "infer"
        req = {"data": "write" if train else "null", "rnn_parameters": "write" if train else "null",
               "rnn_state": "null", "rnn_state_cell": "null"}
        e = ex.simple_bind(net, mx.cpu(), data=(seq, batch, c.INPUT), grad_req=req)
        x = rng.uniform(-1, 1, (seq, batch, c.INPUT)).astype(np.float32)
        ex.forward(e, is_train=train, data=x, rnn_parameters=params)
        dy = mx.nd.array(rng.uniform(-1, 1, (seq, batch, c.HIDDEN)).astype(np.float32))

        def step():
            ex.forward(e, is_train=train)
            if phase == "fwdbwd":
                ex.backward(e, [dy])
                ex.grad_dict(e)["rnn_parameters"].asnumpy()
            else:
                ex.outputs(e)[0].asnumpy()

        emit(c.workload(phase, seq, batch), c.best_ms(step, warm, reps), "ms")


def peer_python(name):
    """The peer venv's python: this tree's .venv-peers, else the main worktree's."""
    roots = [os.path.dirname(HERE)]
    try:
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=HERE, capture_output=True,
                                text=True, check=True).stdout.strip()
        roots.append(os.path.dirname(os.path.abspath(os.path.join(HERE, common))))
    except (OSError, subprocess.CalledProcessError):
        pass
    for r in roots:
        py = os.path.join(r, ".venv-peers", name, "bin", "python")
        if os.path.exists(py):
            return py
    return None


def main(argv):
    if "--mxfn-only" in argv:
        mxfn_rows(argv)
        return
    flags = [a for a in argv if a in ("--quick", "--buckets")]
    env = dict(os.environ, OMP_NUM_THREADS="2", MKL_NUM_THREADS="2")
    jobs = [[sys.executable, os.path.abspath(__file__), "--mxfn-only", *flags]]
    for name in ("mxnet", "torch"):
        py = peer_python(name)
        if py is None:
            print(f"# no .venv-peers/{name}: benchmarks/setup_peers.sh {name}", file=sys.stderr)
        else:
            jobs.append([py, os.path.join(HERE, "peers", f"{name}_rnn_op.py"), *flags])
    results, systems = {}, []
    for cmd in jobs:
        rows, _ = run(cmd, env)
        for row in rows:
            results.setdefault(row["workload"], {})[row["system"]] = row
            if row["system"] not in systems:
                systems.append(row["system"])
    which = [c.workload(p, t, n) for p, t, n, _, _ in c.cases(argv)]
    table(which, results, systems, width=26)


if __name__ == "__main__":
    main(sys.argv[1:])
