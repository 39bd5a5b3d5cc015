"""One choice of the fake model: which tokens, and why it stopped.

Tokens come from a stream of uniforms (three per step), so the same seed gives
the same tokens whatever max_tokens is: a longer request continues a shorter
one. Ending is a separate draw per step, so min_tokens, ignore_eos and
stop_token_ids decide only where the text stops, never what it says.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mock_server.vocab import Vocab


@dataclass(frozen=True)
class Settings:
    """What a choice's tokens depend on, beyond its uniforms."""
    max_tokens: int
    min_tokens: int = 0
    eos_token_id: int | None = None          # None when ignore_eos
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    allowed_token_ids: tuple[int, ...] = ()
    bad_words: frozenset[str] = frozenset()
    eos_rate: float = 1 / 64


@dataclass(frozen=True)
class Choice:
    token_ids: list[int]
    token_texts: list[str]      # each token's text; their concatenation continues past a stop string
    text: str                   # the choice's text (cut at a stop string)
    finish_reason: str          # "stop" | "length"
    stop_reason: str | int | None


class _Pools:
    """The word pools with bad words removed, or the allowed tokens alone (as lists:
    indexing a list is cheaper than a numpy array, and gives the same ids)."""

    def __init__(self, vocab: Vocab, bad_words: frozenset[str], allowed_token_ids: tuple[int, ...]) -> None:
        def keep(pool: np.ndarray) -> list[int]:
            if not bad_words:
                return pool.tolist()
            kept = [t for t in pool.tolist() if vocab.texts[t].strip() not in bad_words]
            return kept if kept else pool.tolist()
        # vLLM bans a bad word's token even where allowed_token_ids allows it
        allowed = [t for t in allowed_token_ids if vocab.texts[t].strip() not in bad_words]
        self.allowed = (allowed or list(allowed_token_ids)) if allowed_token_ids else None
        self.lower, self.capital, self.bare = keep(vocab.lower), keep(vocab.capital), keep(vocab.bare_capital)


_DEFAULT_POOLS: dict[int, tuple[Vocab, _Pools]] = {}


def _pools(vocab: Vocab, s: Settings) -> _Pools:
    """The pools for `s`; those without bad words or allowed tokens are built once per vocab."""
    if s.bad_words or s.allowed_token_ids:
        return _Pools(vocab, s.bad_words, s.allowed_token_ids)
    cached = _DEFAULT_POOLS.get(id(vocab))
    if cached is None or cached[0] is not vocab:
        cached = _DEFAULT_POOLS[id(vocab)] = (vocab, _Pools(vocab, frozenset(), ()))
    return cached[1]


def _pick(pool: list[int], u: float) -> int:
    n = len(pool)
    return pool[min(int(u * n), n - 1)]


def _next_word(vocab: Vocab, pools: _Pools, prev: int | None, u: float) -> int:
    """Words with now and then a comma, a full stop, or a line break after a full stop."""
    if pools.allowed is not None:
        return _pick(pools.allowed, u)
    if prev == vocab.newline:
        return _pick(pools.bare, u)
    if prev == vocab.period:
        return vocab.newline if u < 0.15 else _pick(pools.capital, (u - 0.15) / 0.85)
    if prev is None or prev == vocab.comma:
        return _pick(pools.lower, u)
    if u < 0.07:
        return vocab.period
    if u < 0.12:
        return vocab.comma
    return _pick(pools.lower, (u - 0.12) / 0.88)


def _find_stop(text: str, stops: tuple[str, ...], since: int) -> tuple[int, str] | None:
    """The earliest stop string that ends after `since` (only new text can hold a new stop)."""
    found = None
    for stop in stops:
        at = text.find(stop, max(0, since - len(stop) + 1))
        if at >= 0 and (found is None or at < found[0]):
            found = (at, stop)
    return found


def sample_choice(vocab: Vocab, draw: Callable[[], float], s: Settings,
                  steer: Callable[[int, float], float] | None = None) -> Choice:
    """Run one choice, drawing three uniforms in [0, 1) per step from `draw`
    (the token, whether it ends here, which end token); `steer` (steered.py) may
    replace a step's token uniform, and a replaced token is the vector's, an end token's
    chance included (its push moves every logit, the end tokens' too)."""
    pools = _pools(vocab, s)
    table = vocab.texts_for(s.skip_special_tokens)
    ends = ([s.eos_token_id] if s.eos_token_id is not None else []) + list(s.stop_token_ids)
    # The end tokens the model may draw: with allowed_token_ids, only those it allows (vLLM
    # masks every other token, end tokens included). Any end token still ends the choice.
    drawn = [t for t in ends if t in s.allowed_token_ids] if s.allowed_token_ids else ends
    ids: list[int] = []
    texts: list[str] = []
    text = ""
    prev: int | None = None
    eos_rate, min_tokens, stops = s.eos_rate, s.min_tokens, s.stop
    for step in range(s.max_tokens):
        u_token, u_end, u_which = draw(), draw(), draw()
        steered = False
        if steer is not None:
            u = steer(step, u_token)
            steered, u_token = u != u_token, u
        may_end = step >= min_tokens
        if drawn and may_end and u_end < eos_rate and not steered:
            token = drawn[min(int(u_which * len(drawn)), len(drawn) - 1)]
        else:
            token = _next_word(vocab, pools, prev, u_token)
        if ends and may_end and token in ends:
            # An end token's text stays out of the text, as in vLLM, unless asked for.
            ids.append(token)
            texts.append(table[token])
            text = "".join(texts if s.include_stop_str_in_output else texts[:-1])
            return Choice(ids, texts, text, "stop", token if token in s.stop_token_ids else None)
        ids.append(token)
        texts.append(table[token])
        prev = token
        if not stops:
            continue   # the text is joined at the end
        since = len(text)
        text += texts[-1]
        # As vLLM's detokenizer: stop strings count only once more than min_tokens tokens
        # are out (the stopping token comes after min_tokens, as the end tokens do).
        if step + 1 > min_tokens:
            found = _find_stop(text, s.stop, since)
            if found is not None:
                at, stop = found
                cut = at + len(stop) if s.include_stop_str_in_output else at
                return Choice(ids, texts, text[:cut], "stop", stop)
    return Choice(ids, texts, "".join(texts), "length", None)
