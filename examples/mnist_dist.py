"""Data-parallel MNIST over MPI (SPEC §9.2): the MLP 784-128-64-10 of mnist_mlp.py trained by
N workers with kvstore "dist_sync". Each worker reads its part of the training and test data
(mnist_iter's num_parts / part_index default to the mpiexec workers), takes rank 0's initial
parameters, and sums its gradients with the others' every batch, so all workers hold the same
parameters; the global batch stays 100 (100 / N per worker), so the updates are those of one
process with batch 100.

    pip install "mxfn[mpi]"                              # mpi4py and the mpich wheel (mpiexec)
    mpiexec -n 2 python examples/mnist_dist.py           # 2 workers on this machine
    python examples/mnist_dist.py                        # 1 worker, no MPI needed
    mpiexec -f hosts -n 4 python examples/mnist_dist.py  # 4 workers on the machines in `hosts`

Rank 0 logs the progress and writes the checkpoint; every worker prints the validation
accuracy it computed (pooled over the workers: the same number on each).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from typing import Any

import mxfn as mx
from mxfn import module as m

HERE = os.path.dirname(os.path.abspath(__file__))
MNIST = os.path.join(HERE, "..", "data", "mnist")
GLOBAL_BATCH = 100


def mlp() -> Any:
    data = mx.sym.variable("data")
    fc1 = mx.sym.fully_connected(data, num_hidden=128, name="fc1")
    act1 = mx.sym.activation(fc1, act_type="relu", name="relu1")
    fc2 = mx.sym.fully_connected(act1, num_hidden=64, name="fc2")
    act2 = mx.sym.activation(fc2, act_type="relu", name="relu2")
    fc3 = mx.sym.fully_connected(act2, num_hidden=10, name="fc3")
    return mx.sym.softmax_output(fc3, name="softmax")


def train(num_epoch: int = 3, kvstore: str = "dist_sync", checkpoint: str | None = None,
          seed: int = 1) -> tuple[Any, float, float]:
    """Trains on every worker; returns ``(module, validation accuracy, seconds)``."""
    kv = mx.kvstore.create(kvstore)  # here for rank / num_workers; fit gets the name
    workers = mx.kvstore.num_workers(kv)
    if GLOBAL_BATCH % workers:
        raise SystemExit(f"mnist_dist: {workers} workers do not divide the global batch of {GLOBAL_BATCH}")
    batch = GLOBAL_BATCH // workers
    mx.random.seed(seed)

    def files(kind: str) -> dict[str, str]:
        return dict(image=os.path.join(MNIST, f"{kind}-images-idx3-ubyte.gz"),
                    label=os.path.join(MNIST, f"{kind}-labels-idx1-ubyte.gz"))
    # num_parts=workers, part_index=rank by default under mpiexec.
    train_it = mx.io.mnist_iter(**files("train"), batch_size=batch, flat=True, shuffle=True, seed=0,
                                silent=mx.kvstore.rank(kv) != 0)
    test_it = mx.io.mnist_iter(**files("t10k"), batch_size=batch, flat=True, shuffle=False, silent=True)
    callbacks = [mx.callback.do_checkpoint(checkpoint)] if checkpoint else []
    t = time.perf_counter()
    mod = m.fit(m.module(mlp()), train_it, {
        "eval_data": test_it,
        "num_epoch": num_epoch,
        "kvstore": kvstore,
        "optimizer": "sgd",
        "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9},
        "initializer": mx.init.xavier(),
        "batch_end_callback": mx.callback.speedometer(batch, 200),
        "epoch_end_callback": callbacks,  # run by rank 0 alone (rank0_reports)
    })
    seconds = time.perf_counter() - t
    acc = dict(m.score(mod, eval_data=test_it, eval_metric="acc"))["accuracy"]
    return mod, acc, seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--checkpoint", default=os.path.join(tempfile.gettempdir(), "mnist_dist"),
                   help="checkpoint prefix (rank 0 writes it)")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    kv = mx.kvstore.create("dist_sync")
    mod, acc, seconds = train(a.epochs, "dist_sync", a.checkpoint)
    print(f"worker {mx.kvstore.rank(kv)} of {mx.kvstore.num_workers(kv)}: {a.epochs} epochs in "
          f"{seconds:.1f} s, validation accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
