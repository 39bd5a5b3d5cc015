"""The drawn probes (conformance/engine/draws.py, conformance/checks/drawn.py): drawn per run
from its seed over the whole range of each dimension, sized so that a server wrong on a quarter
of a range fails at least 99 runs in 100 (issue 63); the servers wrong where the fixed points
never looked are in test_wrong_servers.py."""

from __future__ import annotations

import math

import pytest

from conformance.checks.drawn import probe_body, rows, stop_string, stop_tokens
from conformance.checks.helpers.tempered import (
    Counted,
    cut_share,
    evidence_against,
    freedman,
    likeliest_at_one,
    likeliest_share,
    mass_before,
)
from conformance.engine import draws
from conformance.engine.draws import Draws, Probe
from conformance.spec.corpus import sentences

RUNS = range(2000)


def _max_tokens(run: int) -> list[int]:
    return [p.max_tokens for p in Draws.of(run).probes]


def test_every_stratum_of_max_tokens_is_drawn_once_in_each_run() -> None:
    low, high = draws.MAX_TOKENS
    edges = [
        math.exp(math.log(low) + i * math.log((high + 1) / low) / draws.PROBES)
        for i in range(draws.PROBES + 1)
    ]
    for run in range(50):
        values = sorted(_max_tokens(run))
        assert len(values) == draws.PROBES
        for i, v in enumerate(values):
            assert int(edges[i]) <= v <= edges[i + 1], (run, i, v)
        assert values[0] >= low and values[-1] <= high


# Sets of max_tokens a server may be wrong on, each a quarter of the range as the probes draw it
# (log-uniform): one stretch at either end, and scattered ones (every fourth value; values picked
# by a multiplicative hash until they make a quarter).
LOW, HIGH = draws.MAX_TOKENS[0], draws.MAX_TOKENS[1] + 1
SPAN = math.log(HIGH / LOW)


def _measure(v: int) -> float:
    """The chance a probe's max_tokens is v (it is int() of a log-uniform draw)."""
    return math.log((v + 1) / v) / SPAN


def _quarter(order: list[int]) -> frozenset[int]:
    out: set[int] = set()
    for v in order:
        if sum(map(_measure, out)) >= 0.25:
            break
        out.add(v)
    return frozenset(out)


VALUES = list(range(LOW, HIGH))
QUARTERS = {
    "the top quarter": _quarter(VALUES[::-1]),
    "the bottom quarter": _quarter(VALUES),
    "every fourth value": _quarter(VALUES[::4] + VALUES[1::4]),
    "a scattered quarter": _quarter(sorted(VALUES, key=lambda v: (v * 2654435761) % 2**32)),
}


def _miss_odds(wrong: frozenset[int]) -> float:
    """The chance that no probe meets `wrong`: a product over the strata, each the chance that
    its one draw falls outside (draws.stratified)."""
    odds = 1.0
    width = SPAN / draws.PROBES
    for i in range(draws.PROBES):
        a, b = math.log(LOW) + i * width, math.log(LOW) + (i + 1) * width
        inside = sum(max(0.0, min(b, math.log(v + 1)) - max(a, math.log(v))) for v in wrong)
        odds *= max(0.0, 1 - inside / width)
    return odds


@pytest.mark.parametrize("quarter", QUARTERS)
def test_a_server_wrong_on_a_quarter_of_max_tokens_meets_a_probe_in_99_runs_of_100(
    quarter: str,
) -> None:
    wrong = QUARTERS[quarter]
    assert sum(map(_measure, wrong)) >= 0.25
    assert _miss_odds(wrong) <= 0.75**draws.PROBES <= 0.0101
    # and the draws are those strata's: the runs that miss it are as few as the odds say (within
    # three standard deviations of a binomial count over the runs)
    missed = sum(not wrong & set(_max_tokens(run)) for run in RUNS)
    odds = _miss_odds(wrong)
    assert missed <= len(RUNS) * odds + 3 * math.sqrt(len(RUNS) * odds), missed
    if quarter.startswith("the "):  # one stretch: three strata at least inside it, every run
        assert _miss_odds(wrong) < 1e-12 and missed == 0


