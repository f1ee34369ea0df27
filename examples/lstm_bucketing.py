"""A word-level LSTM language model on the King James Version (data/kjv), the structure of
MXNet's example/rnn/bucketing/lstm_bucketing.py: verses bucketed by length
(``io.bucket_sentence_iter``), Embedding → stacked LSTM → FullyConnected(vocab) →
SoftmaxOutput (padding ignored), one symbol per bucket in a BucketingModule, trained by ``fit``
with the Perplexity metric. Ends with the unigram baseline on the same validation tokens.

    python3 examples/lstm_bucketing.py                       # the defaults: a few minutes on 2 cores
    python3 examples/lstm_bucketing.py --cell lstm --num-epochs 1 --max-sentences 2000

``--cell fused`` (default) runs the layers as one fused ``RNN`` operator (``rnn.fused_rnn_cell``);
``--cell lstm`` unrolls a stack of ``rnn.lstm_cell`` step by step (the same model, slower).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import mxfn as mx
from mxfn import module as m
from mxfn import rnn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kjv_corpus  # noqa: E402

INVALID = 0  # the padding id: the iterator's invalid label, ignored by the loss and the metric


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--num-layers", type=int, default=2)
    p.add_argument("--num-hidden", type=int, default=200)
    p.add_argument("--num-embed", type=int, default=200)
    p.add_argument("--cell", choices=["fused", "lstm"], default="fused",
                   help="fused RNN operator, or LSTM cells unrolled step by step")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--buckets", type=lambda s: [int(b) for b in s.split(",")],
                   default=list(kjv_corpus.BUCKETS), help="comma-separated bucket lengths")
    p.add_argument("--num-epochs", type=int, default=3)
    p.add_argument("--max-sentences", type=int, default=kjv_corpus.DEFAULTS["max_sentences"],
                   help="the first N verses of the corpus (0: all 31,103)")
    p.add_argument("--min-count", type=int, default=kjv_corpus.DEFAULTS["min_count"],
                   help="rarer training words become <unk>")
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--wd", type=float, default=0.0)
    p.add_argument("--disp-batches", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    return p


def sym_gen_fn(o, vocab_size):
    """The BucketingModule's ``sym_gen``: one symbol per bucket length, parameters named the
    same in every bucket (so every bucket shares them)."""
    cell: rnn.Cell
    if o["cell"] == "fused":
        cell = rnn.fused_rnn_cell(o["num_hidden"], num_layers=o["num_layers"], mode="lstm", prefix="lstm_")
    else:
        cell = rnn.sequential_rnn_cell([rnn.lstm_cell(o["num_hidden"], prefix=f"lstm_l{i}_")
                                        for i in range(o["num_layers"])])

    def sym_gen(seq_len):
        data = mx.sym.variable("data")
        label = mx.sym.variable("softmax_label")
        embed = mx.sym.embedding(data, input_dim=vocab_size, output_dim=o["num_embed"], name="embed")
        if o["cell"] == "fused":
            # The RNN operator runs time-major (TNC); the batches and labels are batch-major.
            tnc, _ = rnn.unroll(cell, seq_len, inputs=mx.sym.swapaxes(embed, dim1=0, dim2=1), layout="TNC",
                                merge_outputs=True)
            outputs = mx.sym.swapaxes(tnc, dim1=0, dim2=1)
        else:
            merged, _ = rnn.unroll(cell, seq_len, inputs=embed, layout="NTC", merge_outputs=True)
            assert isinstance(merged, mx.sym.Symbol)  # merge_outputs: one symbol, not a list per step
            outputs = merged
        hidden = mx.sym.reshape(outputs, shape=(-1, o["num_hidden"]))
        pred = mx.sym.fully_connected(hidden, num_hidden=vocab_size, name="pred")
        out = mx.sym.softmax_output(pred, mx.sym.reshape(label, shape=(-1,)), use_ignore=True,
                                    ignore_label=INVALID, normalization="valid", name="softmax")
        return out, ["data"], ["softmax_label"]

    return sym_gen


def iters(c, o):
    it = lambda sents, seed: mx.io.bucket_sentence_iter(sents, o["batch_size"], buckets=o["buckets"],  # noqa: E731
                                                         invalid_label=INVALID, seed=seed)
    return it(c["train"], o["seed"]), it(c["valid"], o["seed"] + 1)


def evaluate(mod, batches):
    """Perplexity of the model on ``batches``: the intermediate API's forward and update_metric."""
    metric = mx.metric.perplexity(ignore_label=INVALID)
    for b in batches:
        m.forward(mod, b, is_train=False)
        m.update_metric(mod, metric, mx.io.batch_label(b))
    return mx.metric.get(metric)[1]


def main(argv=None):
    o = vars(parser().parse_args(argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mx.random.seed(o["seed"])
    t = time.perf_counter()
    c = kjv_corpus.corpus({"max_sentences": o["max_sentences"] or None, "min_count": o["min_count"]})
    vocab_size = len(c["vocab"])
    train, valid = iters(c, o)
    print(f"corpus: {len(c['train'])} training and {len(c['valid'])} validation verses, vocabulary "
          f"{vocab_size} (words seen >= {o['min_count']} times), {kjv_corpus.target_tokens(c['train'])} "
          f"training target tokens; loaded in {time.perf_counter() - t:.1f} s")

    mod = m.bucketing_module(sym_gen_fn(o, vocab_size), default_bucket_key=train.default_bucket_key,
                             contexts=[mx.cpu()])
    t = time.perf_counter()
    m.fit(mod, train, {
        "eval_data": valid,
        "eval_metric": mx.metric.perplexity(ignore_label=INVALID),
        "num_epoch": o["num_epochs"],
        "optimizer": o["optimizer"],
        "optimizer_params": {"learning_rate": o["lr"], "wd": o["wd"]},
        "initializer": mx.init.xavier(factor_type="in", magnitude=2.34),
        "batch_end_callback": mx.callback.speedometer(o["batch_size"], o["disp_batches"]),
    })
    secs = time.perf_counter() - t
    hist = m.history(mod)
    for epoch, (tr, va) in enumerate(zip(hist["train-perplexity"], hist["validation-perplexity"])):
        print(f"epoch {epoch}: train perplexity {tr:.1f}, validation perplexity {va:.1f}, {hist['time'][epoch]:.1f} s")
    # The comparison, on one fixed pass over the validation batches (the iterator reshuffles
    # at every reset and leaves out a bucket's rows that do not fill a batch, so each epoch's
    # figure above covers a slightly different set of verses).
    batches = list(mx.io.reset(valid))
    final = evaluate(mod, batches)
    targets = [int(tok) for b in batches for tok in b["label"][0].asnumpy().ravel() if tok != INVALID]
    unigram = kjv_corpus.unigram_perplexity(c["train"], targets, vocab_size)
    print(f"validation perplexity {final:.1f} after {o['num_epochs']} epochs ({secs:.0f} s); unigram "
          f"baseline {unigram:.1f} (on the same {len(targets)} validation target tokens)")
    return {"perplexity": final, "unigram": unigram, "vocab_size": vocab_size, "seconds": secs}


if __name__ == "__main__":
    main()
