"""Data-parallel fit against one process. Usage: train_compare.py OUT MODE, MODE "dist" (run
under mpiexec: kvstore dist_sync, every worker reads its part of the data by default) or
"single" (one process, the same global batch, the data reordered so each global batch holds
the samples of the workers' batches together, starting from the initial values the dist run
saved). Writes <out>/<mode>_<rank>.npz (parameters) and .json (history, score, logged
lines, epoch-end callbacks, rescale_grad)."""
import io as _io
import json
import logging
import sys

import numpy as np

import mxfn as mx
from mxfn import module as m

out, mode = sys.argv[1], sys.argv[2]
WORKERS, LOCAL, STEPS, EPOCHS = 2, 16, 8, 2
N = WORKERS * LOCAL * STEPS
rng = np.random.RandomState(7)
x = rng.normal(size=(N, 10)).astype("float32")
y = (x[:, :3].argmax(axis=1)).astype("float32")

log = _io.StringIO()
logging.getLogger("mxfn").addHandler(logging.StreamHandler(log))
logging.getLogger("mxfn").setLevel(logging.INFO)

data = mx.sym.variable("data")
net = mx.sym.softmax_output(
    mx.sym.fully_connected(mx.sym.relu(mx.sym.fully_connected(data, num_hidden=16, name="fc1")),
                           num_hidden=3, name="fc2"), name="softmax")
opt = {"optimizer": "sgd", "optimizer_params": {"learning_rate": 0.2, "momentum": 0.9}}
mod = m.module(net)
calls = []

if mode == "dist":
    train = mx.io.ndarray_iter(x, label=y, batch_size=LOCAL)  # num_parts / part_index by default
    evald = mx.io.ndarray_iter(x, label=y, batch_size=LOCAL)
    kv = mx.kvstore.create("dist_sync")
    rank = mx.kvstore.rank(kv)
    mx.random.seed(100 + rank)  # different initial values per worker: rank 0's must win
    m.bind(mod, data_shapes=mx.io.provide_data(train), label_shapes=mx.io.provide_label(train))
    m.init_params(mod, initializer=mx.initializer.xavier())
    m.init_optimizer(mod, kvstore=kv, **opt)
    start, _ = m.get_params(mod)
    np.savez(f"{out}/dist_start_{rank}.npz", **{k: v.asnumpy() for k, v in start.items()})
    m.fit(mod, train, num_epoch=EPOCHS, epoch_end_callback=lambda e, *a: calls.append(e))
else:
    parts = np.split(np.arange(N), WORKERS)
    order = np.concatenate([np.concatenate([p[k * LOCAL:(k + 1) * LOCAL] for p in parts])
                            for k in range(STEPS)])
    train = mx.io.ndarray_iter(x[order], label=y[order], batch_size=WORKERS * LOCAL)
    evald = mx.io.ndarray_iter(x, label=y, batch_size=WORKERS * LOCAL)
    rank = 0
    start = {k: mx.nd.array(v) for k, v in np.load(f"{out}/dist_start_0.npz").items()}
    m.fit(mod, train, num_epoch=EPOCHS, arg_params=start, **opt,
          epoch_end_callback=lambda e, *a: calls.append(e))

score = m.score(mod, eval_data=evald, eval_metric=["acc", "ce"])
args, _ = m.get_params(mod)
np.savez(f"{out}/{mode}_{rank}.npz", **{k: v.asnumpy() for k, v in args.items()})
hist = m.history(mod)
hist.pop("time", None)
with open(f"{out}/{mode}_{rank}.json", "w") as f:
    json.dump({"history": hist, "score": score, "log": log.getvalue(), "epoch_callbacks": calls,
               "rescale_grad": mx.optimizer.options(m.optimizer(mod))["rescale_grad"]}, f)
