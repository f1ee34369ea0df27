"""MXNet 1.9.1 (Module API, its default build) on the zoo workloads (benchmarks/zoo_models.py),
measured as benchmarks/zoo.py measures mxfn. Run in the MXNet peer venv.
usage: mxnet_zoo.py [--quick] [MODEL ...]"""

import os
import sys

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import zoo_models as z  # noqa: E402

SYSTEM = "mxnet-" + mx.__version__


emit = z.emitter(SYSTEM)
best_ms = z.best_ms


def inference(name, batch, quick):
    size = z.MODELS[name]
    sym, arg, aux = mx.model.load_checkpoint(os.path.join(z.cache_dir(), name), 0)
    mod = mx.mod.Module(sym, data_names=["data"], label_names=None, context=mx.cpu())
    mod.bind(data_shapes=[("data", (batch, 3, size, size))], for_training=False)
    mod.set_params(arg, aux)
    x = mx.nd.array(np.random.default_rng(0).random((batch, 3, size, size), dtype=np.float32))
    b = mx.io.DataBatch(data=[x])

    def step():
        mod.forward(b, is_train=False)
        mod.get_outputs()[0].asnumpy()

    emit(z.workload(name, batch), best_ms(step, *z.repeats(batch, quick)), "ms")


def training(name, quick):
    n, s = z.TRAIN_BATCH, z.TRAIN_SIZE
    net = mx.sym.SoftmaxOutput(mx.sym.load(os.path.join(z.cache_dir(), name + "-symbol.json")),
                               name="softmax")
    mod = mx.mod.Module(net, context=mx.cpu())
    mod.bind(data_shapes=[("data", (n, 3, s, s))], label_shapes=[("softmax_label", (n,))])
    mod.init_params(initializer=mx.init.Xavier())
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.01, "momentum": 0.9})
    rng = np.random.default_rng(0)
    b = mx.io.DataBatch(data=[mx.nd.array(rng.random((n, 3, s, s), dtype=np.float32))],
                        label=[mx.nd.array(rng.integers(0, z.TRAIN_CLASSES, n).astype(np.float32))])

    def step():
        mod.forward_backward(b)
        mod.update()
        mod.get_outputs()[0].asnumpy()

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
