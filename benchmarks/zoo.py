"""mxfn on the zoo workloads (benchmarks/zoo_models.py): the models MXNet 1.9.1 exported, loaded
with ``module.load_checkpoint`` and bound for inference; training steps on the same symbols
with SoftmaxOutput on top. usage: python zoo.py [--quick] [MODEL ...]  (one JSON line each)"""

import os
import sys

import numpy as np

import mxfn as mx
from mxfn import module as m

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models as z  # noqa: E402

SYSTEM = "mxfn-" + mx.__version__


emit = z.emitter(SYSTEM)
best_ms = z.best_ms


def inference(name, batch, quick):
    size = z.MODELS[name]
    mod = m.load_checkpoint(os.path.join(z.cache_dir(), name), 0, label_names=[])
    m.bind(mod, data_shapes=[("data", (batch, 3, size, size))], for_training=False)
    x = mx.nd.array(np.random.default_rng(0).random((batch, 3, size, size), dtype=np.float32))
    b = mx.io.data_batch(data=[x])

    def step():
        m.forward(mod, b, is_train=False)
        m.outputs_merged(mod)[0].asnumpy()

    emit(z.workload(name, batch), best_ms(step, *z.repeats(batch, quick)), "ms")


def training(name, quick):
    n, s = z.TRAIN_BATCH, z.TRAIN_SIZE
    net = mx.sym.softmax_output(mx.sym.load(os.path.join(z.cache_dir(), name + "-symbol.json")),
                                name="softmax")
    mod = m.module(net)
    m.bind(mod, data_shapes=[("data", (n, 3, s, s))], label_shapes=[("softmax_label", (n,))])
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer="sgd", optimizer_params={"learning_rate": 0.01, "momentum": 0.9})
    rng = np.random.default_rng(0)
    b = mx.io.data_batch(data=[mx.nd.array(rng.random((n, 3, s, s), dtype=np.float32))],
                         label=[mx.nd.array(rng.integers(0, z.TRAIN_CLASSES, n).astype(np.float32))])

    def step():
        m.forward_backward(mod, b)
        m.update(mod)
        m.outputs_merged(mod)[0].asnumpy()

    emit(z.workload(name, n, train=True), best_ms(step, *z.repeats(n, quick)), "ms")


def main(argv):
    quick, models, train = z.parse_args(argv)
    for name in models:
        for batch in z.BATCHES:
            inference(name, batch, quick)
    for name in train:
        training(name, quick)


if __name__ == "__main__":
    main(sys.argv[1:])
