"""PyTorch on the LSTM language-model workloads (benchmarks/lstm_models.py), measured as
benchmarks/lstm.py measures mxfn: nn.Embedding → nn.LSTM (2 layers, batch_first) → nn.Linear →
cross-entropy with ignore_index=0 (padding), SGD with momentum, over the shared batches, two
threads; one-verse inference latency at batch 1 (forward to the softmax). Run in the PyTorch
peer venv. usage: torch_lstm.py"""

import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import lstm_models as w  # noqa: E402

SYSTEM = "torch-" + torch.__version__.split("+")[0]
emit = w.emitter(SYSTEM)


class LM(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, w.NUM_EMBED)
        self.lstm = nn.LSTM(w.NUM_EMBED, w.NUM_HIDDEN, num_layers=w.NUM_LAYERS, batch_first=True)
        self.pred = nn.Linear(w.NUM_HIDDEN, vocab)

    def forward(self, x):
        out, _ = self.lstm(self.embed(x))
        return self.pred(out.reshape(-1, w.NUM_HIDDEN))


def main():
    torch.set_num_threads(2)
    torch.manual_seed(0)
    c = w.corpus()
    vocab = len(c["vocab"])
    model = LM(vocab)
    opt = torch.optim.SGD(model.parameters(), lr=w.LEARNING_RATE, momentum=w.MOMENTUM)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0)
    raw = w.batches(c)
    bs = [(torch.from_numpy(d).long(), torch.from_numpy(lab).long().reshape(-1)) for _, d, lab in raw]

    def step(b):
        x, y = b
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()

    model.train()
    emit(w.TRAIN, w.tokens_per_second(step, bs, w.target_tokens(raw)), "tokens/s", vocab=vocab,
         batches=len(bs), target_tokens=w.target_tokens(raw))

    x = torch.from_numpy(w.sentence(c)).long()
    model.eval()

    def infer():
        with torch.no_grad():
            torch.softmax(model(x), dim=-1).numpy()

    emit(w.INFER, w.best_ms(infer, w.INFER_WARM, w.INFER_REPEATS), "ms")


if __name__ == "__main__":
    main()
