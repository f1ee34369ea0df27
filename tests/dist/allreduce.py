"""The collective of every worker count: sums equal the rank-order float32 sum, bit for bit
on every worker (buffer lengths that divide and that do not divide by the worker count),
broadcast and allgather. Writes <out>/allreduce_<rank>.npz."""
import sys

import numpy as np

import mxfn as mx
from mxfn import _dist

out = sys.argv[1]
kv = mx.kvstore.create("dist_sync")
c = _dist.world()
rank, n = c.rank, c.size
res = {}
for length in (1, 7, 1000, 3 * 1024 + 1):
    mine = np.random.RandomState(rank * 100 + length).standard_normal(length).astype("float32") * 1e3
    want = np.zeros(length, "float32")
    for r in range(n):
        x = np.random.RandomState(r * 100 + length).standard_normal(length).astype("float32") * 1e3
        want = want + x if r else x.copy()
    got = mine.copy()
    c.allreduce_sum(got)
    res[f"sum{length}"] = got
    res[f"want{length}"] = want
b = np.full(5, rank, "float32")
c.broadcast(b, n - 1)
res["bcast"] = b
res["gather"] = np.array([x[0] for x in c.allgather_bytes(bytes([rank]))])
np.savez(f"{out}/allreduce_{rank}.npz", **res)
