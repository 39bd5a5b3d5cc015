"""The model's real vocabulary, as the fake engine uses it.

Built once per model at start (about 0.1 s): the text of every token, which
ids are special, and pools of ordinary word tokens so that generated text
reads like words and sentences rather than random byte pieces.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from contract import ModelInfo
from contract.tokens import encode, token_bytes
from mock_server.engine.words import WORDS

_SPECIAL = re.compile(rb"<\|[a-z0-9_]+\|>")


@dataclass(frozen=True)
class Vocab:
    texts: tuple[str, ...]  # each token decoded alone (invalid UTF-8 replaced)
    special: frozenset[int]  # ids written like <|...|> (BOS, EOS, reserved)
    lower: np.ndarray  # " word"
    capital: np.ndarray  # " Word" (after a full stop)
    bare_capital: np.ndarray  # "Word" (after a line break)
    period: int
    comma: int
    newline: int

    def texts_for(self, skip_special: bool) -> tuple[str, ...]:
        """Every token's text as the choice's text writes it: a special token is empty when
        special tokens are skipped (logprobs write it whole: `texts`)."""
        return self._skipped if skip_special else self.texts

    @cached_property
    def _skipped(self) -> tuple[str, ...]:
        special = self.special
        return tuple("" if i in special else t for i, t in enumerate(self.texts))

    @cached_property
    def words(self) -> np.ndarray:
        """Every ordinary word token (the pool for alternatives in logprobs)."""
        return np.concatenate([self.lower, self.capital])


def _single_tokens(model: ModelInfo, texts: list[str]) -> np.ndarray:
    ids = []
    for text in texts:
        tokens = encode(model, text, add_special_tokens=False)
        if len(tokens) == 1:
            ids.append(tokens[0])
    return np.array(sorted(set(ids)), dtype=np.int64)


def _one(model: ModelInfo, text: str) -> int:
    (token,) = encode(model, text, add_special_tokens=False)
    return token


_BUILT: dict[str, Vocab] = {}


def vocab(model: ModelInfo) -> Vocab:
    """The model's Vocab, built once per process (keyed by the model's hf_id, so a
    deployment's other max_model_len does not build it again)."""
    built = _BUILT.get(model.hf_id)
    if built is None:
        built = _BUILT.setdefault(model.hf_id, _build(model))
        built.texts_for(True)  # the tables at start, not in the first request
    return built


def _build(model: ModelInfo) -> Vocab:
    raw = [token_bytes(model, i) for i in range(model.vocab_size)]
    return Vocab(
        texts=tuple(b.decode("utf-8", "replace") for b in raw),
        special=frozenset(i for i, b in enumerate(raw) if _SPECIAL.fullmatch(b)),
        lower=_single_tokens(model, [" " + w for w in WORDS]),
        capital=_single_tokens(model, [" " + w.capitalize() for w in WORDS]),
        bare_capital=_single_tokens(model, [w.capitalize() for w in WORDS]),
        period=_one(model, "."),
        comma=_one(model, ","),
        newline=_one(model, "\n"),
    )
