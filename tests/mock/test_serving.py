"""The serving model under `python -m mock_server` (gevent workers by default):
a stalled body answered after the body-read timeout, stalled clients holding no
worker, a client that leaves mid-stream closing the engine's iterator (its Hold
settled against what was generated), SIGTERM letting an open stream finish.
The malformed-HTTP body, 413 on chunked bodies and keepalives are in test_mock_http.py,
which runs the same default server."""

from __future__ import annotations

import json
import re
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api_server.budget.sqlite import BudgetStore
from contract import InvalidRequest, spec
from mock_server.hook.faults import TPOT_MS
from tests.support.contract import CONTRACT
from tests.support.mock import (
    AUTH,
    KEY,
    MockProcess,
    completion_body,
    raw_request,
    read_http_response,
)

BODY_READ_S = 0.5  # short, so that the test is; the default is the spec's x-caps value
# More stalled clients than the old thread pool had threads (2 workers x 16).
STALLED = 40
BUDGET = 10_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MockProcess, Path]]:
    directory = tmp_path_factory.mktemp("budget")
    proc = MockProcess(
        "--workers",
        "2",
        "--threads",
        "16",
        "--body-read-seconds",
        str(BODY_READ_S),
        "--budget-tokens",
        str(BUDGET),
        "--budget-dir",
        str(directory),
        "--keys",
        KEY,
    ).start()
    yield proc, directory
    proc.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _half_a_body(port: int) -> socket.socket:
    body = json.dumps(completion_body(max_tokens=1)).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(head + body[: len(body) // 2])
    return s


def test_a_stalled_body_gets_the_malformed_http_400_after_the_timeout(
    server: tuple[MockProcess, Path],
) -> None:
    proc, _ = server
    stalled = [_half_a_body(_port(proc.url)) for _ in range(STALLED)]
    try:
        # While they stall, a whole request is served: they hold no worker.
        ok = raw_request(
            proc.url,
            "POST",
            "/v1/completions",
            {**AUTH, "Content-Type": "application/json"},
            json.dumps(completion_body(max_tokens=1)).encode(),
        )
        assert ok.status == 200, ok.body
        error = InvalidRequest(spec().messages["malformed_http"])
        for s in stalled:
            head, body = read_http_response(s)
            rid = re.search(rb"X-Request-Id: (\S+)", head)
            assert head.startswith(b"HTTP/1.1 400 ") and rid is not None, head
            assert json.loads(body) == CONTRACT.errors.body(error, rid.group(1).decode())
    finally:
        for s in stalled:
            s.close()


def test_a_client_that_leaves_mid_stream_closes_the_engine_and_settles(
    server: tuple[MockProcess, Path],
) -> None:
    proc, directory = server
    store = BudgetStore(directory, BUDGET)
    before = store.remaining(KEY)
    body = json.dumps(completion_body(max_tokens=2000, ignore_eos=True, stream=True)).encode()
    s = socket.create_connection(("127.0.0.1", _port(proc.url)), timeout=60)
    s.sendall(
        (
            f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{TPOT_MS}: 50\r\n\r\n"
        ).encode()
        + body
    )
    reply = b""
    while b"data: {" not in reply:
        reply += s.recv(65536)
    assert store.remaining(KEY) < before - 2000  # the whole Hold is taken while the stream runs
    s.close()
    # The server sees the disconnect on its next write (a token every 50 ms); closing the
    # response closes the engine's iterator and settles the Hold against what was generated.
    for _ in range(200):
        if store.remaining(KEY) > before - 2000:
            break
        time.sleep(0.05)
    spent = before - store.remaining(KEY)
    assert 0 < spent < 2000, spent


def test_sigterm_lets_an_open_stream_finish_then_exits_cleanly() -> None:
    proc = MockProcess("--workers", "1").start()
    try:
        body = json.dumps(completion_body(max_tokens=10, ignore_eos=True, stream=True)).encode()
        s = socket.create_connection(("127.0.0.1", _port(proc.url)), timeout=60)
        s.sendall(
            (
                f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{TPOT_MS}: 100\r\n\r\n"
            ).encode()
            + body
        )
        reply = s.recv(65536)
        assert proc.proc is not None
        proc.proc.terminate()  # mid-stream: gunicorn's graceful shutdown lets it finish
        while chunk := s.recv(65536):
            reply += chunk
        s.close()
        # Every token, then [DONE] and the chunked body's last chunk: the stream ended whole.
        assert reply.count(b"data: {") == 10 and reply.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        assert proc.proc.wait(timeout=30) == 0
    finally:
        proc.close()


def test_a_shutdown_prints_no_traceback_and_cleans_up() -> None:
    """Three gevent workers stopped: no "Exception ignored" of gevent issue #2148, from a
    worker or the master (serve._worker_exit and _MasterExit say why), exit status 0, and the
    master's atexit cleanup still ran (its metrics folder is gone)."""
    import os

    proc = MockProcess(
        "--workers", "3", env={"TMPDIR": tempfile.mkdtemp(prefix="shutdown-")}
    ).start()
    try:
        assert (
            httpx.post(
                proc.url + "/v1/completions",
                json=completion_body(max_tokens=2),
                headers={"Authorization": f"Bearer {KEY}"},
                timeout=30,
            ).status_code
            == 200
        )
        assert proc.proc is not None
        proc.proc.terminate()
        assert proc.proc.wait(timeout=30) == 0
        assert "Exception ignored" not in proc.log() and "Traceback" not in proc.log(), proc.log()
        assert not [n for n in os.listdir(proc.env["TMPDIR"]) if n.startswith("acs-metrics-")]
    finally:
        proc.close()


def _ttft(url: str) -> tuple[float, float]:
    """The mock's vllm:time_to_first_token_seconds (sum, count) over its models."""
    text = httpx.get(url + "/metrics").text
    sums = re.findall(r"^vllm:time_to_first_token_seconds_sum\{[^}]*\} (\S+)$", text, re.M)
    counts = re.findall(r"^vllm:time_to_first_token_seconds_count\{[^}]*\} (\S+)$", text, re.M)
    return sum(map(float, sums)), sum(map(float, counts))


def test_the_mocks_ttft_counts_from_when_its_worker_took_the_request_up(
    server: tuple[MockProcess, Path],
) -> None:
    """Issue 56: a load tool's time to first token counts the wait in the stack before the app
    sees a request, and so does the mock's own: a connection's first request from when its worker
    took the connection up (here a client that waits WAIT s before its head), a later one of the
    same connection from when the worker parsed it (no wait of its own)."""
    proc, _ = server
    wait = 0.4
    body = json.dumps(completion_body(max_tokens=1)).encode()
    request = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    before = _ttft(proc.url)
    with socket.create_connection(("127.0.0.1", _port(proc.url)), timeout=60) as s:
        time.sleep(wait)
        s.sendall(request)
        first = read_http_response(s)
        s.sendall(request)
        second = read_http_response(s)
    assert [first[0].split(b"\r\n")[0], second[0].split(b"\r\n")[0]] == [b"HTTP/1.1 200 OK"] * 2
    after = _ttft(proc.url)
    assert after[1] - before[1] == 2
    seconds = after[0] - before[0]
    # the second counted from its own parse: had it been from the connection's start, >= 2 waits
    assert wait <= seconds < 2 * wait, seconds
