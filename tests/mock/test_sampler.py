"""The sampler's fast path: a request that cuts nothing draws its rank in closed form (issue 46:
vLLM's default top_k is -1, and the full CDF's search cost every default request a numpy call a
token), and the closed form draws the rank the CDF does."""

from __future__ import annotations

import random

import pytest

from contract import spec
from mock_server.engine.fake_engine import causal_model
from mock_server.engine.sampler import Cut, Settings, _Step, rank_cdf, sample_choice

MODEL = next(iter(spec().models.values()))


@pytest.mark.parametrize("top_k", [-1, 0])
def test_a_top_k_that_is_off_keeps_every_rank(top_k: int) -> None:
    cut = Cut(top_k=top_k)
    assert cut.keeps_all
    assert _Step(causal_model(MODEL, 1 / 64), Settings(max_tokens=1, cut=cut), []).whole


@pytest.mark.parametrize(
    "cut", [Cut(top_k=5), Cut(min_p=0.1), Cut(top_p=0.9), Cut(temperature=0.5)]
)
def test_a_cut_or_a_temperature_takes_the_cdf(cut: Cut) -> None:
    assert not cut.keeps_all
    assert not _Step(causal_model(MODEL, 1 / 64), Settings(max_tokens=1, cut=cut), []).whole


def test_the_closed_form_draws_the_rank_the_full_cdf_draws() -> None:
    model = causal_model(MODEL, 1 / 64)
    closed = _Step(model, Settings(max_tokens=1, cut=Cut()), [])
    cdf = rank_cdf(Cut(), model.size)
    rng = random.Random(46)
    # uniforms at random, and between each of the first ranks' bounds (1 - 1/(r + 2))
    uniforms = [rng.random() for _ in range(20_000)]
    uniforms += [1 - (1 / (r + 2) + 1 / (r + 3)) / 2 for r in range(2_000)]
    for u in uniforms:
        expected = min(int(cdf.searchsorted(u, "right")), len(cdf) - 1)
        assert closed.rank(u) == expected, u


def test_a_greedy_choice_with_nothing_masked_is_the_rank_scans_choice() -> None:
    """The greedy fast path (rank 0's token, no generator drawn) chooses what the rank scan of
    _Step._greedy chooses; a presence penalty too small to move a float sends it there."""

    def never() -> float:
        raise AssertionError("a greedy choice drew a uniform")

    model = causal_model(MODEL, 1 / 64)
    scanned = Settings(max_tokens=24, greedy=True, presence_penalty=1e-300)
    fast = Settings(max_tokens=24, greedy=True)
    rng = random.Random(56)
    for _ in range(200):
        prompt = [rng.randrange(model.size) for _ in range(rng.randrange(1, 9))]
        a = sample_choice(model, prompt, never, fast)
        b = sample_choice(model, prompt, never, scanned)
        assert (a.token_ids, a.finish_reason) == (b.token_ids, b.finish_reason)
