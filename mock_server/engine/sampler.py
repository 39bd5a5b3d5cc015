"""One choice of the fake model: which tokens, and why it stopped, sampled from the model's
distribution at each position (model.py) as vLLM samples: penalties, then temperature, top_k,
min_p and top_p, then one draw; greedy takes the likeliest token.

A choice draws one uniform per step (more only where a draw is refused: a bad word, an end
token before min_tokens, a penalty's rejection), from a stream seeded as vLLM seeds a request
(fake_engine.py), so the same seed gives the same tokens whatever max_tokens is: a longer
request continues a shorter one. The distributions are the prompt's and the choice's own
prefix's, and nothing else's.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from mock_server.engine.model import CausalModel, mix

# A top_p at or below the likeliest rank's probability keeps that token alone (model.py's
# profile gives rank 0 one half).
LEAST_TOP = 0.5


@dataclass(frozen=True)
class Cut:
    """What sampling keeps of a position's ranks, as vLLM's top_k, min_p and top_p do, and the
    temperature it samples at."""

    top_k: int = 0  # 0 or below (vLLM's default is -1): off
    min_p: float = 0.0
    top_p: float = 1.0
    temperature: float = 1.0

    @property
    def keeps_all(self) -> bool:
        """Nothing cut and no temperature: the profile itself."""
        return self.top_k <= 0 and self.min_p <= 0 and self.top_p >= 1 and self.temperature == 1


@lru_cache(maxsize=32)
def rank_cdf(cut: Cut, size: int) -> np.ndarray:
    """The cumulative distribution over the ranks `cut` keeps (the same at every position:
    the profile over ranks is fixed), ending at 1."""
    r = np.arange(size, dtype=np.float64)
    logp = -np.log((r + 1) * (r + 2))
    logp[-1] = -np.log(size)
    q = np.exp(
        (logp - logp[0]) / cut.temperature
    )  # in logs: a tiny temperature underflows p**(1/T)
    q /= q.sum()
    kept = size
    if cut.top_k > 0:
        kept = min(kept, cut.top_k)
    if cut.min_p > 0:
        kept = min(kept, int(np.count_nonzero(q >= cut.min_p * q[0])))
    if cut.top_p < 1:
        kept = min(kept, int(np.searchsorted(np.cumsum(q), cut.top_p * (1 - 1e-12))) + 1)
    cdf = np.cumsum(q[: max(kept, 1)])
    return cdf / cdf[-1]


@dataclass(frozen=True)
class Settings:
    """What a choice's tokens depend on, beyond its uniforms."""

    max_tokens: int
    min_tokens: int = 0
    eos_token_id: int | None = None  # None when ignore_eos
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    allowed_token_ids: tuple[int, ...] = ()
    bad_words: frozenset[str] = frozenset()
    greedy: bool = False
    cut: Cut = Cut()
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0


@dataclass(frozen=True)
class Choice:
    token_ids: list[int]
    token_texts: list[str]  # each token's text; their concatenation continues past a stop string
    text: str  # the choice's text (cut at a stop string)
    finish_reason: str  # "stop" | "length"
    stop_reason: str | int | None
    keys: list[int]  # each generated token's position key (model.py), steering included
    classes: list[int]  # ... and the class of the token before it


def _find_stop(text: str, stops: tuple[str, ...], since: int) -> tuple[int, str] | None:
    """The earliest stop string that ends after `since` (only new text can hold a new stop)."""
    found = None
    for stop in stops:
        at = text.find(stop, max(0, since - len(stop) + 1))
        if at >= 0 and (found is None or at < found[0]):
            found = (at, stop)
    return found


