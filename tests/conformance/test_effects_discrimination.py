"""The effects: checks discriminate: a deployment that ignores one field fails exactly the
checks that observe that field's effect, and a conforming one under batch effects passes them.

Both are the mock behind a middleware (gallery/effects.py), served by a real
HTTP server thread, as in test_conformance_discrimination.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance.checks import REGISTRY
from conformance.engine.results import Outcome
from gallery.effects import Batched, Ignoring
from gallery.support import PACED_TPOT_MS
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.suite import failed, run_suite
from tests.support.wsgi import serve

REGISTRY_BY_ID = {c.id: c for c in REGISTRY}
EFFECTS = sorted({c.id for c in REGISTRY if c.group == "effects"})
# field left out after validation -> the only checks that fail: those that say they catch it
# (`catches=("ignored:<field>",)`), which send it at other than its default
# (effects:temperature.sampling sends temperature 1, the default), the drawn probes that read it
# among them. Every field an effects: check observes, but the vectors' layer_indices (required: no
# vector steers without).
IGNORED = REGISTRY.catching("ignored")
# and those that may: drawn:top_p holds the nucleus at the temperature asked, so a temperature
# ignored shows there where a token sampled at 1 falls between the two nuclei (most runs, not
# every one: the probes are drawn per run)
MAY_ALSO: dict[str, set[str]] = {"temperature": {"drawn:top_p"}}


@pytest.fixture(scope="module")
def ignoring() -> Iterator[tuple[Ignoring, str]]:
    # A model that never ends a text by itself: ignore_eos then matters only where the end
    # tokens are all a request allows, as in effects:ignore_eos (semantics:finish_reason.length
    # would see it too, by chance, where the mock ends a text now and then).
    app = Ignoring(create_app(MockConfig(eos_rate=0)))
    with serve(app) as url:
        yield app, url


# Everything a deployment that ignores a field could fail, but what needs gunicorn (robust:)
# or times a stream (stream:keepalive), and schemathesis, which reads no effect.
SUITE = tuple(
    c.id for c in REGISTRY if c.group not in ("robust", "schema") and c.id != "stream:keepalive"
)


def test_every_field_an_effect_check_observes_is_ignored_once() -> None:
    observed = {f for c in REGISTRY if c.group == "effects" for f in c.effects}
    assert set(IGNORED) == observed - {"apply_steering_vectors.layer_indices"}
    for field, checks in IGNORED.items():
        # (a check of a vector's field observes apply_steering_vectors too)
        assert all(
            any(f == field or f.startswith(f"{field}.") for f in REGISTRY_BY_ID[c].effects)
            for c in checks
        ), field
    caught = set().union(*IGNORED.values())
    assert {c for c in caught if not c.startswith("effects:")} == {
        "drawn:temperature",
        "drawn:top_p",
    }
    assert {c for c in caught if c.startswith("effects:")} == set(EFFECTS) - {
        "effects:temperature.sampling",
        "effects:steering.zero",
        "effects:steering.repeatable",
        "effects:steering.layers_above",
    }


@pytest.mark.parametrize("field", IGNORED)
def test_a_field_ignored_fails_exactly_the_checks_of_its_effect(
    field: str, ignoring: tuple[Ignoring, str]
) -> None:
    app, url = ignoring
    app.field = field
    try:
        report = run_suite(url, *SUITE)
    finally:
        app.field = None
    must = IGNORED[field]
    assert must <= set(failed(report)) <= must | MAY_ALSO.get(field, set()), failed(report)


def test_a_deployment_that_samples_at_temperature_0_fails_the_sampling_check(
    ignoring: tuple[Ignoring, str],
) -> None:
    app, url = ignoring
    app.field = "greedy"
    try:
        report = run_suite(url, "effects:*", "determinism:*", "semantics:*")
    finally:
        app.field = None
    assert set(failed(report)) == {"effects:temperature.sampling", "effects:temperature.scale"}, (
        failed(report)
    )


def test_every_effect_check_passes_under_batch_effects() -> None:
    """Log probabilities and captures moved by a little, and every third greedy text flipped;
    paced as the main job's mock is, so same_batch's overlap is proven."""
    with serve(Batched(create_app(MockConfig(tpot_ms=PACED_TPOT_MS)))) as url:
        report = run_suite(url, "effects:*", "isolation:*")
    assert failed(report) == {}
    isolation = {c.id for c in REGISTRY if c.group == "isolation"}
    premises = {c.id for c in REGISTRY if c.premise}  # run first, and passed too
    assert sorted(r.id for r in report.results if r.outcome is Outcome.PASSED) == sorted(
        {*EFFECTS, *isolation, *premises}
    )
