"""A third engine, written against the engine protocol alone (api_server.Engine), served by
`api_server.create_app`: the conformance suite's full profile passes against it.

`Replay` is a record-and-replay engine (a cassette, as vcrpy keeps HTTP exchanges): it
answers a request it has seen with the events recorded then, and records any other from
its source engine. It writes `generate` only: its streams take the protocol's default (a
pump), and it is ready when its source is. Recording needs a source; the fake engine is
the one at hand (a deployment would record vLLM once, and replay it in CI). The app is
given the mock's hook, so the mock's latency and stream errors wrap this engine as they
wrap the fake one, and the full profile runs the same checks as against the mock.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import api_server
from api_server import Event, ServerConfig
from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome
from conformance.engine.runner import run
from contract import CompletionRequest, InferenceUnavailable, spec
from gallery.engines import Down, Replay
from mock_server.config import MockConfig
from mock_server.engine.fake_engine import FakeEngine
from mock_server.hook.faults import Faults
from tests.support.contract import CONTRACT
from tests.support.wsgi import serve

KEY = "conformance-test-key"


def test_the_full_profile_passes_against_a_third_engine() -> None:
    config = MockConfig()
    app = api_server.create_app(
        config, Replay(FakeEngine(spec(), spec().models.values())), hook=Faults(config, spec())
    )
    with serve(app) as url:
        # robust: needs gunicorn, not werkzeug's development server, as against the mock
        # (tests/conformance/test_discrimination.py); it tests the HTTP server, not the engine.
        run_config = RunConfig(
            url, KEY, profile="full", skip=("robust", "metrics")
        )  # no vLLM metrics here
        report = run(run_config, select(REGISTRY, run_config))
    problems = {
        r.id: r.reason or [f.message for f in r.findings] for r in report.failed + report.errors
    }
    assert problems == {}
    skipped = {r.id for r in report.results if r.outcome is Outcome.SKIPPED}
    # only what needs a configured deployment (keys, a spent Budget), as against the mock
    assert skipped == {"auth:wrong_key", "budget:exhausted_key", "schema:ignored_auth"}
    assert report.count(Outcome.PASSED) > 250


def test_health_is_the_engines_readiness() -> None:
    source = FakeEngine(spec())
    assert api_server.create_app(ServerConfig(), Replay(source)).test_client().get(
        "/health"
    ).json == {"status": "ok"}
    r = api_server.create_app(ServerConfig(), Down(source)).test_client().get("/health")
    expected = InferenceUnavailable.from_template("inference_unavailable")
    assert r.status_code == CONTRACT.errors.status(expected)
    assert r.json == CONTRACT.errors.body(expected, r.headers["X-Request-Id"])


def test_an_engine_is_an_engine_or_the_app_does_not_start() -> None:
    class Duck:  # generate alone, without the protocol's declarations
        def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
            return iter(())

    with pytest.raises(TypeError, match="Duck is not an api_server.Engine"):
        api_server.create_app(ServerConfig(), Duck())  # type: ignore[arg-type]
