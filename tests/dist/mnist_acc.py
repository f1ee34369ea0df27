"""examples/mnist_dist.py for one epoch; writes <out>/mnist_<workers>_<rank>.json with the
validation accuracy (run with and without mpiexec by tests/test_dist.py)."""
import json
import os
import runpy
import sys

import mxfn as mx

out = sys.argv[1]
ex = runpy.run_path(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "mnist_dist.py"))
kv = mx.kvstore.create("dist_sync")
mod, acc, seconds = ex["train"](num_epoch=1, checkpoint=os.path.join(out, "mnist"))
with open(f"{out}/mnist_{mx.kvstore.num_workers(kv)}_{mx.kvstore.rank(kv)}.json", "w") as f:
    json.dump({"accuracy": acc, "seconds": seconds}, f)
