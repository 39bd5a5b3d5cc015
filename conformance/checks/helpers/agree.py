"""Two answers of one request agree as far as the documentation lets a batch move them.

completions.md: the same request gets the same tokens and log probabilities again,
but "the batch can change a log probability by a little, and now and then a token
where two tokens are almost equally likely". openapi.yaml's x-batch-effects gives
the two numbers. So, step by step along both answers' `logprobs`:

- every token both rows name has log probabilities within `logprob_nats`;
- the tokens are the same, or both are among the likeliest of both rows and within
  `near_tie_nats` of each other there (a near tie); after one, the texts go their
  own ways and nothing more is compared.

Anything else is a difference, whatever the number of tries: no any-of-N. The
answers need `logprobs` of at least 2, so that a step's two likeliest tokens show.
"""

from __future__ import annotations

from typing import Any

from contract import Spec

LOGPROBS = 2  # the `logprobs` an answer compared here asks for: a row's two likeliest tokens


def _steps(choice: dict[str, Any]) -> tuple[list[Any], list[Any]] | None:
    lp = choice.get("logprobs")
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    rows = lp.get("top_logprobs") if isinstance(lp, dict) else None
    if not (
        isinstance(tokens, list)
        and isinstance(rows, list)
        and len(tokens) == len(rows)
        and all(isinstance(r, dict) for r in rows)
    ):
        return None
    return tokens, rows


def _near_tie(rows: tuple[dict[str, Any], ...], a: Any, b: Any, margin: float) -> bool:
    """Both tokens are the two likeliest of every row, within `margin` of each other."""
    for row in rows:
        top = sorted(row.values(), reverse=True)[:2]
        if not (
            a in row
            and b in row
            and sorted((row[a], row[b]), reverse=True) == top
            and abs(row[a] - row[b]) <= margin
        ):
            return False
    return True


def difference(api: Spec, first: dict[str, Any], second: dict[str, Any]) -> str | None:
    """None when `second` is `first` as a batch may leave it; else where and how they differ."""
    steps = _steps(first), _steps(second)
    if steps[0] is None or steps[1] is None:
        return "an answer has no logprobs (tokens and top_logprobs of one length) to compare"
    (tokens_a, rows_a), (tokens_b, rows_b) = steps  # type: ignore[misc]
    slack, margin = api.batch_effects["logprob_nats"], api.batch_effects["near_tie_nats"]
    for i, (ta, tb, ra, rb) in enumerate(zip(tokens_a, tokens_b, rows_a, rows_b)):
        for token in ra.keys() & rb.keys():
            va, vb = ra[token], rb[token]
            if not (isinstance(va, (int, float)) and isinstance(vb, (int, float))):
                return f"token {i}: the log probability of {token!r} is not a number"
            if abs(va - vb) > slack:
                return (
                    f"token {i}: the log probability of {token!r} is {va:.4f} in one and {vb:.4f} "
                    f"in the other (a batch moves it by at most {slack})"
                )
        if ta != tb:
            if _near_tie((ra, rb), ta, tb, margin):
                return None
            return (
                f"token {i} is {ta!r} in one and {tb!r} in the other, which are not the two likeliest "
                f"within {margin} nats in both rows (a near tie): {ra} and {rb}"
            )
    if len(tokens_a) != len(tokens_b):
        return (
            f"the same tokens, but {len(tokens_a)} of them in one and {len(tokens_b)} in the other"
        )
    if first.get("text") != second.get("text"):
        return f"the same tokens, but the texts {first.get('text')!r} and {second.get('text')!r}"
    return None
