"""ONNX Runtime's time per graph node on one zoo inference workload (its built-in profiler),
for benchmarks/zoo_layers.py. Run in the onnxruntime peer venv. Prints one JSON object:
{"nodes": [[name, op, mean_ms], ...]} over the timed calls, largest first.
usage: ort_layers.py MODEL BATCH [CALLS]"""

import json
import os
import sys
from collections import defaultdict

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import zoo_models as z  # noqa: E402


def main(argv):
    name, batch = argv[0], int(argv[1])
    calls = int(argv[2]) if len(argv) > 2 else 5
    size = z.MODELS[name]
    path = os.path.join(z.cache_dir(), f"{name}-b{batch}.onnx")
    feed_shape = (batch, 3, size, size)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.enable_profiling = True
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: np.random.default_rng(0).random(feed_shape, dtype=np.float32)}
    for _ in range(calls + 2):
        sess.run(None, feed)
    trace = sess.end_profiling()
    with open(trace) as f:
        events = json.load(f)
    os.remove(trace)
    runs = defaultdict(list)
    ops = {}
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        node = e["name"][: -len("_kernel_time")]
        runs[node].append(e["dur"] / 1e3)
        ops[node] = e.get("args", {}).get("op_name", "?")
    # The first two runs of each node allocate and warm the caches: the mean is over the rest.
    rows = [[n, ops[n], float(np.mean(t[2:] or t))] for n, t in runs.items()]
    rows.sort(key=lambda r: -r[2])
    print(json.dumps({"nodes": rows}))


if __name__ == "__main__":
    main(sys.argv[1:])
