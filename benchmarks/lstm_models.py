"""The LSTM language-model workloads (issue #13 item 5), shared by mxfn's lstm.py and the peers'
scripts (peers/mxnet_lstm.py, peers/torch_lstm.py): the model of examples/lstm_bucketing.py
(Embedding 200 → 2-layer LSTM 200 → FullyConnected(vocab) → softmax, padding ignored) on the
KJV corpus with its vocabulary, bucketed as there (buckets 10, 20, 30, 40, 60; batch 32).

- ``lstm-train-b32``: training throughput in target tokens per second — the non-padding label
  tokens of the batches processed (forward, backward, SGD update) divided by the time, best
  of ``REPEATS`` passes over the same ``TRAIN_BATCHES`` batches after a warm-up pass (which
  also binds every bucket).
- ``lstm-infer-b1-t35``: latency of one verse of 35 tokens at batch 1, forward to the softmax
  output and read back, in milliseconds (best of the repeats after a warm-up).

Every system gets the same batches, in the same order, built here with numpy (so no system's
data iterator is timed).
"""

import os
import random
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
import kjv_corpus  # noqa: E402

from zoo_models import best_ms, emitter  # noqa: E402,F401  (re-exported for the scripts)

NUM_LAYERS, NUM_HIDDEN, NUM_EMBED, BATCH = 2, 200, 200, 32
BUCKETS = kjv_corpus.BUCKETS
TRAIN_BATCHES, REPEATS = 40, 3
INFER_LEN, INFER_WARM, INFER_REPEATS = 35, 10, 100
LEARNING_RATE, MOMENTUM = 0.1, 0.9
TRAIN, INFER = "lstm-train-b32", f"lstm-infer-b1-t{INFER_LEN}"
WORKLOADS = (TRAIN, INFER)


def corpus():
    """The example's corpus and vocabulary (its default options)."""
    return kjv_corpus.corpus()


def batches(c, n=TRAIN_BATCHES, seed=0):
    """``n`` training batches ``(bucket_key, data, label)`` as the bucket iterator makes them:
    each verse padded with 0 to the smallest bucket that fits it, a batch holds ``BATCH``
    verses of one bucket, the label is the data shifted one step left (ended by 0); verses
    and batches in a seeded random order. ``data`` and ``label`` are float32 (N, T) arrays."""
    rng = random.Random(seed)
    by_bucket = {b: [] for b in BUCKETS}
    for s in kjv_corpus.fits(c["train"], BUCKETS):
        by_bucket[min(b for b in BUCKETS if b >= len(s))].append(s)
    out = []
    for key, sents in by_bucket.items():
        rng.shuffle(sents)
        for i in range(0, len(sents) - BATCH + 1, BATCH):
            data = np.zeros((BATCH, key), np.float32)
            for r, s in enumerate(sents[i:i + BATCH]):
                data[r, :len(s)] = s
            label = np.zeros_like(data)
            label[:, :-1] = data[:, 1:]
            out.append((key, data, label))
    rng.shuffle(out)
    if len(out) < n:
        raise ValueError(f"lstm_models.batches: the corpus makes {len(out)} batches, {n} wanted")
    return out[:n]


def target_tokens(bs):
    """The non-padding label tokens of the batches: what a pass trains on."""
    return int(sum(np.count_nonzero(label) for _, _, label in bs))


def sentence(c):
    """One (1, INFER_LEN) float32 verse: the first validation verse that long, cut to length."""
    s = next(s for s in c["valid"] if len(s) >= INFER_LEN)
    return np.asarray([s[:INFER_LEN]], np.float32)


def tokens_per_second(step, bs, tokens, repeats=REPEATS, sync=lambda: None):
    """``tokens`` (the target tokens of a pass, ``target_tokens``) per second of the fastest of
    ``repeats`` passes of ``step(batch)`` over ``bs``, after one warm-up pass; ``sync`` waits
    for queued work (MXNet's engine)."""
    for b in bs:
        step(b)
    sync()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for b in bs:
            step(b)
        sync()
        best = min(best, time.perf_counter() - t)
    return tokens / best
