"""The Hold against the Budget, as a pure function."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from contract.errors import InsufficientQuota


@dataclass(frozen=True)
class Hold:
    max_tokens: int  # what Inference runs with
    clamped: bool  # True when the Budget lowered it (X-Acs-Max-Tokens-Clamped)
    amount: int  # tokens reserved: prompt tokens + sequences x max_tokens


def hold(prompt_tokens: Sequence[int], n: int, max_tokens: int, remaining: int | None) -> Hold:
    """Reserve sum(prompt tokens) + prompts x n x max_tokens from `remaining` (None: no limit).

    When the Budget cannot hold it, max_tokens is lowered to what it can hold;
    below one token the request gets 429 insufficient_quota.
    """
    prompt_total = sum(prompt_tokens)
    sequences = len(prompt_tokens) * n
    if remaining is None or prompt_total + sequences * max_tokens <= remaining:
        return Hold(max_tokens, False, prompt_total + sequences * max_tokens)
    fits = (remaining - prompt_total) // sequences if remaining > prompt_total else 0
    if fits < 1:
        raise InsufficientQuota.from_template(
            "insufficient_quota",
            remaining=max(remaining, 0),
            prompt_tokens=prompt_total,
            sequences=sequences,
        )
    return Hold(fits, True, prompt_total + sequences * fits)
