"""mxfn on the LSTM language-model workloads (benchmarks/lstm_models.py): the model of
examples/lstm_bucketing.py with the fused RNN operator (``rnn.fused_rnn_cell``) in a
BucketingModule, trained by forward_backward + update over the shared batches; one-verse
inference latency at batch 1. usage: python lstm.py  (one JSON line per workload)"""

import os
import sys

import mxfn as mx
from mxfn import module as m
from mxfn import rnn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lstm_models as w  # noqa: E402

SYSTEM = "mxfn-" + mx.__version__
emit = w.emitter(SYSTEM)


def sym_gen_fn(vocab_size):
    cell = rnn.fused_rnn_cell(w.NUM_HIDDEN, num_layers=w.NUM_LAYERS, mode="lstm", prefix="lstm_")

    def sym_gen(seq_len):
        embed = mx.sym.embedding(mx.sym.variable("data"), input_dim=vocab_size, output_dim=w.NUM_EMBED,
                                 name="embed")
        tnc, _ = rnn.unroll(cell, seq_len, inputs=mx.sym.swapaxes(embed, dim1=0, dim2=1), layout="TNC",
                            merge_outputs=True)
        hidden = mx.sym.reshape(mx.sym.swapaxes(tnc, dim1=0, dim2=1), shape=(-1, w.NUM_HIDDEN))
        pred = mx.sym.fully_connected(hidden, num_hidden=vocab_size, name="pred")
        label = mx.sym.reshape(mx.sym.variable("softmax_label"), shape=(-1,))
        out = mx.sym.softmax_output(pred, label, use_ignore=True, ignore_label=0, normalization="valid",
                                    name="softmax")
        return out, ["data"], ["softmax_label"]

    return sym_gen


def batch(key, data, label):
    return mx.io.data_batch(data=[mx.nd.array(data)], label=[mx.nd.array(label)], bucket_key=key,
                            provide_data=[("data", data.shape)], provide_label=[("softmax_label", label.shape)])


def main():
    c = w.corpus()
    vocab = len(c["vocab"])
    sym_gen = sym_gen_fn(vocab)
    mx.random.seed(0)
    top = max(w.BUCKETS)
    mod = m.bucketing_module(sym_gen, default_bucket_key=top)
    m.bind(mod, data_shapes=[("data", (w.BATCH, top))], label_shapes=[("softmax_label", (w.BATCH, top))])
    m.init_params(mod, initializer=mx.init.xavier())
    m.init_optimizer(mod, optimizer="sgd",
                     optimizer_params={"learning_rate": w.LEARNING_RATE, "momentum": w.MOMENTUM})
    raw = w.batches(c)
    bs = [batch(*b) for b in raw]

    def step(b):
        m.forward_backward(mod, b)
        m.update(mod)

    emit(w.TRAIN, w.tokens_per_second(step, bs, w.target_tokens(raw)), "tokens/s", vocab=vocab, batches=len(bs),
         target_tokens=w.target_tokens(raw))

    x = w.sentence(c)
    sym, _, _ = sym_gen(w.INFER_LEN)
    pmod = m.module(sym)
    m.bind(pmod, data_shapes=[("data", x.shape)], label_shapes=[("softmax_label", x.shape)], for_training=False)
    m.set_params(pmod, arg_params=m.get_params(mod)[0])
    one = batch(w.INFER_LEN, x, x * 0)

    def infer():
        m.forward(pmod, one, is_train=False)
        m.outputs_merged(pmod)[0].asnumpy()

    emit(w.INFER, w.best_ms(infer, w.INFER_WARM, w.INFER_REPEATS), "ms")


if __name__ == "__main__":
    main()