def test_probes_cover_the_range_of_each_dimension_and_change_with_the_seed() -> None:
    seen = [Draws.of(run) for run in range(300)]
    chars = [len(p.prompt) for d in seen for p in d.probes]
    assert min(chars) < 60 and max(chars) > 1300
    stops = {p.stop_chars for d in seen for p in d.probes}
    assert stops == set(range(draws.STOP_CHARS[0], draws.STOP_CHARS[1] + 1))
    rooms = {d.default_room for d in seen}
    assert rooms == set(range(draws.DEFAULT_ROOM[0], draws.DEFAULT_ROOM[1] + 1))
    for stratum, values in zip(draws.N_STRATA, zip(*(d.n for d in seen), strict=True), strict=True):
        assert set(values) == set(range(stratum[0], stratum[1] + 1))
    temperatures = [p.temperature for d in seen for p in d.probes]
    assert min(temperatures) < 0.3 and max(temperatures) > 1.95
    # the probes of the second quarter of temperatures, up to 1, ask a top_p; no other
    low, high = draws.TOP_P_TEMPERATURES
    for d in seen:
        assert all((p.top_p is not None) == (low <= p.temperature <= high) for p in d.probes)
        assert sum(p.top_p is not None for p in d.probes) >= 2
        k_low, k_high = draws.TOP_K_TEMPERATURES
        assert all((p.top_k is not None) == (k_low <= p.temperature < k_high) for p in d.probes)
    top_ks = {p.top_k for d in seen for p in d.probes if p.top_k is not None}
    assert top_ks == set(range(draws.TOP_K[0], draws.TOP_K[1] + 1))
    top_ps = [p.top_p for d in seen for p in d.probes if p.top_p is not None]
    assert min(top_ps) < 0.35 and max(top_ps) > 0.9
    assert Draws.of(1).probes != Draws.of(2).probes
    assert Draws.of(1) == Draws.of(1)


def test_the_seeds_other_draws_stay_what_they_were_before_the_probes() -> None:
    """The probes are drawn after the values a run drew before them: a --seed of an earlier
    report draws its seed, temperatures and premise prompt again."""
    d = Draws.of(7)
    assert (d.seed, d.other_seeds, d.temperatures, d.premise_prompt) == (
        Draws.of(7).seed,
        Draws.of(7).other_seeds,
        Draws.of(7).temperatures,
        Draws.of(7).premise_prompt,
    )
    assert all(any(p.prompt.startswith(s) for s in sentences()) for p in d.probes)


def _probe(**kw: object) -> Probe:
    base = {
        "prompt": "x",
        "max_tokens": 20,
        "temperature": 0.5,
        "seed": 1,
        "top_p": None,
        "top_k": None,
        "stop_chars": 4,
        "stop_at": 3,
        "stream_stop": False,
    }
    return Probe(**{**base, **kw})  # type: ignore[arg-type]


def test_a_stop_string_is_taken_from_the_answer_past_its_spaces() -> None:
    assert stop_string(" the cat sat", _probe(stop_at=4)) == "cat "
    assert stop_string(" the cat sat", _probe(stop_at=3)) == "e ca"
    assert stop_string(" the", _probe(stop_at=3)) is None
    assert stop_string("ab      ", _probe(stop_at=2)) is None


def test_a_stop_strings_reach_is_counted_in_the_answers_own_tokens() -> None:
    choice = {"text": " the cat sat", "logprobs": {"tokens": [" the", " cat", " sat"]}}
    assert stop_tokens(choice, len(" the c")) == 2
    assert stop_tokens(choice, len(" the cat sat")) == 3
    assert stop_tokens({**choice, "text": " the cat"}, 3) is None  # rows that do not join
    # an end token generated under ignore_eos: in the rows, not in the text
    ended = {"text": " the cat", "logprobs": {"tokens": [" the", "</s>", " cat"]}}
    assert stop_tokens(ended, len(" the c")) is None
    assert stop_tokens(ended, len(" the c"), lambda t: t == "</s>") == 3


def test_a_probe_asks_for_the_most_rows_its_seed_and_its_top_p() -> None:
    from conformance.engine.config import RunConfig
    from conformance.engine.context import Context

    ctx = Context.__new__(Context)
    object.__setattr__(ctx, "config", RunConfig("http://x", "k"))
    top = ctx.api.schema("CompletionRequest")["properties"]["logprobs"]["maximum"]
    assert rows(ctx) == top
    body = probe_body(ctx, _probe(temperature=0.7, seed=5))
    assert (body["seed"], body["temperature"], body["logprobs"], body["ignore_eos"]) == (
        5,
        0.7,
        top,
        True,
    )
    assert "top_p" not in body
    assert probe_body(ctx, _probe(top_p=0.4))["top_p"] == 0.4


