"""The temperature a server sampled at, as seen from its tokens and their top_logprobs rows.

vLLM writes raw log probabilities (before temperature) and, with top_k K, samples
from the K likeliest in proportion to exp(logprob / T). So, given each row of those
K, the sampled token's chance is exp(l_s / T) / sum(exp(l / T)) over the row, and
the tokens' log likelihood as a function of T can be fitted. Twice the gap between
the best fit and the asked T is a likelihood-ratio statistic: about chi-square with
one degree of freedom when T was applied, large when another was. The log
likelihood is concave in 1/T (an exponential family), so a ternary search finds
the best fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

CRITICAL = 15.1  # chi-square, one degree of freedom: exceeded by chance once in 10,000
COLDEST, HOTTEST = 0.02, 50.0  # where the best fit is sought

Step = tuple[float, Sequence[float]]  # (the sampled token's logprob, the row it was sampled from)


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def log_likelihood(steps: Sequence[Step], temperature: float) -> float:
    return sum(s / temperature - _logsumexp([v / temperature for v in row]) for s, row in steps)


def statistic(steps: Sequence[Step], asked: float) -> tuple[float, float]:
    """(twice the log likelihood gained by the best fitting temperature over the asked one, that temperature)."""
    low, high = 1 / HOTTEST, 1 / COLDEST  # in 1/T
    for _ in range(60):
        a, b = low + (high - low) / 3, high - (high - low) / 3
        if log_likelihood(steps, 1 / a) < log_likelihood(steps, 1 / b):
            low = a
        else:
            high = b
    best = max((2 / (low + high), asked), key=lambda t: log_likelihood(steps, t))
    return 2 * (log_likelihood(steps, best) - log_likelihood(steps, asked)), best


def row_evidence(row: Sequence[float], asked: float, truth: float) -> tuple[float, float]:
    """Had the server sampled this row at `truth` instead of `asked`, the mean and variance,
    over its draws, of twice the log likelihood ratio of `truth` over `asked` (statistic() is
    never below the sum of these over the rows)."""
    p_true = [v / truth - _logsumexp([w / truth for w in row]) for v in row]
    p_asked = [v / asked - _logsumexp([w / asked for w in row]) for v in row]
    gains = [2 * (a - b) for a, b in zip(p_true, p_asked, strict=True)]
    first = sum(math.exp(a) * g for a, g in zip(p_true, gains, strict=True))
    second = sum(math.exp(a) * g * g for a, g in zip(p_true, gains, strict=True))
    return first, max(second - first * first, 0.0)


def evidence(steps: Sequence[Step], asked: float, truth: float) -> tuple[float, float]:
    """row_evidence summed over the steps' rows (the draws are independent)."""
    rows = [row_evidence(row, asked, truth) for _, row in steps]
    return sum(m for m, _ in rows), sum(v for _, v in rows)


def low_statistic(mean: float, variance: float, times: float = 1.0) -> float:
    """What statistic() would at least give about 39 times in 40 (the mean less two standard
    deviations), with `times` as many rows of the same kind."""
    return times * mean - 2 * math.sqrt(times * variance)
