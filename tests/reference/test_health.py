"""The reference's GET /health reports its upstream's readiness (vLLM, vLLM's data-parallel
server or a router for vLLM), asked with a short timeout and cached, so probes stay cheap."""

from __future__ import annotations

import httpx
import pytest

from api_server import ServerConfig, create_app
from api_server.state import state_of
from contract import InferenceUnavailable, spec
from reference_impl.engine import VllmEngine
from reference_impl.health import CACHE_S, HEALTH_PATH, UpstreamHealth
from tests.support.contract import CONTRACT
from tests.support.fake_vllm import Health
from tests.support.upstream import closed_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_answer_stands_for_cache_seconds(upstream: Health) -> None:
    clock = Clock()
    health = UpstreamHealth(upstream.url, clock=clock)
    assert [health.ready(), health.ready()] == [True, True]
    assert upstream.asked == [HEALTH_PATH]  # the second probe was answered from the cache
    upstream.status = 503
    clock.now += CACHE_S / 2
    assert health.ready() is True and len(upstream.asked) == 1
    clock.now += CACHE_S / 2
    assert health.ready() is False and len(upstream.asked) == 2


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow")],
    ids=["unreachable", "too-slow"],
)
def test_an_upstream_that_does_not_answer_is_not_ready(upstream: Health, error: Exception) -> None:
    assert UpstreamHealth(upstream.url).ready() is True
    upstream.error = error
    assert UpstreamHealth(upstream.url).ready() is False
    assert upstream.asked == [HEALTH_PATH] * 2


def test_an_upstream_that_is_not_there_is_not_ready() -> None:
    assert UpstreamHealth(f"http://127.0.0.1:{closed_port()}").ready() is False


def test_the_apis_health_follows_the_upstream(upstream: Health) -> None:
    app = create_app(ServerConfig(), VllmEngine(upstream.url, "m", api=spec()))
    client = app.test_client()
    ok = client.get("/health")
    assert (ok.status_code, ok.get_json()) == (200, {"status": "ok"})
    state_of(app).engine.health.cache_seconds = 0  # ask again on every probe
    upstream.status = 503
    down = client.get("/health")
    body = down.get_json()
    expected = CONTRACT.errors.body(
        InferenceUnavailable.from_template("inference_unavailable"), body["request_id"]
    )
    assert (down.status_code, body) == (
        spec().error_codes["inference_unavailable"]["status"],
        expected,
    )
    assert down.headers["X-Request-Id"] == body["request_id"]
    assert upstream.asked == [HEALTH_PATH, HEALTH_PATH]
