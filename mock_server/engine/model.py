"""The fake engine's one model: a next-token distribution for every prefix, over the whole
vocabulary, in which any token's rank and log probability can be read without listing the rest.

At every position the distribution has one fixed profile over ranks: rank r (0 the likeliest)
has probability 1/((r+1)(r+2)), the last rank the remainder 1/V, so the whole sums to one
exactly. Which token holds which rank is a permutation keyed by the prefix: a 64-bit rolling hash
of the model and the prefix's token ids (a position's key is its predecessor's mixed with one
token), so a prompt's distributions never depend on what follows it, and the same prefix has the
same distribution in an echoed prompt, in prompt_logprobs and in a generation.

So that the likeliest text reads as words and sentences, the permutation follows the class of
the previous token (a word, a full stop, a line break, a comma, nothing): each class has a pool
of word tokens at the head of the ranks, permuted affinely by the key, and a few fixed slots (a
full stop at rank 2 and a comma at rank 3 after a word, a line break at rank 1 after a full
stop, the end of text at the rank whose probability is nearest the mock's end-of-text rate);
every other token keeps its own place in the tail.

Everything that decides is an integer; a log probability is -ln((r+1)(r+2)) computed by the
decimal module (correctly rounded on every machine), then rounded to float32 and widened, as
vLLM writes its float32 values: the same request gives the same bytes on every machine.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from decimal import Context as DecimalContext
from decimal import Decimal
from functools import lru_cache

import numpy as np

from contract import ModelInfo
from mock_server.engine.vocab import Vocab

MASK64 = (1 << 64) - 1
START, WORD, AFTER_PERIOD, AFTER_NEWLINE, AFTER_COMMA = range(5)


def mix(key: int, token: int) -> int:
    """The key of the position after one more token (splitmix64's finalizer over both)."""
    z = (key ^ ((token + 1) * 0x9E3779B97F4A7C15)) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


_LN = DecimalContext(prec=40)


@lru_cache(maxsize=4096)
def logprob(rank: int, size: int) -> float:
    """The log probability of rank `rank` (0-based) of `size`, as vLLM writes it (float32)."""
    denominator = size if rank == size - 1 else (rank + 1) * (rank + 2)
    return float(np.float32(float(-Decimal(denominator).ln(_LN))))


def probability(rank: int, size: int) -> float:
    return 1 / size if rank == size - 1 else 1 / ((rank + 1) * (rank + 2))


@dataclass(frozen=True)
class _Class:
    """One class's order of the vocabulary: `order[r]` the token at base rank r, `index` its
    inverse; base ranks below `head` that are not `fixed` hold the pool, permuted by the key."""

    order: np.ndarray  # int64[V]
    index: np.ndarray  # int64[V]
    head: int
    fixed: frozenset[int]
    free: tuple[int, ...]  # the pool's base ranks, ascending
    free_at: dict[int, int]  # base rank -> its place in `free`
    units: tuple[int, ...]  # the multipliers coprime with len(free): the affine maps' own
    # the same as arrays, for many tokens at once (ranks_of): `free`, and each base rank's place
    # in it (-1 where a base rank is not the pool's)
    free_array: np.ndarray
    place: np.ndarray


def _class(size: int, pool: list[int], slots: dict[int, int]) -> _Class:
    """`slots`: rank -> token (fixed); the pool fills the other ranks of the head in order."""
    slots = {r: t for r, t in slots.items() if t is not None}
    head_tokens = [t for t in dict.fromkeys(pool) if t not in slots.values()]
    head = len(head_tokens) + len(slots)
    order = np.empty(size, dtype=np.int64)
    placed = set(slots.values()) | set(head_tokens)
    free = [r for r in range(head) if r not in slots]
    for r, t in slots.items():
        order[r] = t
    order[free] = head_tokens
    tail = np.setdiff1d(np.arange(size, dtype=np.int64), np.fromiter(placed, dtype=np.int64))
    order[head:] = tail
    index = np.empty(size, dtype=np.int64)
    index[order] = np.arange(size, dtype=np.int64)
    n = len(free)
    units = tuple(a for a in range(1, max(n, 2)) if math.gcd(a, n) == 1) or (1,)
    place = np.full(size, -1, dtype=np.int64)
    place[free] = np.arange(n, dtype=np.int64)
    return _Class(
        order,
        index,
        head,
        frozenset(slots),
        tuple(free),
        {r: i for i, r in enumerate(free)},
        units,
        np.asarray(free, dtype=np.int64),
        place,
    )


def eos_rank(size: int, rate: float) -> int | None:
    """The rank whose probability is nearest `rate` (None: the end of text has no slot)."""
    if rate <= 0:
        return None
    guess = max(0, round((-3 + math.sqrt(1 + 4 / rate)) / 2))
    near = [r for r in (guess - 1, guess, guess + 1) if 0 <= r < size - 1]
    return min(near, key=lambda r: abs(probability(r, size) - rate))


class CausalModel:
    """One model's distributions (build once per model and end-of-text rate: vocab.py's tables)."""

    def __init__(self, model: ModelInfo, vocab: Vocab, eos_rate: float) -> None:
        self.size = model.vocab_size
        self.vocab = vocab
        seed = hashlib.sha256(f"causal:{model.hf_id}".encode()).digest()
        self.start = int.from_bytes(seed[:8], "little")
        eos = eos_rank(self.size, eos_rate)
        end = {eos: model.eos_token_ids[0]} if eos is not None else {}
        lower, capital = vocab.lower.tolist(), vocab.capital.tolist()
        bare = vocab.bare_capital.tolist()
        word_slots = {2: vocab.period, 3: vocab.comma, **end}
        self.classes = {
            START: _class(self.size, lower, dict(end)),
            WORD: _class(self.size, lower, word_slots),
            AFTER_PERIOD: _class(self.size, capital, {1: vocab.newline, **end}),
            AFTER_NEWLINE: _class(self.size, bare, dict(end)),
            AFTER_COMMA: _class(self.size, lower, dict(end)),
        }

        self._after: dict[int | None, int] = {
            None: START,
            **dict.fromkeys(vocab.special, START),
            vocab.period: AFTER_PERIOD,
            vocab.newline: AFTER_NEWLINE,
            vocab.comma: AFTER_COMMA,
        }

    # -- the context ----------------------------------------------------------------------
    def class_of(self, previous: int | None) -> int:
        return self._after.get(previous, WORD)

    def keys(self, tokens: list[int]) -> list[int]:
        """The key of each position 0..len(tokens): position i's is that of tokens[:i]."""
        out = [self.start]
        key = self.start
        for t in tokens:
            key = mix(key, t)
            out.append(key)
        return out

    # -- one position ---------------------------------------------------------------------
    def token_at(self, key: int, cls: int, rank: int) -> int:
        """The token of rank `rank` (0-based) at the position of `key`, after a token of `cls`:
        the pool's ranks map by rank -> a * rank + b (mod the pool), a and b from the key."""
        c = self.classes[cls]
        if rank >= c.head or rank in c.fixed:
            return int(c.order[rank])
        n, units = len(c.free), c.units
        a, b = units[key % len(units)], (key >> 32) % n
        return int(c.order[c.free[(a * c.free_at[rank] + b) % n]])

    def rank_of(self, key: int, cls: int, token: int) -> int:
        """The rank (0-based) of `token` at the position of `key`, after a token of `cls`."""
        c = self.classes[cls]
        base = int(c.index[token])
        if base >= c.head or base in c.fixed:
            return base
        n, units = len(c.free), c.units
        a, b = units[key % len(units)], (key >> 32) % n
        return c.free[(pow(a, -1, n) * (c.free_at[base] - b)) % n]

    def ranks_of(self, key: int, cls: int, tokens: np.ndarray) -> np.ndarray:
        """rank_of for each of `tokens` (int64), in one pass over them."""
        c = self.classes[cls]
        ranks = c.index[tokens]
        where = c.place[ranks]
        pooled = where >= 0
        n, units = len(c.free), c.units
        a, b = units[key % len(units)], (key >> 32) % n
        ranks[pooled] = c.free_array[(pow(a, -1, n) * (where[pooled] - b)) % n]
        return ranks

    def logprob(self, rank: int) -> float:
        return logprob(rank, self.size)

    def logprobs(self, ranks: np.ndarray) -> np.ndarray:
        """logprob of each rank (float64 of the float32 values, as logprob gives them; computed
        in float64, which rounds to the same float32 but within an ulp)."""
        r = ranks.astype(np.float64)
        values = -np.log((r + 1) * (r + 2))
        values[ranks == self.size - 1] = -math.log(self.size)
        return values.astype(np.float32).astype(np.float64)


def row(
    model: CausalModel, key: int, cls: int, token: int, top: int
) -> tuple[float, int, list[tuple[int, float, int]]]:
    """`token`'s log probability and rank (1-based) at the position, and the `top` likeliest
    others as (token, log probability, rank), best first."""
    rank = model.rank_of(key, cls, token)
    alternatives = [
        (model.token_at(key, cls, r), model.logprob(r), r + 1) for r in range(top) if r != rank
    ]
    return model.logprob(rank), rank + 1, alternatives
