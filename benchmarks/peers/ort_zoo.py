"""ONNX Runtime (default CPU provider, default session options) on the zoo inference workloads
(benchmarks/zoo_models.py), running the ONNX files MXNet 1.9.1's ``mx.onnx.export_model`` wrote
(benchmarks/peers/zoo_export.py). Run in the onnxruntime peer venv. No training workloads.
usage: ort_zoo.py [--quick] [MODEL ...]"""

import os
import sys

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import zoo_models as z  # noqa: E402

SYSTEM = "onnxruntime-" + ort.__version__


emit = z.emitter(SYSTEM)
best_ms = z.best_ms


def inference(name, batch, quick):
    size = z.MODELS[name]
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(os.path.join(z.cache_dir(), f"{name}-b{batch}.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name:
            np.random.default_rng(0).random((batch, 3, size, size), dtype=np.float32)}
    emit(z.workload(name, batch), best_ms(lambda: sess.run(None, feed), *z.repeats(batch, quick)), "ms")


def main(argv):
    quick, models, _ = z.parse_args(argv)
    for name in models:
        for batch in z.BATCHES:
            inference(name, batch, quick)


if __name__ == "__main__":
    main(sys.argv[1:])
