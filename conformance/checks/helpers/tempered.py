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
from dataclasses import dataclass

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


# -- without top_k: bounds from the K likeliest of a position ------------------------------
# vLLM's rows are raw log probabilities over the whole vocabulary, so the K likeliest of a
# position say how much mass lies beyond them (1 less their sum) and that no token beyond them is
# likelier than the K-th: that bounds what the rest holds after scaling by a temperature.


def scaled(top: Sequence[float], temperature: float) -> tuple[list[float], float, float]:
    """(the K likeliest's p^(1/T), the least and the most the rest of the vocabulary's p^(1/T) may
    sum to), from `top`, descending logprobs. The rest holds mass 1 - sum(p), each of its tokens
    at most the K-th's p: p^(1/T) is convex in p at a temperature up to 1 and concave above, so
    the most (up to 1) and the least (above 1) are where the rest is as many tokens of the K-th's
    p as it holds, and what is left over."""
    e = 1 / temperature
    ps = [math.exp(v) for v in top]
    rest = max(0.0, 1 - sum(ps))
    heads = [math.exp(v * e) for v in top]
    whole = math.floor(rest / ps[-1])
    extreme = whole * heads[-1] + (rest - whole * ps[-1]) ** e
    if temperature <= 1:
        return heads, 0.0, extreme
    return heads, extreme, math.inf


def likeliest_share(top: Sequence[float], temperature: float, nats: float) -> tuple[float, float]:
    """(the least, the most) chance that the likeliest token is sampled at `temperature` with no
    top_k (a top_p only raises it), its K likeliest's logprobs moved by up to `nats` each."""
    heads, low, high = scaled(top, temperature)
    move = math.exp(2 * nats / temperature)
    least = heads[0] / (sum(heads) + high) / move
    most = min(1.0, heads[0] / (sum(heads) + low) * move)
    return least, most


def cut_share(top: Sequence[float], temperature: float, nats: float) -> tuple[float, float]:
    """likeliest_share() where `top` is all that is sampled from (a top_k of its length): the
    likeliest's share at `temperature` exactly, moved by what a batch may move its logprobs."""
    heads = [math.exp(v / temperature) for v in top]
    share = heads[0] / sum(heads)
    move = math.exp(2 * nats / temperature)
    return share / move, min(1.0, share * move)


def likeliest_at_one(top: Sequence[float], top_p: float | None, top_k: int | None = None) -> float:
    """The likeliest token's chance at temperature 1 under `top_p` or `top_k` (None: none), as
    far as the K likeliest show the nucleus (past them, as if it held the whole vocabulary): what
    a server that samples at 1 gives, the alternative drawn:temperature's evidence is aimed at."""
    ps = [math.exp(v) for v in top]
    if top_k is not None:
        return ps[0] / sum(ps[:top_k])
    kept = 1.0
    if top_p is not None:
        total = 0.0
        for p in ps:
            total += p
            if total >= top_p:
                kept = total
                break
    return min(1.0, ps[0] / kept)


def mass_before(top: Sequence[float], value: float, temperature: float, nats: float) -> float:
    """The least mass, at `temperature`, of the tokens likelier than one of logprob `value`
    (more than `nats` likelier): a top_p at or below it cuts that token (temperature up to 1)."""
    heads, _, high = scaled(top, temperature)
    before = sum(h for v, h in zip(top, heads, strict=True) if v > value + nats)
    return before / (sum(heads) + high) / math.exp(2 * nats / temperature)


@dataclass(frozen=True)
class Counted:
    """One sampled token, as drawn:temperature counts it."""

    counted: (
        bool  # what the temperature bounds happened (another token below 1, the likeliest above)
    )
    bound: float  # its chance at the temperature asked, at most
    at_one: float  # its chance at temperature 1


@dataclass(frozen=True)
class Evidence:
    """A test martingale's value against a temperature (in logs), and what a server sampling at
    1 would make it on average, and its spread (both in logs)."""

    log_value: float
    log_mean_at_one: float
    log_spread_at_one: float

    def shown(self, threshold: float) -> bool:
        """Whether a server sampling at 1 takes it past `threshold` in 99 runs of 100 (a normal
        approximation of its log: the mean less 2.33 standard deviations)."""
        low = self.log_mean_at_one - 2.33 * math.sqrt(self.log_spread_at_one)
        return low > math.log(threshold)


def evidence_against(steps: Sequence[Counted]) -> Evidence:
    """The product over the steps of each one's likelihood ratio of temperature 1 to the
    temperature asked at its bound: (at_one / bound) where counted, else the same of what was
    not. Where the server samples as asked, each step's chance of being counted is the bound at
    most, so each ratio is 1 on average at most, and the product past 1/chance with odds `chance`
    at most (Ville's inequality); a step whose chance at 1 is not above its bound says nothing
    (ratio 1)."""
    value = mean = spread = 0.0
    for s in steps:
        q, p = min(max(s.bound, 1e-12), 1 - 1e-12), min(s.at_one, 1 - 1e-12)
        if p <= q:
            continue
        yes, no = math.log(p / q), math.log((1 - p) / (1 - q))
        value += yes if s.counted else no
        mean += p * yes + (1 - p) * no
        spread += p * (1 - p) * (yes - no) ** 2
    return Evidence(value, mean, spread)


def freedman(variance: float, chance: float) -> float:
    """How far past its mean a sum of steps, each within [0, 1] and with these variances summed
    (each given the steps before it), goes with odds `chance` at most (Freedman's inequality,
    Bernstein's for martingales: t^2 = 2 ln(1/chance) (variance + t/3))."""
    a = 2 * math.log(1 / chance)
    return (a / 3 + math.sqrt(a * a / 9 + 4 * a * variance)) / 2
