"""The seed's MNIST example, functional style: an MLP 784-128-64-10 trained through the
intermediate-level loop, then `fit`, with predict / score / predict_batch /
predict_every_batch and checkpoint + resume, on the MNIST files shipped in data/mnist/.

    python3 examples/mnist_mlp.py            # 3 epochs, prints validation accuracy
"""

import logging
import os
import sys
import tempfile
import time

import numpy as np
import toolz

import mxfn as mx
from mxfn import module as m

HERE = os.path.dirname(os.path.abspath(__file__))
MNIST = os.path.join(HERE, "..", "data", "mnist")
BATCH = 100


def mlp():
    data = mx.sym.variable("data")
    fc1 = mx.sym.fully_connected(data, num_hidden=128, name="fc1")
    act1 = mx.sym.activation(fc1, act_type="relu", name="relu1")
    fc2 = mx.sym.fully_connected(act1, num_hidden=64, name="fc2")
    act2 = mx.sym.activation(fc2, act_type="relu", name="relu2")
    fc3 = mx.sym.fully_connected(act2, num_hidden=10, name="fc3")
    return mx.sym.softmax_output(fc3, name="softmax")


def iters():
    files = lambda kind: (os.path.join(MNIST, f"{kind}-images-idx3-ubyte.gz"),  # noqa: E731
                          os.path.join(MNIST, f"{kind}-labels-idx1-ubyte.gz"))
    img, lab = files("train")
    train = mx.io.mnist_iter(image=img, label=lab, batch_size=BATCH, flat=True, shuffle=True, seed=0)
    img, lab = files("t10k")
    test = mx.io.mnist_iter(image=img, label=lab, batch_size=BATCH, flat=True, shuffle=False)
    return train, test


def intermediate_loop(train, test):
    """One epoch of the intermediate-level API: forward_backward, update, update_metric."""
    mod = toolz.thread_first(
        m.module(mlp()),
        (m.bind, {"data_shapes": mx.io.provide_data(train), "label_shapes": mx.io.provide_label(train)}),
        (m.init_params, {"initializer": mx.init.xavier()}),
        (m.init_optimizer, {"optimizer": "sgd", "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9}}),
    )
    metric = mx.metric.accuracy()
    mx.io.reset(train)
    for batch in train:
        toolz.thread_first(mod, (m.forward_backward, batch), m.update, (m.update_metric, metric, mx.io.batch_label(batch)))
    print("intermediate loop, epoch 0:", mx.metric.get(metric))
    print("  validation:", m.score(mod, {"eval_data": test, "eval_metric": "acc"}))


def main(num_epoch=3, seed=1):
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mx.random.seed(seed)
    train, test = iters()
    if "--quick" not in sys.argv:
        intermediate_loop(train, test)

    mod = m.module(mlp(), {"contexts": [mx.cpu()]})
    t = time.perf_counter()
    m.fit(mod, train, {
        "eval_data": test,
        "num_epoch": num_epoch,
        "optimizer": "sgd",
        "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9},
        "initializer": mx.init.xavier(),
        "batch_end_callback": mx.callback.speedometer(BATCH, 200),
    })
    print(f"fit: {num_epoch} epochs in {time.perf_counter() - t:.1f} s")

    probs = m.predict(mod, {"eval_data": test})[0]
    mx.io.reset(test)
    labels = np.concatenate([b["label"][0].asnumpy() for b in test])
    print(f"predict: {probs.shape}, accuracy {np.mean(probs.asnumpy().argmax(1) == labels):.4f}")
    mx.io.reset(test)
    first = next(iter(test))
    print("predict_batch:", m.predict_batch(mod, first)[0].shape,
          "| predict_every_batch:", len(m.predict_every_batch(mod, {"eval_data": test, "num_batch": 3})), "batches")
    (name, acc), = m.score(mod, {"eval_data": test, "eval_metric": "acc"})
    print(f"validation {name}: {acc:.4f}")

    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "mnist-mlp")
        m.save_checkpoint(mod, {"prefix": prefix, "epoch": num_epoch, "save_opt_states": True})
        resumed = m.load_checkpoint({"prefix": prefix, "epoch": num_epoch, "load_optimizer_states": True})
        m.fit(resumed, train, {"eval_data": test, "num_epoch": num_epoch + 1, "begin_epoch": num_epoch,
                               "optimizer_params": {"learning_rate": 0.1, "momentum": 0.9}})
        (_, acc2), = m.score(resumed, {"eval_data": test, "eval_metric": "acc"})
        print(f"resumed from checkpoint, one more epoch: validation accuracy {acc2:.4f}")
    return acc


if __name__ == "__main__":
    main()
