"""Log probabilities as the API writes them, read from the model's distribution (model.py) at
each position: the token's own value and rank, and the likeliest others beside it. The same
position gives the same row whatever asked for it (an echoed prompt, prompt_logprobs, a
generation), and whatever `logprobs` asks for: more alternatives only show more of one row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract import Spec
from mock_server.engine.model import CausalModel, row
from mock_server.engine.vocab import Vocab


def max_top(api: Spec) -> int:
    """The most alternatives a request may ask for (`s`'s logprobs / prompt_logprobs maxima)."""
    props = api.schema("CompletionRequest")["properties"]
    return max(props["logprobs"]["maximum"], props["prompt_logprobs"]["maximum"])


@dataclass(frozen=True)
class Ranked:
    """One position: the actual token's logprob and rank, and the alternatives shown."""

    token_id: int
    logprob: float
    rank: int
    alternatives: list[tuple[int, float, int]]  # (token id, logprob, rank), best first


def ranked(model: CausalModel, key: int, cls: int, token: int, top: int) -> Ranked:
    """The row of `token` at the position of `key` (after a token of class `cls`), with the
    `top` likeliest tokens shown (the token itself among them where it is one)."""
    value, rank, alternatives = row(model, key, cls, token, top)
    return Ranked(token, value, rank, alternatives)


def trim(r: Ranked, k: int) -> Ranked:
    """The same position showing only the k best alternatives."""
    return Ranked(r.token_id, r.logprob, r.rank, [a for a in r.alternatives if a[2] <= k])


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
    out = {
        str(r.token_id): {"logprob": r.logprob, "rank": r.rank, "decoded_token": texts[r.token_id]}
    }
    for a, lp, rank in r.alternatives:
        out[str(a)] = {"logprob": lp, "rank": rank, "decoded_token": texts[a]}
    return out
