"""The zoo workloads (issue #12), shared by mxfn's zoo.py and the peers' scripts: Gluon model-zoo
networks exported by MXNet 1.9.1 (random init) into a cache outside git, inference at batch 1
and 16 on each network's input size, and training steps (SoftmaxOutput on top, SGD momentum)
at batch 32 on 32×32 images. Every figure is milliseconds per call (best of the repeats after
a warm-up); the ratio reported is peer ms / mxfn ms.
"""

import json
import os
import time

# Model → input side (square images, 3 channels). squeezenet, densenet and inception end in
# fixed-size average pools, so they run at their ImageNet sizes; the others at 64² (as in the
# issue), except mobilenet_v2_1_0, at 224² (its usual size).
MODELS = {
    "squeezenet1.1": 224,
    "mobilenet0.25": 64,
    "mobilenetv2_0.25": 64,
    "mobilenetv2_1.0": 224,
    "resnet18_v2": 64,
    "resnet50_v1": 64,
    "densenet121": 224,
    "inceptionv3": 299,
}
BATCHES = (1, 16)
TRAIN = ("mobilenetv2_0.25", "resnet18_v2", "resnet50_v1")
TRAIN_BATCH, TRAIN_SIZE, TRAIN_CLASSES = 32, 32, 1000
QUICK_MODELS = ("mobilenet0.25", "resnet18_v2")
QUICK_TRAIN = ("resnet18_v2",)


def cache_dir():
    """Where the exported models live: $MXFN_BENCH_CACHE or ~/.cache/mxfn-bench/zoo."""
    return os.environ.get("MXFN_BENCH_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "mxfn-bench", "zoo"))


def repeats(batch, quick):
    """(warm-up calls, timed calls, time budget in s) for one workload (see ``best_ms``). The
    budget: on the 2-core VM the best of half a second's calls moved by up to 2x between two
    runs a minute apart (SqueezeNet at batch 1: 6.0 and 11.7 ms; the same build's best over 5 s
    stayed within 6.1–6.5), the machine's neighbours taking it for seconds at a time."""
    if quick:
        return 1, 3, 0.5
    return (3, 20, 3.0) if batch == 1 else (2, 6, 3.0)


def workload(name, batch, train=False):
    return f"zoo-{'train-' if train else ''}{name}-b{batch}"


def parse_args(argv):
    """[--quick] [MODEL ...] → (quick, inference models, training models)."""
    quick = "--quick" in argv
    names = [a for a in argv if not a.startswith("--")]
    models = names or list(QUICK_MODELS if quick else MODELS)
    train = [n for n in (names or (QUICK_TRAIN if quick else TRAIN)) if n in TRAIN]
    return quick, models, train


def emitter(system):
    """``emit(workload, value, unit, **extra)``: prints one JSON line for ``system``."""
    def emit(workload, value, unit, **extra):
        print(json.dumps(dict(workload=workload, system=system, value=value, unit=unit, **extra)), flush=True)
    return emit


def best_ms(step, warm, reps, budget_s=0.5, cap=20000):
    """Milliseconds of the fastest call of ``step`` after ``warm`` calls: at least ``reps``
    timed calls, more (up to ``cap``) while they take under ``budget_s`` in all. The best of
    six calls of a millisecond-long pass moved by 25% between runs on a 2-core VM; the budget
    gives the short workloads many calls, the long ones keep their ``reps``."""
    for _ in range(warm):
        step()
    best, spent, count = float("inf"), 0.0, 0
    while count < reps or (spent < budget_s and count < cap):
        t = time.perf_counter()
        step()
        took = time.perf_counter() - t
        best, spent, count = min(best, took), spent + took, count + 1
    return best * 1e3
