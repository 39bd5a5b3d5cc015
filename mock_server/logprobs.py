"""Deterministic log probabilities for the fake engine.

For each position the engine draws one row of uniforms (ROW wide) and turns it
into a descending list of log probabilities, the rank of the actual token and
alternative tokens from the word pool. The same row always gives the same
answer, whatever `logprobs` asks for, so the sampled token's logprob does not
change with the number of alternatives shown.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from contract import Spec
from mock_server.vocab import Vocab


def max_top(api: Spec) -> int:
    """The most alternatives a request may ask for (`s`'s logprobs / prompt_logprobs maxima)."""
    props = api.schema("CompletionRequest")["properties"]
    return max(props["logprobs"]["maximum"], props["prompt_logprobs"]["maximum"])


MAX_RANK = 5          # a sampled token is at most this far down the list
LEAST_TOP = 0.2       # the likeliest token's probability is at least this: top_p up to it keeps one token


def row_width(top: int) -> int:
    """A row's uniforms when up to `top` alternatives are shown (max_top): the rank, the
    first value, one gap per further rank, one pick per alternative."""
    return 2 + (top + MAX_RANK) + top


@dataclass(frozen=True)
class Cut:
    """What sampling keeps of a row, as vLLM's top_k, min_p and top_p do (a sampled token's
    rank is at most the ranks they leave; 1: greedy), and the temperature it samples at."""
    top_k: int = 0          # 0: off
    min_p: float = 0.0
    top_p: float = 1.0
    temperature: float = 1.0

    def caps(self, values: np.ndarray) -> np.ndarray:
        """Each row's most ranks (rows of log probabilities, best first)."""
        caps = np.full(len(values), MAX_RANK)
        if self.top_k > 0:
            caps = np.minimum(caps, self.top_k)
        if self.min_p > 0:   # vLLM applies min_p to the tempered probabilities
            kept = values >= values[:, :1] + self.temperature * np.log(self.min_p)
            caps = np.minimum(caps, kept.sum(axis=1))
        if self.top_p < 1:
            filled = np.cumsum(np.exp(values[:, :MAX_RANK]), axis=1) >= self.top_p
            caps = np.minimum(caps, np.where(filled.any(axis=1), filled.argmax(axis=1) + 1, MAX_RANK))
        return np.maximum(caps, 1)

    def ranks(self, values: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
        """Each row's sampled rank (1-based): drawn from the kept ranks in proportion to
        exp(logprob / temperature), as vLLM samples its tempered, cut distribution."""
        caps = self.caps(values)
        head = values[:, :MAX_RANK] / self.temperature
        weights = np.where(np.arange(MAX_RANK)[None, :] < caps[:, None], np.exp(head - head[:, :1]), 0.0)
        cdf = np.cumsum(weights, axis=1)
        below = (cdf < (uniforms * cdf[:, -1])[:, None]).sum(axis=1)
        return np.minimum(below, caps - 1) + 1


GREEDY = Cut(top_k=1)


@dataclass(frozen=True)
class Ranked:
    """One position: the actual token's logprob and rank, and the alternatives shown."""
    token_id: int
    logprob: float
    rank: int
    alternatives: list[tuple[int, float, int]]   # (token id, logprob, rank), best first


def rank_positions(uniforms: np.ndarray, token_ids: list[int], k: int, cut: Cut,
                   pool: np.ndarray) -> list[Ranked]:
    """Rank each actual token and pick the k best alternatives shown beside it.

    `uniforms` has one row of row_width(top) per token. The actual token's rank is within
    what `cut` keeps of its row: at temperature 0 (GREEDY) always the likeliest.
    """
    top = (uniforms.shape[1] - 2 - MAX_RANK) // 2   # row_width's inverse
    ranks_u, first_u = uniforms[:, 0], uniforms[:, 1]
    gaps_u = uniforms[:, 2:2 + top + MAX_RANK]
    picks_u = uniforms[:, 2 + top + MAX_RANK:]
    # Stick-breaking: each rank takes a share of the probability the ranks before it left,
    # so the probabilities sum to less than 1, as a real distribution's top entries do.
    shares = np.concatenate([(LEAST_TOP + 0.75 * first_u)[:, None], 0.3 + 0.6 * gaps_u], axis=1)
    left = np.cumprod(np.concatenate([np.ones((len(shares), 1)), 1 - shares[:, :-1]], axis=1), axis=1)
    values = np.log(-np.sort(-(left * shares), axis=1))   # best first, all below 0
    ranks = cut.ranks(values, ranks_u)
    picks = (picks_u * len(pool)).astype(np.int64)
    out = []
    for i, token in enumerate(token_ids):
        rank = int(ranks[i])
        shown = [r for r in range(1, k + 1) if r != rank]
        alt_ids = _distinct(pool, picks[i], len(shown), exclude=token)
        row = values[i]
        out.append(Ranked(token, float(row[rank - 1]), rank,
                          [(a, float(row[r - 1]), r) for a, r in zip(alt_ids, shown, strict=True)]))
    return out


def _distinct(pool: np.ndarray, picks: np.ndarray, count: int, exclude: int) -> list[int]:
    """`count` distinct ids from the pool, none equal to `exclude`, from the picks in order."""
    chosen: list[int] = []
    size = len(pool)
    for start in picks[:count]:
        j = int(start)
        while int(pool[j]) in chosen or int(pool[j]) == exclude:
            j = (j + 1) % size
        chosen.append(int(pool[j]))
    return chosen


# A token in logprobs is written as its own text whatever skip_special_tokens says: vLLM's
# serving layer decodes each logprob token by id, so <|end_of_text|> appears as itself
# (api-decisions.md, "Response details as vLLM writes them").

def top_logprobs(r: Ranked, vocab: Vocab) -> dict[str, float]:
    """OpenAI's top_logprobs entry: text -> logprob, best first, holding the actual token."""
    texts = vocab.texts
    entries = [(r.rank, texts[r.token_id], r.logprob)]
    entries += [(rank, texts[a], lp) for a, lp, rank in r.alternatives]
    return {text: lp for _, text, lp in sorted(entries)}


def prompt_logprob(r: Ranked, vocab: Vocab) -> dict[str, dict[str, Any]]:
    """vLLM's prompt_logprobs entry: the actual token first, then the alternatives by rank."""
    texts = vocab.texts
    out = {str(r.token_id): {"logprob": r.logprob, "rank": r.rank, "decoded_token": texts[r.token_id]}}
    for a, lp, rank in r.alternatives:
        out[str(a)] = {"logprob": lp, "rank": rank, "decoded_token": texts[a]}
    return out
