"""The examples that train for minutes, run small: examples/lstm_bucketing.py and its corpus
module examples/kjv_corpus.py (the MNIST examples run in test_docs.py's excerpts and by hand)."""

import math
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))
import kjv_corpus  # noqa: E402
import lstm_bucketing  # noqa: E402

SMALL = ["--max-sentences", "1500", "--num-epochs", "1", "--num-hidden", "32", "--num-embed", "32",
         "--batch-size", "16", "--disp-batches", "1000", "--min-count", "3"]


@pytest.mark.parametrize("cell", ["fused", "lstm"])
def test_lstm_bucketing_trains_a_little(cell, capsys):
    res = lstm_bucketing.main([*SMALL, "--cell", cell])
    assert math.isfinite(res["perplexity"]) and 1 < res["perplexity"] < res["vocab_size"]
    assert math.isfinite(res["unigram"]) and 1 < res["unigram"] < res["vocab_size"]
    out = capsys.readouterr().out
    assert "epoch 0: train perplexity" in out and "unigram baseline" in out


def test_the_corpus_is_tokenised_split_and_encoded():
    assert kjv_corpus.tokenize("And God said, Let there be light: and the LORD'S word.") == [
        "and", "god", "said", ",", "let", "there", "be", "light", ":", "and", "the", "lord's", "word", "."]
    c = kjv_corpus.corpus({"max_sentences": 400, "min_count": 3})
    assert (len(c["train"]), len(c["valid"])) == (380, 20)
    vocab = c["vocab"]
    assert vocab["<pad>"] == 0 and vocab["<unk>"] == 1 and sorted(vocab.values()) == list(range(len(vocab)))
    ids = [t for s in c["train"] + c["valid"] for t in s]
    assert 0 not in ids and 1 in ids and max(ids) < len(vocab)
    # The first verse, word by word.
    inv = {i: w for w, i in vocab.items()}
    assert [inv[t] for t in c["train"][0]][:4] == ["in", "the", "beginning", "god"]
    with pytest.raises(ValueError, match="unknown options"):
        kjv_corpus.corpus({"max_sentence": 3})


def test_the_unigram_baseline_is_the_smoothed_training_frequencies():
    train = [[5, 2, 2, 3], [7, 2]]  # targets (all but each first token): 2, 2, 3, 2
    p = kjv_corpus.unigram_perplexity(train, [2, 3], vocab_size=5)  # 4 targets + 4 smoothing counts
    assert p == pytest.approx(math.exp(-(math.log(4 / 8) + math.log(2 / 8)) / 2))
    assert kjv_corpus.fits([[1] * 61, [1] * 60, []]) == [[1] * 60]
    assert kjv_corpus.target_tokens([[1, 2, 3], [4], []]) == 2
