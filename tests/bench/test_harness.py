"""bench/harness.py, what every bench measures with: its percentile, its streaming load client
(against the fake vLLM, directly and through the relay), and its servers' start and stop. A
client that miscounted tokens, or a server left running, would skew every bench."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bench import harness
from bench.__main__ import BENCHES as COMMANDS
from tests.support.vllm_stream import MODEL

ROOT = Path(__file__).resolve().parents[2]
# every benchmark (bench/__main__.py's list) and the stand-in servers
BENCHES = (*COMMANDS.values(), "servers.fake_vllm", "servers.relay", "servers.bare_app")


def body(tokens: int, usage: bool = True) -> dict[str, object]:
    return {
        "model": MODEL,
        "prompt": [128000, 791],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": usage},
    }


@pytest.mark.parametrize("p", [0, 1, 25, 50, 90, 99, 100])
def test_percentile_is_numpys_linear_one(p: float) -> None:
    values = list(np.random.default_rng(7).exponential(size=37))
    assert harness.percentile(values, p) == pytest.approx(float(np.percentile(values, p)))


def test_percentile_of_few_values() -> None:
    assert harness.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert harness.percentile([5.0], 99) == 5.0
    with pytest.raises(ValueError):
        harness.percentile([], 50)


@pytest.mark.parametrize("through", ["fake vLLM", "relay"])
def test_the_client_reads_every_stream_to_its_end(
    upstreams: tuple[harness.Server, harness.Server], through: str
) -> None:
    target = upstreams[0] if through == "fake vLLM" else upstreams[1]
    got, wall = harness.streams(target, body(7), count=5)
    assert [(s.done, s.usage_tokens, s.events, s.error) for s in got] == [
        (True, 7, 8, "")
    ] * 5  # 7 tokens, 1 usage
    assert all(0 < s.ttft_s < s.seconds <= wall for s in got)  # type: ignore[operator]


def test_without_a_usage_event_each_event_is_a_token(
    upstreams: tuple[harness.Server, harness.Server],
) -> None:
    (stream,), _ = harness.streams(upstreams[0], body(6, usage=False))
    assert (stream.done, stream.usage_tokens, stream.tokens) == (True, None, 6)


def test_an_answer_that_is_not_a_stream_is_reported_not_read(
    upstreams: tuple[harness.Server, harness.Server],
) -> None:
    request = harness.request_bytes(upstreams[0], body(3), path="/v1/nothing")
    (stream,), _ = harness.uvloop.run(harness.gather_streams(upstreams[0].port, request, 1))
    assert not stream.done and stream.error.startswith("HTTP/1.1 404 Not Found")
    assert stream.error.endswith('{"detail":"Not Found"}')


def test_a_server_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    server = harness.Server(
        "quits",
        [sys.executable, "-c", "print('no model here'); raise SystemExit(3)"],
        harness.free_port(),
    )
    with pytest.raises(harness.ServerFailed, match=r"(?s)status 3 .*no model here"):
        server.run(tmp_path)
    assert server.proc is None


def test_stop_ends_the_servers_whole_session(tmp_path: Path) -> None:
    """A master that leaves a child behind (as gunicorn's workers, or Prism's node processes)."""
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
    server = harness.Server(
        "parent",
        [sys.executable, "-c", child + " time.sleep(600)"],
        harness.free_port(),
        ready="any",
        grace=1,
    )
    server.start(tmp_path)
    assert server.proc is not None
    sid = server.proc.pid
    for _ in range(100):
        if len(harness.session_pids(sid)) == 2:
            break
        time.sleep(0.1)
    assert len(harness.session_pids(sid)) == 2
    server.stop()
    assert harness.session_pids(sid) == []


def test_a_servers_cpu_is_counted(upstreams: tuple[harness.Server, harness.Server]) -> None:
    relay = upstreams[1]
    before = harness.cpu_seconds(relay.pids())
    harness.streams(relay, body(20), count=20)
    assert harness.cpu_seconds(relay.pids()) > before


def test_a_reports_command_line() -> None:
    assert (
        harness.command_line("http_bench", ["--servers", "mock,bare", "--out", "a b.md"])
        == ".venv/bin/python -m bench http --servers mock,bare --out 'a b.md'"
    )


@pytest.mark.parametrize("name", BENCHES)
def test_every_bench_runs_as_a_module(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--help"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ")


def test_stream_cost_splits_a_streams_cpu_into_its_request_and_its_tokens() -> None:
    from bench.stream_cost import LONG, SHORT, split

    per_token_us, per_request_us = 10.0, 80.0
    short_ms = (per_request_us + SHORT * per_token_us) / 1000
    long_ms = (per_request_us + LONG * per_token_us) / 1000
    assert split(short_ms, long_ms) == pytest.approx((per_token_us, per_request_us))


def test_an_app_called_in_process_gets_each_http_bench_case_as_served() -> None:
    """bench parts and stream_cost call the apps' WSGI callables with wsgi_environ: each of
    http_bench's cases must get the status it gets served (a lost key or body would time a 401)."""
    import json

    from bench.http_servers import CASES
    from bench.parts import _call
    from bench.servers.bare_app import app as bare
    from mock_server import create_app

    for app in (create_app(), bare):
        for case in CASES:
            raw = json.dumps(case.body).encode()
            environ = harness.wsgi_environ(raw)
            assert [_call(app, environ, raw) for _ in range(2)] == [case.expect_status] * 2
