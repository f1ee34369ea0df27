"""A worker that fails during fit: ``raise`` (rank 1 raises in a batch-end callback) or
``exit`` (rank 1 leaves before training; the others must not wait forever)."""
import sys

import numpy as np

import mxfn as mx
from mxfn import module as m

how = sys.argv[1]
kv = mx.kvstore.create("dist_sync")
rank = mx.kvstore.rank(kv)
if how == "exit" and rank == 1:
    sys.exit(0)
x = np.random.RandomState(0).normal(size=(4000, 10)).astype("float32")
train = mx.io.ndarray_iter(x, label=(x[:, 0] > 0).astype("float32"), batch_size=10)


def boom(param):
    if rank == 1 and param.nbatch == 3:
        raise RuntimeError("worker 1 fails on purpose")


net = mx.sym.softmax_output(mx.sym.fully_connected(mx.sym.variable("data"), num_hidden=2, name="fc"),
                            name="softmax")
m.fit(m.module(net), train, num_epoch=1000, kvstore="dist_sync", batch_end_callback=boom)
print("finished training: the failure went unnoticed")