class _Step:
    """Draws one position's token under the choice's settings."""

    def __init__(self, model: CausalModel, s: Settings, prompt: list[int]) -> None:
        self.model, self.s = model, s
        texts = model.vocab.texts
        self.banned = (
            frozenset(t for t in range(model.size) if texts[t].strip() in s.bad_words)
            if s.bad_words
            else frozenset()
        )
        allowed = [t for t in s.allowed_token_ids if t not in self.banned]
        self.allowed = allowed or list(s.allowed_token_ids)
        self.allowed_ids = np.asarray(self.allowed, dtype=np.int64)
        # the profile itself (temperature 1, nothing cut): P(rank <= r) = 1 - 1/(r + 2), read
        # back exactly; a cut CDF of few ranks is bisected as a list, a long one by numpy
        self.whole = s.cut.keeps_all
        self.cdf = None if s.greedy or self.whole else rank_cdf(s.cut, model.size)
        self.short = self.cdf.tolist() if self.cdf is not None and len(self.cdf) <= 4096 else None
        self.penalized = (
            s.presence_penalty > 0 or s.frequency_penalty > 0 or s.repetition_penalty > 1
        )
        self.in_prompt = frozenset(prompt) if s.repetition_penalty > 1 else frozenset()
        self.counts: dict[int, int] = {}  # each generated token's count (penalized only)

    def rank(self, u: float) -> int:
        """The rank a uniform draws."""
        if self.whole:
            return min(int(1 / (1 - u)) - 1, self.model.size - 1)
        if self.short is not None:
            return min(bisect.bisect_right(self.short, u), len(self.short) - 1)
        cdf = self.cdf
        assert cdf is not None
        return min(int(cdf.searchsorted(u, "right")), len(cdf) - 1)

    def penalty(self, token: int, rank: int) -> float:
        """How much the penalties lower `token`'s log probability (vLLM's arithmetic on a
        logit, here the model's log probability; only penalties that lower one apply)."""
        s, n = self.s, self.counts.get(token, 0)
        logit = self.model.logprob(rank)
        lowered = 0.0
        if s.repetition_penalty > 1 and (n or token in self.in_prompt):
            lowered += -logit * (s.repetition_penalty - 1)
        if n:
            lowered += s.frequency_penalty * n + s.presence_penalty
        return max(lowered, 0.0)

    def _refused(self, token: int, masked: frozenset[int]) -> bool:
        return token in self.banned or token in masked

    def draw(self, key: int, cls: int, u: Callable[[], float], masked: frozenset[int]) -> int:
        m, s = self.model, self.s
        if self.allowed:
            return self._among_allowed(key, cls, u, masked)
        if s.greedy:
            return self._greedy(key, cls, masked)
        while True:
            rank = self.rank(u())
            token = m.token_at(key, cls, rank)
            if self._refused(token, masked):
                continue
            if self.penalized:
                lowered = self.penalty(token, rank)
                if lowered and u() >= math.exp(-lowered / s.cut.temperature):
                    continue
            return token

    def _greedy(self, key: int, cls: int, masked: frozenset[int]) -> int:
        """The likeliest token after the penalties (ranks scanned until none can beat it)."""
        m = self.model
        best, best_value = None, -math.inf
        for rank in range(m.size):
            value = m.logprob(rank)
            if value <= best_value:
                return best  # type: ignore[return-value]
            token = m.token_at(key, cls, rank)
            if self._refused(token, masked):
                continue
            if self.penalized:
                value -= self.penalty(token, rank)
            if value > best_value:
                best, best_value = token, value
        return best  # type: ignore[return-value]

    def _among_allowed(
        self, key: int, cls: int, u: Callable[[], float], masked: frozenset[int]
    ) -> int:
        """vLLM masks every other token: the allowed ones at their tempered weights. In one
        numpy pass over the list (a client may send the whole vocabulary), the penalties only
        where they apply (the tokens generated or in the prompt)."""
        m, s = self.model, self.s
        tokens = self.allowed_ids
        if masked:
            kept = tokens[~np.isin(tokens, np.fromiter(masked, dtype=np.int64))]
            tokens = kept if len(kept) else tokens
        ranks = m.ranks_of(key, cls, tokens)
        order = np.argsort(ranks, kind="stable")
        ranks, tokens = ranks[order], tokens[order]
        if s.greedy and not self.penalized:
            return int(tokens[0])  # the likeliest: the lowest rank
        values = m.logprobs(ranks)
        if self.penalized and (hit := set(self.counts) | self.in_prompt):
            for i in np.flatnonzero(np.isin(tokens, np.fromiter(hit, dtype=np.int64))):
                values[i] -= self.penalty(int(tokens[i]), int(ranks[i]))
        if s.greedy:
            return int(tokens[int(np.argmax(values))])
        weights = np.exp((values - values.max()) / s.cut.temperature)
        cdf = np.cumsum(weights)
        pick = int(np.searchsorted(cdf, u() * cdf[-1], side="right"))
        return int(tokens[min(pick, len(tokens) - 1)])


def sample_choice(
    model: CausalModel,
    prompt: list[int],
    draw: Callable[[], float],
    s: Settings,
    steer: Callable[[int, int], int] | None = None,
) -> Choice:
    """Run one choice after `prompt`, drawing uniforms in [0, 1) from `draw`; `steer` (steered.py)
    maps a step's position key to the key steering gives it there (the same key where nothing
    reaches it)."""
    table = model.vocab.texts_for(s.skip_special_tokens)
    ends = ([s.eos_token_id] if s.eos_token_id is not None else []) + list(s.stop_token_ids)
    early = frozenset(ends)  # before min_tokens, vLLM masks the end and stop tokens
    step = _Step(model, s, prompt)
    key = model.keys(prompt)[-1]
    previous = prompt[-1] if prompt else None
    ids: list[int] = []
    texts: list[str] = []
    keys: list[int] = []
    classes: list[int] = []
    text = ""
    stops = s.stop
    # the profile's own draw, nothing masked or lowered: the common case, inline; and greedy
    # with nothing masked or lowered, the token at rank 0
    plain = step.whole and not (step.allowed or step.banned or step.penalized or s.greedy)
    first = s.greedy and not (step.allowed or step.banned or step.penalized)
    token_at, class_of, last = model.token_at, model.class_of, model.size - 1
    for i in range(s.max_tokens):
        here = steer(i, key) if steer is not None else key
        cls = class_of(previous)
        may_end = i >= s.min_tokens
        if plain and (may_end or not early):
            rank = int(1 / (1 - draw())) - 1
            token = token_at(here, cls, rank if rank < last else last)
        elif first and (may_end or not early):
            token = token_at(here, cls, 0)
        else:
            token = step.draw(here, cls, draw, frozenset() if may_end else early)
        ids.append(token)
        texts.append(table[token])
        keys.append(here)
        classes.append(cls)
        if step.penalized:
            step.counts[token] = step.counts.get(token, 0) + 1
        if ends and may_end and token in ends:
            # An end token's text stays out of the text, as in vLLM, unless asked for.
            text = "".join(texts if s.include_stop_str_in_output else texts[:-1])
            reason = token if token in s.stop_token_ids else None
            return Choice(ids, texts, text, "stop", reason, keys, classes)
        key, previous = mix(key, token), token
        if not stops:
            continue  # the text is joined at the end
        since = len(text)
        text += texts[-1]
        # As vLLM's detokenizer: stop strings count only once more than min_tokens tokens
        # are out (the stopping token comes after min_tokens, as the end tokens do).
        if i + 1 > s.min_tokens:
            found = _find_stop(text, s.stop, since)
            if found is not None:
                at, stop = found
                cut = at + len(stop) if s.include_stop_str_in_output else at
                return Choice(ids, texts, text[:cut], "stop", stop, keys, classes)
    return Choice(ids, texts, "".join(texts), "length", None, keys, classes)
