"""The main job: a short tour of mx.nd (it becomes MNIST training when the Module API lands)."""

import gzip
import os
import tempfile
import time

import numpy as np

import mxfn as mx
from mxfn import nd

HERE = os.path.dirname(os.path.abspath(__file__))


def load_mnist_images(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    n, rows, cols = (int.from_bytes(data[i:i + 4], "big") for i in (4, 8, 12))
    return np.frombuffer(data, np.uint8, offset=16).reshape(n, rows * cols)


def main():
    mx.random.seed(0)
    images = nd.array(load_mnist_images(os.path.join(HERE, "..", "data", "mnist", "t10k-images-idx3-ubyte.gz")))
    x = images.astype("float32") / 255
    print(f"MNIST test images: {x.shape} {x.dtype}, mean pixel {nd.mean(x).asscalar():.4f}")

    w = nd.random_normal(0, 0.01, (784, 128))
    t = time.perf_counter()
    h = nd.dot(x, w)
    dt = time.perf_counter() - t
    print(f"dot {x.shape} x {w.shape} -> {h.shape} in {dt * 1e3:.1f} ms "
          f"({2 * x.shape[0] * 784 * 128 / dt / 1e9:.1f} GFLOP/s)")

    a = nd.array([[1, 2], [3, 4]])
    print("a * a.T + 1 =", (a * a.T + 1).asnumpy().tolist())

    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "demo-0001.params")
        nd.save(f, {"arg:w": w, "arg:b": nd.zeros(128)})
        back = nd.load(f)
        assert isinstance(back, dict)  # a file of named arrays loads as a dict
        print(f"saved and reloaded {list(back)} ({os.path.getsize(f)} bytes, MXNet's format)")
        assert np.array_equal(back["arg:w"].asnumpy(), w.asnumpy())


if __name__ == "__main__":
    main()
