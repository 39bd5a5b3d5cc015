"""Helpers for the mock's tests: a real server process, raw requests, SSE parsing, a load
balancer's round robin over replicas (the mock room's fixtures, in tests/mock/conftest.py, start
one server for the session)."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from api_server.children import free_port, stop_process, wait_ready
from conformance.wire.sse import parse_text

ROOT = Path(__file__).resolve().parents[2]
KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# Short, so keepalive tests stay short; SSE clients skip comment lines anyway.
KEEPALIVE_S = 0.2
START_TIMEOUT_S = 60.0


class MockProcess:
    """`python -m mock_server` on a free port, as a client developer would run it."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args, self.env = list(args), env or {}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (the process's log, closed by close())

    def start(self) -> MockProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
        env.update(self.env)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mock_server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *self.args,
            ],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(self.url, self.proc, START_TIMEOUT_S, name="mock server", interval=0.1)
        except RuntimeError as exc:
            why = f"{exc}: {self.log()}"
            self.close()  # a mock that never started leaves no open log behind
            raise RuntimeError(why) from None
        return self

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def close(self) -> None:
        self.stop()
        self._log.close()


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()


def raw_request(
    url: str, method: str, path: str, headers: dict[str, str], body: bytes | None = None
) -> RawResponse:
    """One request through http.client, which sends header values as given
    (httpx refuses some that the golden cases send on purpose, such as 'Bearer ')."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(
            method,
            path,
            body=body,
            headers=headers,
            encode_chunked=headers.get("Transfer-Encoding") == "chunked",
        )
        response = conn.getresponse()
        return RawResponse(
            response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        )
    finally:
        conn.close()


# -- SSE ------------------------------------------------------------------------------
@dataclass
class Stream:
    """A parsed text/event-stream body."""

    events: list[Any]  # each data: payload, JSON-decoded, "[DONE]" kept as a string
    comments: list[str]  # ": keepalive" lines, without the colon

    @property
    def chunks(self) -> list[dict[str, Any]]:
        return [e for e in self.events if isinstance(e, dict) and e.get("choices")]

    def text(self, index: int = 0) -> str:
        return "".join(
            c["choices"][0]["text"] for c in self.chunks if c["choices"][0]["index"] == index
        )


def parse_sse(raw: str) -> Stream:
    """The body through the suite's strict parser (conformance/wire/sse.py); bad framing or
    a payload that is not JSON fails the test."""
    parsed = parse_text(raw)
    if parsed.framing_errors:
        raise AssertionError(f"bad SSE framing: {parsed.framing_errors}")
    bad = [e.data for e in parsed.events if e.kind == "invalid"]
    if bad:
        raise AssertionError(f"events that are not JSON: {bad}")
    return Stream([e.payload for e in parsed.events], [c[1:].strip() for _, c in parsed.comments])


def completion_body(**fields: Any) -> dict[str, Any]:
    """A small valid request; fields override."""
    return {"model": "llama-8b", "prompt": "The sky is", "max_tokens": 8, **fields}


def strip_volatile(body: dict[str, Any]) -> dict[str, Any]:
    """A Completion without what differs between two identical requests."""
    return {k: v for k, v in body.items() if k not in ("id", "created")}


def read_http_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP response with a Content-Length (or up to the close) from a raw socket: (head, body)."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        length = re.search(rb"Content-Length: (\d+)", head)
        if length and len(body) >= int(length.group(1)):
            break
    head, _, body = reply.partition(b"\r\n\r\n")
    return head, body


class RoundRobin(httpx.HTTPTransport):
    """Each request to the next replica in turn, as a load balancer in front of them would."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__()
        self.ports = itertools.cycle([httpx.URL(u).port for u in urls])
        self.sent: dict[int, int] = defaultdict(int)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        port = next(self.ports)
        self.sent[port] += 1
        request.url = request.url.copy_with(port=port)
        return super().handle_request(request)
