"""tempered.py's statistic on tokens drawn, by a seeded generator, as vLLM samples them:
from the K likeliest of each row in proportion to exp(logprob / T)."""

from __future__ import annotations

import math
import random

from conformance.checks.effects.sampling import TEMPERED_K, WRONG_TEMPERATURE
from conformance.checks.helpers.tempered import CRITICAL, Step, evidence, low_statistic, statistic

RUNS = 200


def _rows(rng: random.Random, count: int) -> list[list[float]]:
    """Rows of TEMPERED_K raw logprobs, best first, of a peaked model's sort."""
    out = []
    for _ in range(count):
        logits = sorted((rng.gauss(0, 2) for _ in range(TEMPERED_K)), reverse=True)
        top = max(logits)
        z = (
            top + math.log(sum(math.exp(v - top) for v in logits)) + 0.5
        )  # some mass outside the row
        out.append([v - z for v in logits])
    return out


def _sampled(rng: random.Random, rows: list[list[float]], temperature: float) -> list[Step]:
    steps = []
    for row in rows:
        weights = [math.exp(v / temperature) for v in row]
        steps.append((rng.choices(row, weights)[0], row))
    return steps


def _enough(rng: random.Random, asked: float) -> list[list[float]]:
    """Rows until a wrong temperature would show, as the check gathers them."""
    rows: list[list[float]] = []
    while (
        not rows
        or low_statistic(*evidence([(r[0], r) for r in rows], asked, WRONG_TEMPERATURE)) < CRITICAL
    ):
        rows += _rows(rng, 8)
    return rows


def test_the_asked_temperature_is_found_wrong_at_most_once_in_200_runs() -> None:
    rng = random.Random(7)
    for asked in (0.25, 2.0):
        rows = _enough(rng, asked)
        wrong = sum(statistic(_sampled(rng, rows, asked), asked)[0] > CRITICAL for _ in range(RUNS))
        assert wrong <= 1, (asked, wrong)


def test_a_server_sampling_at_1_is_found_wrong_in_at_least_97_of_100_runs() -> None:
    rng = random.Random(8)
    for asked in (0.25, 2.0):
        rows = _enough(rng, asked)
        found = sum(
            statistic(_sampled(rng, rows, WRONG_TEMPERATURE), asked)[0] > CRITICAL
            for _ in range(100)
        )
        assert found >= 97, (asked, found)


def test_the_best_fit_is_near_the_temperature_sampled_at() -> None:
    rng = random.Random(9)
    rows = _rows(rng, 2000)
    for truth in (0.25, 1.0, 2.0):
        _, best = statistic(_sampled(rng, rows, truth), truth)
        assert abs(math.log(best / truth)) < 0.15, (truth, best)
