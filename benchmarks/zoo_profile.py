"""Per-operator profile of the zoo models in mxfn (mx.profiler): inference at one batch size,
and training steps. usage: python zoo_profile.py [--batch N] [--top K] [--train] [MODEL ...]"""

import os
import sys

import numpy as np

import mxfn as mx
import mxfn.profiler as profiler
from mxfn import module as m

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo_models as z  # noqa: E402


def profile_inference(name, batch, calls=3):
    size = z.MODELS[name]
    mod = m.load_checkpoint(os.path.join(z.cache_dir(), name), 0, label_names=[])
    m.bind(mod, data_shapes=[("data", (batch, 3, size, size))], for_training=False)
    b = mx.io.data_batch(data=[mx.nd.array(np.random.default_rng(0).random((batch, 3, size, size),
                                                                             dtype=np.float32))])
    # The first passes prepare weights and grow the allocator's pools: several ms each.
    for _ in range(5):
        m.forward(mod, b, is_train=False)
        m.outputs_merged(mod)[0].asnumpy()
    profiler.reset()
    profiler.set_state("run")
    for _ in range(calls):
        m.forward(mod, b, is_train=False)
        m.outputs_merged(mod)[0].asnumpy()
    profiler.set_state("stop")


def profile_training(name, calls=2):
    n, s = z.TRAIN_BATCH, z.TRAIN_SIZE
    net = mx.sym.softmax_output(mx.sym.load(os.path.join(z.cache_dir(), name + "-symbol.json")), name="softmax")
    mod = m.module(net)
    m.bind(mod, data_shapes=[("data", (n, 3, s, s))], label_shapes=[("softmax_label", (n,))])
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer="sgd", optimizer_params={"learning_rate": 0.01, "momentum": 0.9})
    rng = np.random.default_rng(0)
    b = mx.io.data_batch(data=[mx.nd.array(rng.random((n, 3, s, s), dtype=np.float32))],
                         label=[mx.nd.array(rng.integers(0, 1000, n).astype(np.float32))])
    m.forward_backward(mod, b)
    profiler.reset()
    profiler.set_state("run")
    for _ in range(calls):
        m.forward_backward(mod, b)
        m.update(mod)
    profiler.set_state("stop")


def main(argv):
    batch = int(argv[argv.index("--batch") + 1]) if "--batch" in argv else 16
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 8
    train = "--train" in argv
    skip = {argv[argv.index(f) + 1] for f in ("--batch", "--top") if f in argv}
    names = [a for a in argv if not a.startswith("--") and a not in skip] or (list(z.TRAIN) if train else list(z.MODELS))
    for name in names:
        if train:
            profile_training(name)
        else:
            profile_inference(name, batch)
        ops = profiler.rows()["operators"]
        total = sum(r[3] for r in ops) or 1.0
        print(f"== {name} {'train b%d' % z.TRAIN_BATCH if train else 'b%d' % batch}: {total:.1f} ms profiled")
        for op, p, calls, ms in ops[:top]:
            print(f"   {op:<22} {p:<8} {calls:>6} calls {ms:>9.2f} ms {100 * ms / total:>5.1f}%")
        profiler.reset()


if __name__ == "__main__":
    main(sys.argv[1:])
