"""mx.rnn.encode_sentences: token sentences to integer ids and the vocabulary, as MXNet 1.9.1's
``mx.rnn.encode_sentences``."""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

from .._errors import MXFNError
from .._opts import documented, opt, parse_opts

ENCODE_OPTS = {
    "vocab": opt(None, Mapping, "an existing vocabulary token -> id (not modified); None = build one"),
    "invalid_label": opt(-1, int, "id of invalid_key (end of sentence) in a new vocabulary; never given "
                         "to another token"),
    "invalid_key": opt("\n", None, "the token for invalid_label in a new vocabulary"),
    "start_label": opt(0, int, "the first id handed out"),
    "unknown_token": opt(None, None, "with a vocabulary: tokens not in it map to this token's id (added "
                         "with the next free id if absent); None = an unknown token is an error"),
}


@documented(ENCODE_OPTS)
def encode_sentences(sentences: Iterable[Iterable[Hashable]], opts: Mapping[str, Any] | None = None, /,
                     **kw: Any) -> tuple[list[list[int]], dict[Any, int]]:
    """Encode token sentences as ids, building (or extending) the vocabulary (MXNet's
    ``mx.rnn.encode_sentences``).

    Without ``vocab``, the vocabulary starts as ``{invalid_key: invalid_label}`` and each new
    token gets the next id from ``start_label``, skipping ``invalid_label``. With ``vocab``,
    every token must be in it unless ``unknown_token`` is given.

    ``unknown_token`` departs from MXNet 1.9.1, whose version gives each unknown word a new
    id (counting again from ``start_label``, over ids the vocabulary already uses) and rebinds
    the unknown token each time: here they all share one id, and ``vocab`` is copied, never
    modified.

    %OPTIONS%

    Returns:
        ``(encoded, vocab)``: a list of lists of ints and the vocabulary (a new dict).

    Example:
        >>> encode_sentences([["a", "b", "c"], ["b", "d"]], invalid_label=0, start_label=0)
        ([[1, 2, 3], [2, 4]], {'\\n': 0, 'a': 1, 'b': 2, 'c': 3, 'd': 4})
    """
    fname = "rnn.encode_sentences"
    o = parse_opts(fname, ENCODE_OPTS, opts, kw)
    invalid, unknown = o["invalid_label"], o["unknown_token"]
    if o["vocab"] is None:
        vocab: dict[Any, int] = {o["invalid_key"]: invalid}
        new_vocab = True
        idx = o["start_label"]
    else:
        vocab = dict(o["vocab"])
        new_vocab = False
        used = [v for v in vocab.values() if isinstance(v, numbers.Integral)]
        idx = max([o["start_label"], *(v + 1 for v in used)])
    if isinstance(sentences, (str, bytes)):
        raise TypeError(f'{fname}: "sentences" expects a list of token lists, got a {type(sentences).__name__}')
    res = []
    for i, sent in enumerate(sentences):
        if isinstance(sent, (str, bytes)) or not isinstance(sent, Iterable):
            raise TypeError(f'{fname}: sentence {i} must be a list of tokens, got {type(sent).__name__} {sent!r}')
        coded = []
        for word in sent:
            if word not in vocab:
                if not new_vocab and unknown is None:
                    raise MXFNError(f"{fname}: unknown token {word!r} in sentence {i}: it is not in vocab "
                                    "(give unknown_token to map such tokens to one id)")
                if unknown is not None and not new_vocab:
                    word = unknown
                if word not in vocab:
                    if idx == invalid:
                        idx += 1
                    vocab[word] = idx
                    idx += 1
            coded.append(vocab[word])
        res.append(coded)
    return res, vocab
