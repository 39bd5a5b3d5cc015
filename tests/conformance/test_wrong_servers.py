"""The suite fails deployments that apply a field wrongly, now and then, or across requests,
each on the check of what it got wrong (issue 30), and not a conforming one under batch
effects. The deployments are the mock behind gallery/wrong.py's middleware.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from conformance.checks import REGISTRY
from conformance.checks.isolation import BLOCK_SIZES, HELD, LONGER, PROMPT_TOKENS
from conformance.engine.results import Outcome
from contract import spec
from gallery.support import PACED_TPOT_MS
from gallery.wrong import WRONGS, Leaking, LooseInFlight, SteersInFlight, Wrong, dropping
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.suite import failed, run_suite
from tests.support.wsgi import serve

# What a wrong field can fail, but robust: (gunicorn's), schema: (reads no effect) and the keepalive's wait.
SUITE = tuple(
    c.id for c in REGISTRY if c.group not in ("robust", "schema") and c.id != "stream:keepalive"
)
CAPTURED = {
    "effects:steering.layer_and_scale",
    "effects:steering.norm_match",
    "effects:steering.position_indices",
    "effects:steering.decoding",
}
SAMPLING_ROWS = {
    "effects:temperature.greedy",
    "effects:top_k.greedy",
    "effects:top_k.sampled",
    "effects:top_p.greedy",
    "effects:min_p.greedy",
    "effects:temperature.sampling",
    "effects:temperature.scale",
}
# The checks that must fail each way are those that say they catch it (`catches=("wrong:<way>",)`
# beside their registration); here, the checks that may fail beside them, and why.
MUST = REGISTRY.catching("wrong")
MAY: dict[str, set[str]] = {
    # every capture's addition doubles, the replayed one's too
    "scale x 2": CAPTURED | {"effects:steering.layers_above"},
    # the rows' own check, and those that read rows, saying that their premise failed
    "rows one short": SAMPLING_ROWS | {"shape:stream_joins_to_whole"},
    "rows of the sampled token": SAMPLING_ROWS
    | {"shape:stream_joins_to_whole", "golden:range.logprobs.maximum.at"}
    | {"drawn:max_tokens", "drawn:beside_stream"},
    # the drawn probes with a top_k sample the likeliest token every time
    "any top_k as 1": {"effects:temperature.scale", "drawn:temperature"},
    # numbers that are not one model's (gallery/numbers.py, issue 43): rows, layers, a
    # capture or choices that are wrong show in the checks that read them too
    "generated rows shifted": {
        "logprobs:consistent",
        "logprobs:stream",
        "shape:top_logprobs_hold_the_token",
        *SAMPLING_ROWS,
    },
    "layers reversed": CAPTURED,
    "capture sees later tokens": CAPTURED | {"effects:steering.layers_above"},
    "choices copied": {"stream:text_equals_non_stream"},
    # issue 63: wrong only where the gate's fixed points never looked; the drawn probes go there
    "long prompts unbounded": {"drawn:beside_stream"},
    "cut at 16": {"drawn:beside_stream"},
    # the probes with top_p are held to the nucleus at the temperature asked: a server that samples
    # at another one leaves it too
    "temperature 1 without top_k": {"drawn:top_p"},
    "continuations the likeliest": {"model:lm_eval.loglikelihood", "model:next_token.three_ways"},
}


@pytest.fixture(scope="module")
def wrong() -> Iterator[tuple[Wrong, str]]:
    app = Wrong(create_app(MockConfig(eos_rate=0)))
    with serve(app) as url:
        yield app, url


def test_every_way_of_being_wrong_is_caught_by_a_check_that_says_so() -> None:
    assert set(MUST) == set(WRONGS)
    assert set(MAY) <= set(WRONGS)
    assert set(REGISTRY.catching("half")) == set(HALF)


@pytest.mark.parametrize("way", WRONGS)
def test_a_field_applied_wrongly_fails_the_check_of_its_effect(
    way: str, wrong: tuple[Wrong, str]
) -> None:
    app, url = wrong
    app.set(WRONGS[way])
    try:
        found = failed(run_suite(url, *SUITE))
    finally:
        app.set(None)
    must, may = MUST[way], MAY.get(way, set())
    assert must <= set(found) <= must | may, found
    for check in set(found) - must:  # where a premise failed, the finding says so
        if way.startswith("rows"):
            assert any("fewer than logprobs" in m or "top_logprobs" in m for m in found[check]), (
                found[check]
            )


# A server that drops the field on half its requests, by a seeded coin: each check that says it
# catches that (`catches=("half:<field>",)`) fails in at least 29 of 30 runs (issue 30: "now
# and then").
HALF = REGISTRY.catching("half")
RUNS = 30


@pytest.mark.parametrize("field", HALF)
def test_a_field_dropped_on_half_the_requests_fails_29_of_30_runs(
    field: str, wrong: tuple[Wrong, str]
) -> None:
    app, url = wrong
    fails = dict.fromkeys(HALF[field], 0)
    try:
        for seed in range(RUNS):
            app.set(dropping(field), seed=seed, share=0.5)
            found = failed(run_suite(url, *HALF[field]))
            for check in fails:
                fails[check] += check in found
    finally:
        app.set(None)
    assert all(n >= RUNS - 1 for n in fails.values()), fails


def test_a_cache_that_keys_steered_answers_by_the_prompt_fails_the_isolation_checks() -> None:
    app = Leaking(create_app(MockConfig()))
    app.on = True
    with serve(app) as url:
        found = failed(run_suite(url, *SUITE))
    # same_batch's steered request is a stream of its own length: no plain request's key
    assert set(found) == {"isolation:steering.prefix_cache"}, found
    assert (
        "as if it read the steered request's KV blocks"
        in found["isolation:steering.prefix_cache"][0]
    )


def test_a_batch_that_steers_whatever_is_in_flight_fails_the_same_batch_check_alone() -> None:
    """The steered request is held open (a stream, read on) while the plain one runs: the overlap
    is certain, and said to be; on the mock, which answers a stream at once, it is not, and the
    check is unproven, saying so (issue 53); on a paced mock it is, and the check passes."""
    with serve(SteersInFlight(create_app(MockConfig()))) as url:
        report = run_suite(url, *SUITE)
    found = failed(report)
    assert set(found) == {"isolation:steering.same_batch"}, found
    assert found["isolation:steering.same_batch"][0].startswith(
        f"a plain request of a {PROMPT_TOKENS}-token prompt sent while a steered one was open "
        "is not answered as the prompt alone"
    )
    with serve(create_app(MockConfig())) as url:
        results = run_suite(url, "isolation:steering.same_batch").results
    (alone,) = [r for r in results if r.id == "isolation:steering.same_batch"]
    assert alone.outcome is Outcome.UNPROVEN
    assert alone.reason.startswith(
        f"the overlap was not certain: steered streams of {HELD} and {LONGER * HELD} tokens ended"
    )
    with serve(create_app(MockConfig(tpot_ms=PACED_TPOT_MS))) as url:
        results = run_suite(url, "isolation:steering.same_batch").results
    (paced,) = [r for r in results if r.id == "isolation:steering.same_batch"]
    assert (paced.outcome, paced.reason) == (Outcome.PASSED, "")


def test_a_server_loose_beside_a_stream_fails_the_drawn_probes_sent_beside_one() -> None:
    """A server that drops the seed and lets max_tokens run 8 past while a stream is in flight:
    drawn:beside_stream fails it, the other probes (sent alone) pass. The mock is paced (a chunk
    a token, as a GPU writes them), so the stream is in flight when the probes go. In the whole suite its
    first overshoot (isolation's plain request beside a steered stream) prices the rest past the
    ceiling; run alone, the probes name what it does."""
    with serve(LooseInFlight(create_app(MockConfig(tpot_ms=PACED_TPOT_MS)))) as url:
        report = run_suite(url, "drawn:*")
    found = failed(report)
    assert set(found) == {"drawn:beside_stream"}, found
    assert re.fullmatch(
        r"a drawn probe \(max_tokens \d+, temperature [\d.]+(, top_[pk] [\d.]+)?, a prompt of \d+ "
        r"characters\) "
        r"sent while a stream was open is not its answer alone: its logprob rows show \d+ tokens",
        found["drawn:beside_stream"][0],
    ), found
    outcome = {r.id: r.outcome for r in report.results}
    assert outcome["drawn:max_tokens"] is outcome["drawn:stop"] is Outcome.PASSED


def test_a_server_that_ignores_steering_passes_no_check_that_steering_leaves_a_text_alone() -> None:
    """Not proven, saying why (the server's doing), and their effects not counted as observed."""
    from gallery.effects import Ignoring

    app = Ignoring(create_app(MockConfig()))
    app.field = "apply_steering_vectors"
    with serve(app) as url:
        report = run_suite(url, "effects:steering.*", "isolation:*")
    outcome = {r.id: r for r in report.results}
    for check in (
        "effects:steering.zero",
        "effects:steering.scale_zero",
        "effects:steering.repeatable",
        "effects:steering.layers_above",
        "isolation:steering.prefix_cache",
        "isolation:steering.same_batch",
    ):
        assert outcome[check].outcome is Outcome.UNPROVEN, (check, outcome[check].outcome)
        assert "could not show" in outcome[check].reason or "shows nothing" in outcome[check].reason
    assert report.coverage is not None
    unseen = set(report.coverage["effects"]["not_covered"])
    assert {
        "apply_steering_vectors",
        "apply_steering_vectors.scale",
        "apply_steering_vectors.norm_match",
    } <= unseen


SMALL_CONTEXT = 391  # a deployment's max_model_len that holds no prompt of PROMPT_TOKENS
MODEL = spec().default_model


def test_the_isolation_checks_fit_a_small_context_and_still_fail_a_leak() -> None:
    """A deployment whose context holds no prompt of PROMPT_TOKENS (issue 53, item 4): the
    isolation checks send the longest prompt it holds, once behaviour shows its max_model_len,
    and say which KV blocks that covers; a leaking cache there still fails."""
    isolation = [c.id for c in REGISTRY if c.group == "isolation"]
    small = {"max_model_len": {MODEL: SMALL_CONTEXT}, "tpot_ms": PACED_TPOT_MS}
    assert SMALL_CONTEXT < PROMPT_TOKENS + HELD
    with serve(create_app(MockConfig(**small))) as url:  # type: ignore[arg-type]
        results = [r for r in run_suite(url, *isolation).results if r.id in isolation]
    length = SMALL_CONTEXT - HELD
    most = max(size for size in BLOCK_SIZES if 2 * size <= length)
    assert [(r.outcome, r.reason) for r in results] == [
        (
            Outcome.PASSED,
            f"max_model_len {SMALL_CONTEXT} holds a prompt of {length} tokens and {HELD} more: "
            f"two KV blocks of at most {most} (a server with larger ones caches less than two "
            "of it)",
        )
    ] * len(isolation)
    app = Leaking(create_app(MockConfig(**small)))  # type: ignore[arg-type]
    app.on = True
    with serve(app) as url:
        found = failed(run_suite(url, *isolation))
    assert "isolation:steering.prefix_cache" in found, found
