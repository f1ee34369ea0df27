"""MXNet 1.9.1 on the LSTM language-model workloads (benchmarks/lstm_models.py), measured as
benchmarks/lstm.py measures mxfn: ``mx.rnn.FusedRNNCell`` (the RNN operator, MKLDNN's on CPU)
in a BucketingModule, forward_backward + update over the shared batches; one-verse inference
latency at batch 1. Run in the MXNet peer venv. usage: mxnet_lstm.py"""

import logging
import os
import sys
import warnings

import mxnet as mx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import lstm_models as w  # noqa: E402

logging.disable(logging.WARNING)
warnings.filterwarnings("ignore")
SYSTEM = "mxnet-" + mx.__version__
emit = w.emitter(SYSTEM)


def sym_gen_fn(vocab_size):
    cell = mx.rnn.FusedRNNCell(w.NUM_HIDDEN, num_layers=w.NUM_LAYERS, mode="lstm", prefix="lstm_")

    def sym_gen(seq_len):
        embed = mx.sym.Embedding(mx.sym.Variable("data"), input_dim=vocab_size, output_dim=w.NUM_EMBED,
                                 name="embed")
        cell.reset()
        tnc, _ = cell.unroll(seq_len, inputs=mx.sym.swapaxes(embed, dim1=0, dim2=1), layout="TNC",
                             merge_outputs=True)
        hidden = mx.sym.Reshape(mx.sym.swapaxes(tnc, dim1=0, dim2=1), shape=(-1, w.NUM_HIDDEN))
        pred = mx.sym.FullyConnected(hidden, num_hidden=vocab_size, name="pred")
        label = mx.sym.Reshape(mx.sym.Variable("softmax_label"), shape=(-1,))
        out = mx.sym.SoftmaxOutput(pred, label, use_ignore=True, ignore_label=0, normalization="valid",
                                   name="softmax")
        return out, ("data",), ("softmax_label",)

    return sym_gen


def batch(key, data, label):
    return mx.io.DataBatch(data=[mx.nd.array(data)], label=[mx.nd.array(label)], bucket_key=key,
                           provide_data=[mx.io.DataDesc("data", data.shape)],
                           provide_label=[mx.io.DataDesc("softmax_label", label.shape)])


def main():
    c = w.corpus()
    vocab = len(c["vocab"])
    sym_gen = sym_gen_fn(vocab)
    mx.random.seed(0)
    top = max(w.BUCKETS)
    mod = mx.mod.BucketingModule(sym_gen, default_bucket_key=top, context=mx.cpu())
    mod.bind(data_shapes=[("data", (w.BATCH, top))], label_shapes=[("softmax_label", (w.BATCH, top))])
    mod.init_params(initializer=mx.init.Xavier())
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": w.LEARNING_RATE, "momentum": w.MOMENTUM})
    raw = w.batches(c)
    bs = [batch(*b) for b in raw]

    def step(b):
        mod.forward_backward(b)
        mod.update()

    emit(w.TRAIN, w.tokens_per_second(step, bs, w.target_tokens(raw), sync=mx.nd.waitall), "tokens/s",
         vocab=vocab, batches=len(bs), target_tokens=w.target_tokens(raw))

    x = w.sentence(c)
    sym, _, _ = sym_gen(w.INFER_LEN)
    pmod = mx.mod.Module(sym, context=mx.cpu())
    pmod.bind(data_shapes=[("data", x.shape)], label_shapes=[("softmax_label", x.shape)], for_training=False)
    pmod.set_params(*mod.get_params())
    one = batch(w.INFER_LEN, x, x * 0)

    def infer():
        pmod.forward(one, is_train=False)
        pmod.get_outputs()[0].asnumpy()

    emit(w.INFER, w.best_ms(infer, w.INFER_WARM, w.INFER_REPEATS), "ms")


if __name__ == "__main__":
    main()