# -- the bounds drawn:temperature and drawn:top_p hold rows to ----------------------------


def _zipf(k: int) -> list[float]:
    """The K likeliest logprobs of a distribution p(r) = 1/((r+1)(r+2)) (the mock's profile)."""
    return [-math.log((r + 1) * (r + 2)) for r in range(k)]


def _exact(temperature: float, size: int = 200_000) -> list[float]:
    """Its probabilities at a temperature, over a vocabulary of `size` (the last rank holds the
    rest, as the mock's does)."""
    logs = [-math.log((r + 1) * (r + 2)) for r in range(size - 1)] + [-math.log(size)]
    scaled = [math.exp(v / temperature) for v in logs]
    total = sum(scaled)
    return [v / total for v in scaled]


@pytest.mark.parametrize("temperature", [0.25, 0.5, 0.9, 1.0, 1.3, 2.0])
def test_the_likeliest_share_bounds_hold_the_true_share(temperature: float) -> None:
    least, most = likeliest_share(_zipf(20), temperature, 0.0)
    true = _exact(temperature)[0]
    assert least - 1e-9 <= true <= most + 1e-9
    if temperature <= 1:  # the rest's bound is tight where the rows hold most of the mass
        assert true - least < 0.05


@pytest.mark.parametrize("temperature", [0.3, 0.6, 1.0])
def test_the_mass_before_a_token_is_never_more_than_it_is(temperature: float) -> None:
    top = _zipf(20)
    probs = _exact(temperature)
    for rank in range(25):
        value = top[rank] if rank < 20 else -math.log((rank + 1) * (rank + 2))
        assert mass_before(top, value, temperature, 0.0) <= sum(probs[:rank]) + 1e-12


def test_freedmans_bound_is_past_what_chance_gives() -> None:
    """For 400 fair coins the sum passes its mean by freedman() at most once in 10,000 runs."""
    import random

    rng = random.Random(5)
    t = freedman(400 * 0.25, 1e-4)
    assert 40 < t < 50
    runs = [sum(rng.random() < 0.5 for _ in range(400)) - 200 for _ in range(3000)]
    assert sum(r > t for r in runs) == 0
    assert sum(r > freedman(100, 0.5) for r in runs) > 0


def test_the_evidence_against_a_temperature_stays_low_where_it_was_kept() -> None:
    """Steps whose chance of being counted is the bound itself (the worst case of a server that
    kept the temperature): the evidence passes 1/chance in no run of 2,000; steps counted at
    temperature 1's chance take it far past."""
    import random

    rng = random.Random(3)
    bounds = [0.1 + 0.3 * (i % 5) / 4 for i in range(200)]
    kept = [
        evidence_against([Counted(rng.random() < q, q, 0.5) for q in bounds]).log_value
        for _ in range(2000)
    ]
    assert max(kept) < math.log(1e4)
    wrong = evidence_against([Counted(rng.random() < 0.5, q, 0.5) for q in bounds])
    assert wrong.log_value > math.log(1e4) and wrong.shown(1e4)
    # a step whose chance at 1 is no more than its bound says nothing
    assert evidence_against([Counted(True, 0.5, 0.4)] * 50).log_value == 0


def test_with_a_top_k_the_share_is_exact() -> None:
    top = _zipf(20)
    least, most = cut_share(top[:4], 1.5, 0.0)
    heads = [math.exp(v / 1.5) for v in top[:4]]
    assert least == most == pytest.approx(heads[0] / sum(heads))
    assert likeliest_at_one(top, None, 4) == pytest.approx(0.5 / sum(math.exp(v) for v in top[:4]))


def test_the_likeliest_share_at_one_follows_the_nucleus_the_rows_show() -> None:
    top = _zipf(20)  # 1/2, 1/6, 1/12, ...
    assert likeliest_at_one(top, None) == pytest.approx(0.5)
    assert likeliest_at_one(top, 0.4) == pytest.approx(1.0)  # the likeliest alone fills it
    assert likeliest_at_one(top, 0.6) == pytest.approx(0.5 / (0.5 + 1 / 6))
