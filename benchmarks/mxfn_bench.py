"""mxfn on the benchmark workloads (shared/bench/WORKLOADS.md), measured exactly as the peers
measure them. usage: python mxfn_bench.py [all | WORKLOAD ...]  (one JSON line per workload)"""

import gzip
import json
import os
import struct
import sys
import time

import numpy as np

import mxfn as mx
from mxfn import module as m

HERE = os.path.dirname(os.path.abspath(__file__))
MNIST = os.environ.get("MXFN_MNIST_DIR", os.path.join(HERE, "..", "data", "mnist"))
SYSTEM = "mxfn-" + mx.__version__


def emit(workload, value, unit, **extra):
    print(json.dumps(dict(workload=workload, system=SYSTEM, value=value, unit=unit, **extra)), flush=True)


def _idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = struct.unpack(">I", raw[:4])[0] & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load():
    img = lambda n: (_idx(os.path.join(MNIST, n)).astype(np.float32) / 255.0).reshape(-1, 784)  # noqa: E731
    lab = lambda n: _idx(os.path.join(MNIST, n)).astype(np.float32)  # noqa: E731
    return (img("train-images-idx3-ubyte.gz"), lab("train-labels-idx1-ubyte.gz"),
            img("t10k-images-idx3-ubyte.gz"), lab("t10k-labels-idx1-ubyte.gz"))


def mlp():
    x = mx.sym.variable("data")
    x = mx.sym.activation(mx.sym.fully_connected(x, num_hidden=128, name="fc1"), act_type="relu")
    x = mx.sym.activation(mx.sym.fully_connected(x, num_hidden=64, name="fc2"), act_type="relu")
    return mx.sym.softmax_output(mx.sym.fully_connected(x, num_hidden=10, name="fc3"), name="softmax")


def lenet():
    x = mx.sym.variable("data")
    x = mx.sym.pooling(mx.sym.activation(mx.sym.convolution(x, kernel=(5, 5), num_filter=20), act_type="tanh"),
                       pool_type="max", kernel=(2, 2), stride=(2, 2))
    x = mx.sym.pooling(mx.sym.activation(mx.sym.convolution(x, kernel=(5, 5), num_filter=50), act_type="tanh"),
                       pool_type="max", kernel=(2, 2), stride=(2, 2))
    x = mx.sym.activation(mx.sym.fully_connected(mx.sym.flatten(x), num_hidden=500), act_type="tanh")
    return mx.sym.softmax_output(mx.sym.fully_connected(x, num_hidden=10), name="softmax")


def train(sym, x, y, batch, lr, epochs, xval=None, yval=None):
    """Returns (best epoch seconds, module, validation accuracy or None, resident MB after each
    epoch) — the peers' loop."""
    mx.random.seed(42)
    it = mx.io.ndarray_iter(x, label=y, batch_size=batch, shuffle=True, seed=42)
    mod = m.module(sym, contexts=[mx.cpu()])
    m.bind(mod, data_shapes=mx.io.provide_data(it), label_shapes=mx.io.provide_label(it))
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer="sgd", optimizer_params={"learning_rate": lr, "momentum": 0.9})
    metric = mx.metric.accuracy()
    times, rss = [], []
    for _ in range(epochs):
        mx.io.reset(it)
        mx.metric.reset(metric)
        t = time.perf_counter()
        for b in it:
            m.forward_backward(mod, b)
            m.update(mod)
            m.update_metric(mod, metric, mx.io.batch_label(b))
        times.append(time.perf_counter() - t)
        rss.append(_resident_mb())
    acc = None
    if xval is not None:
        acc = dict(m.score(mod, eval_data=mx.io.ndarray_iter(xval, label=yval, batch_size=1000),
                           eval_metric="acc"))["accuracy"]
    return min(times), mod, acc, rss


def _resident_mb():
    """This process's current resident memory in MB (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        return None


def main(which):
    xtr, ytr, xte, yte = load()
    if {"mlp-b100", "predict-b1000", "latency-b1"} & set(which):
        secs, mod, acc, rss = train(mlp(), xtr, ytr, 100, 0.1, 2, xte, yte)
        if "mlp-b100" in which:
            emit("mlp-b100", len(xtr) / secs, "samples/s", val_acc=acc, rss_per_epoch_mb=rss)
        params = m.get_params(mod)
        if "predict-b1000" in which:
            pmod = m.module(mlp())
            m.bind(pmod, data_shapes=[("data", (1000, 784))], for_training=False)
            m.set_params(pmod, arg_params=params[0], aux_params=params[1])
            it = mx.io.ndarray_iter(xte, batch_size=1000)
            best = 1e9
            for _ in range(5):
                t = time.perf_counter()
                m.predict(pmod, eval_data=it)[0].asnumpy()
                best = min(best, time.perf_counter() - t)
            emit("predict-b1000", len(xte) / best, "samples/s")
        if "latency-b1" in which:
            pmod = m.module(mlp())
            m.bind(pmod, data_shapes=[("data", (1, 784))], for_training=False)
            m.set_params(pmod, arg_params=params[0], aux_params=params[1])
            one = mx.io.data_batch(data=[mx.nd.array(xte[:1])])
            lat = []
            for _ in range(2000):
                t = time.perf_counter()
                m.forward(pmod, one, is_train=False)
                m.outputs_merged(pmod)[0].asnumpy()
                lat.append(time.perf_counter() - t)
            emit("latency-b1", float(np.median(lat[100:]) * 1e6), "us")
    if "mlp-b10" in which:
        secs, *_ = train(mlp(), xtr[:10000], ytr[:10000], 10, 0.01, 1)
        emit("mlp-b10", 10000 / secs, "samples/s")
    if "lenet-b100" in which:
        secs, *_ = train(lenet(), xtr[:10000].reshape(-1, 1, 28, 28), ytr[:10000], 100, 0.1, 2)
        emit("lenet-b100", 10000 / secs, "samples/s")
    if "gemm-1024" in which:
        a = mx.nd.array(np.random.rand(1024, 1024))
        b = mx.nd.array(np.random.rand(1024, 1024))
        mx.nd.dot(a, b)
        best = 1e9
        for _ in range(20):
            t = time.perf_counter()
            mx.nd.dot(a, b)
            best = min(best, time.perf_counter() - t)
        emit("gemm-1024", 2 * 1024 ** 3 / best / 1e9, "GFLOP/s")


ALL = ["mlp-b100", "mlp-b10", "lenet-b100", "predict-b1000", "latency-b1", "gemm-1024"]
if __name__ == "__main__":
    args = sys.argv[1:] or ["all"]
    main(ALL if args == ["all"] else args)
