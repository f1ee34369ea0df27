"""Data-parallel scaling on one machine (issue #14): mlp-b100 and lenet-b100 (the workloads of
mxfn_bench.py, global batch 100) trained by 2 MPI workers of 1 thread each (kvstore
"dist_sync", 50 samples per worker per step) against 1 process of 2 threads, and the time the
gradient allreduce takes per step.

usage: python benchmarks/dist_bench.py [mlp-b100] [lenet-b100]   (the driver: runs both ways)
       mpiexec -n 2 python benchmarks/dist_bench.py --worker WORKLOAD ...   (one measurement)
Needs mpiexec and mpi4py (pip install "mxfn[mpi]").
"""

import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ALL = ["mlp-b100", "lenet-b100"]
GLOBAL_BATCH = 100
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "PMI_FD", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")


def worker(which):
    """Trains each workload as the peers' loop does (2 epochs, best epoch time) with this
    process's workers; rank 0 prints one JSON line per workload."""
    sys.path.insert(0, HERE)
    import mxfn_bench as b
    import mxfn as mx
    from mxfn import _native, module as m

    kv = mx.kvstore.create("dist_sync")
    rank, n = mx.kvstore.rank(kv), mx.kvstore.num_workers(kv)
    xtr, ytr, _, _ = b.load()
    data = {"mlp-b100": (b.mlp, xtr, ytr, 0.1), "lenet-b100": (b.lenet, xtr[:10000].reshape(-1, 1, 28, 28),
                                                                ytr[:10000], 0.1)}
    for w in which:
        sym, x, y, lr = data[w]
        mx.random.seed(42)
        it = mx.io.ndarray_iter(x, label=y, batch_size=GLOBAL_BATCH // n, shuffle=True, seed=42)  # its part
        mod = m.module(sym())
        m.bind(mod, data_shapes=mx.io.provide_data(it), label_shapes=mx.io.provide_label(it))
        m.init_params(mod, initializer=mx.init.xavier())
        m.init_optimizer(mod, kvstore="dist_sync", optimizer="sgd",
                         optimizer_params={"learning_rate": lr, "momentum": 0.9})
        metric = mx.metric.accuracy()
        best, comm = None, None
        for _ in range(2):
            mx.io.reset(it)
            mx.metric.reset(metric)
            mx.kvstore.barrier(kv)
            before = _native.mod_comm_stats(mod._h)
            t = time.perf_counter()
            steps = 0
            for batch in it:
                m.forward_backward(mod, batch)
                m.update(mod)
                m.update_metric(mod, metric, mx.io.batch_label(batch))
                steps += 1
            mx.kvstore.barrier(kv)
            secs = time.perf_counter() - t
            after = _native.mod_comm_stats(mod._h)
            if best is None or secs < best:
                best = secs
                comm = ((after[1] - before[1]) / max(steps, 1), (after[2] - before[2]) / max(steps, 1), steps)
        if rank == 0:
            print(json.dumps({"workload": w, "workers": n, "samples_per_s": len(x) / best,
                              "allreduce_ms_per_step": comm[0] * 1e3, "calls_per_step": comm[1],
                              "step_ms": best / comm[2] * 1e3}), flush=True)


def _rows(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return {j["workload"]: j for j in (json.loads(l) for l in r.stdout.splitlines() if l.startswith("{"))}


def main(which):
    mpiexec = shutil.which("mpiexec")
    if mpiexec is None:
        sys.exit("dist_bench: needs mpiexec (pip install \"mxfn[mpi]\")")
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    base["MXFN_MNIST_DIR"] = os.path.join(HERE, "..", "data", "mnist")
    me = os.path.abspath(__file__)
    one = _rows([sys.executable, me, "--worker", *which], dict(base, RAYON_NUM_THREADS="2"))
    two = _rows([mpiexec, "-n", "2", sys.executable, me, "--worker", *which], dict(base, RAYON_NUM_THREADS="1"))
    print(f"{'workload':<12}{'1 proc x 2 thr':>16}{'2 ranks x 1 thr':>17}{'2r/1p':>8}"
          f"{'allreduce ms/step':>19}{'of step':>9}")
    for w in which:
        a, d = one[w], two[w]
        print(f"{w:<12}{a['samples_per_s']:>12,.0f} s/s{d['samples_per_s']:>13,.0f} s/s"
              f"{d['samples_per_s'] / a['samples_per_s']:>8.2f}{d['allreduce_ms_per_step']:>19.3f}"
              f"{d['allreduce_ms_per_step'] / d['step_ms']:>9.0%}")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--worker":
        worker(args[1:] or ALL)
    else:
        main(args or ALL)
