"""The King James Version as a word-level language-model corpus (data/kjv/kjv.txt.gz), shared
by examples/lstm_bucketing.py and the LSTM benchmark (benchmarks/lstm.py and its peers, which
run in other venvs: this module needs only the standard library).

Verses are tokenised into lowercased words and punctuation marks; every ``holdout``-th verse is
held out for validation; the vocabulary is the training words seen at least ``min_count`` times,
every other word maps to ``<unk>``. Id 0 is the padding (the bucket iterator's invalid label,
ignored by the loss and the perplexity), id 1 is ``<unk>``, then the words by falling count.

    >>> c = corpus({"max_sentences": 200})
    >>> len(c["train"]), len(c["valid"]), c["vocab"]["<pad>"], c["vocab"]["<unk>"]
    (190, 10, 0, 1)
"""

from __future__ import annotations

import collections
import gzip
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
KJV = os.path.join(HERE, "..", "data", "kjv", "kjv.txt.gz")
PAD, UNK = "<pad>", "<unk>"
BUCKETS = (10, 20, 30, 40, 60)

# Words keep inner apostrophes ("lord's"); every other non-space character is its own token.
_TOKEN = re.compile(r"[a-z]+(?:'[a-z]+)*|[^\w\s]")

DEFAULTS: Mapping[str, Any] = {
    "path": KJV,             # the gzipped corpus: one verse a line, "citation<TAB>text"
    "max_sentences": 10000,  # the first N verses only (None: all 31,103)
    "holdout": 20,           # every holdout-th verse (the 20th, 40th, ...) goes to validation
    "min_count": 5,          # training words seen fewer times become <unk>
}


def tokenize(text: str) -> list[str]:
    """Lowercased words and punctuation marks, in order."""
    return _TOKEN.findall(text.lower())


def verses(path: str = KJV, max_sentences: int | None = None) -> list[list[str]]:
    """The tokenised verses of the corpus file, the first ``max_sentences`` of them."""
    out: list[list[str]] = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if max_sentences is not None and len(out) >= max_sentences:
                break
            _, _, text = line.rstrip("\n").partition("\t")
            out.append(tokenize(text))
    return out


def build_vocab(sentences: Sequence[Sequence[str]], min_count: int) -> dict[str, int]:
    """``<pad>`` → 0, ``<unk>`` → 1, then the words seen ``min_count`` times or more, most
    frequent first (ties alphabetical, so the ids are the same on every run)."""
    counts = collections.Counter(w for s in sentences for w in s)
    kept = sorted((w for w, n in counts.items() if n >= min_count), key=lambda w: (-counts[w], w))
    return {PAD: 0, UNK: 1, **{w: i + 2 for i, w in enumerate(kept)}}


def encode(sentences: Sequence[Sequence[str]], vocab: Mapping[str, int]) -> list[list[int]]:
    """Token ids, unknown words as ``<unk>``."""
    unk = vocab[UNK]
    return [[vocab.get(w, unk) for w in s] for s in sentences]


def corpus(opts: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The split, encoded corpus: a map with ``train`` and ``valid`` (lists of id lists) and
    ``vocab`` (word → id). Options: see ``DEFAULTS``."""
    o = {**DEFAULTS, **(opts or {})}
    unknown = set(o) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"kjv_corpus.corpus: unknown options {sorted(unknown)}; known {sorted(DEFAULTS)}")
    holdout = int(o["holdout"])
    if holdout < 2:
        raise ValueError(f'kjv_corpus.corpus: option "holdout" expects an int >= 2, got {o["holdout"]!r}')
    vs = verses(o["path"], o["max_sentences"])
    train = [s for i, s in enumerate(vs) if (i + 1) % holdout != 0]
    valid = [s for i, s in enumerate(vs) if (i + 1) % holdout == 0]
    vocab = build_vocab(train, int(o["min_count"]))
    return {"train": encode(train, vocab), "valid": encode(valid, vocab), "vocab": vocab}


def fits(sentences: Sequence[Sequence[int]], buckets: Sequence[int] = BUCKETS) -> list[list[int]]:
    """The non-empty sentences no longer than the largest bucket (the ones the bucket iterator
    keeps; it discards the others)."""
    top = max(buckets)
    return [list(s) for s in sentences if 0 < len(s) <= top]


def unigram_perplexity(train: Sequence[Sequence[int]], targets: Iterable[int], vocab_size: int) -> float:
    """Perplexity on ``targets`` (token ids) of the unigram model of ``train`` (add-one smoothed
    over the vocabulary but the padding). The model counts the tokens a language model predicts:
    every token but each sentence's first, as the bucket iterator's labels are the data shifted
    by one."""
    counts = collections.Counter(t for s in train for t in s[1:])
    total = sum(counts.values()) + vocab_size - 1
    nll, n = 0.0, 0
    for t in targets:
        nll -= math.log((counts[t] + 1) / total)
        n += 1
    if n == 0:
        raise ValueError("kjv_corpus.unigram_perplexity: no targets")
    return math.exp(nll / n)


def target_tokens(sentences: Sequence[Sequence[int]]) -> int:
    """How many tokens a language model predicts in ``sentences`` (each but the first)."""
    return sum(max(len(s) - 1, 0) for s in sentences)
