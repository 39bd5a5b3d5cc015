"""The mock for client developers' unit tests: in the same process, or live on a port.

    from openai import OpenAI, AsyncOpenAI
    from mock_server.testing import BASE_URL, async_transport, transport

    client = OpenAI(base_url=BASE_URL, api_key="any",
                    http_client=httpx.Client(transport=transport()))
    aclient = AsyncOpenAI(base_url=BASE_URL, api_key="any",
                          http_client=httpx.AsyncClient(transport=async_transport()))

`transport()` runs the mock's WSGI app in the calling thread (httpx's WSGITransport):
a stream's chunks arrive as the app makes them, simulated latency included, and a
dropped connection raises httpx.RemoteProtocolError, as over a socket.
`async_transport()` runs the same app in worker threads (anyio's), one step of a
stream at a time, so an event loop never waits on it. Both take a MockConfig, or its
fields as keywords (`transport(ttft_ms=50, max_num_seqs=2)`).

`acs_mock`, a pytest fixture (`from mock_server.testing import acs_mock` in a
conftest.py, or `pytest -p mock_server.testing`): a live mock on a free port
(`python -m mock_server --workers 1`), started once per session with the options of an
`acs_mock_options` fixture where the tests define one:

    @pytest.fixture(scope="session")
    def acs_mock_options() -> list[str]:
        return ["--load-profile", "llama-8b-h100", "--max-num-seqs", "8"]

`live_mock(*options)` starts one with other options, for a block.
This module needs httpx (the [mock] extra) and, for the fixture alone, pytest: without
pytest it imports, with its transports and without `acs_mock`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx

from api_server.children import free_port, stop_process, wait_ready
from mock_server.config import MockConfig

try:
    import pytest
except ImportError:     # the [mock] extra has no pytest: the transports work without it (no fixture)
    pytest = None  # type: ignore[assignment]

# Any host: the in-process transports never resolve it. BASE_URL is the SDK's (/v1).
URL = "http://acs-mock"
BASE_URL = URL + "/v1"
START_TIMEOUT_S = 60.0


def _app(config: MockConfig | None, settings: dict[str, Any]) -> Any:
    """The mock of `config`, or of `settings` (any of MockConfig's fields, a load_profile's
    numbers under them, as the server's command line has them; no MOCK_* variable read)."""
    from mock_server.server import create_app
    return create_app(config if config is not None else MockConfig.from_env({}, **settings))


# httpx's words (httpcore's) for a connection closed mid-body or before any answer.
CUT_BODY = "peer closed connection without sending complete message body (incomplete chunked read)"
NO_RESPONSE = "Server disconnected without sending a response."


class _Body(httpx.SyncByteStream):
    """A WSGI body whose dropped connection (the app's ConnectionResetError: the mock's
    X-Mock-Stream-Drop-After) reads as httpx's error for a body cut off over a socket."""

    def __init__(self, stream: httpx.SyncByteStream) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._stream
        except ConnectionResetError as exc:
            raise httpx.RemoteProtocolError(CUT_BODY) from exc

    def close(self) -> None:
        self._stream.close()


class MockTransport(httpx.WSGITransport):
    """httpx's WSGITransport over the mock, a dropped connection raising what a socket's would
    (httpx.RemoteProtocolError, which the openai SDK turns into APIConnectionError), not the
    app's own exception."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = super().handle_request(request)
        except ConnectionResetError as exc:   # dropped before the first byte of the body
            raise httpx.RemoteProtocolError(NO_RESPONSE, request=request) from exc
        assert isinstance(response.stream, httpx.SyncByteStream)   # WSGITransport's body
        return httpx.Response(response.status_code, headers=response.headers, stream=_Body(response.stream),
                              extensions=response.extensions)


def transport(config: MockConfig | None = None, **settings: Any) -> MockTransport:
    """An httpx transport that serves every request with a mock in this process."""
    return MockTransport(app=_app(config, settings))


class _ThreadedStream(httpx.AsyncByteStream):
    """A sync response body read one chunk at a time in a worker thread."""

    def __init__(self, stream: httpx.SyncByteStream) -> None:
        self._stream, self._chunks = stream, iter(stream)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await anyio.to_thread.run_sync(next, self._chunks, None)
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._stream.close)


class AsyncMockTransport(httpx.AsyncBaseTransport):
    """The mock in this process for an httpx.AsyncClient: transport()'s, in threads."""

    def __init__(self, sync: MockTransport) -> None:
        self._sync = sync

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        plain = httpx.Request(request.method, request.url, headers=request.headers, content=body)
        response = await anyio.to_thread.run_sync(self._sync.handle_request, plain)
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)   # WSGITransport's body
        return httpx.Response(response.status_code, headers=response.headers, stream=_ThreadedStream(stream),
                              extensions=response.extensions)


def async_transport(config: MockConfig | None = None, **settings: Any) -> AsyncMockTransport:
    """An httpx async transport that serves every request with a mock in this process."""
    return AsyncMockTransport(transport(config, **settings))


@dataclass
class LiveMock:
    """A mock server process: `url` (http://127.0.0.1:PORT), `base_url` (its /v1, for the SDK),
    `log` (its log, a file while the block runs)."""
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def base_url(self) -> str:
        return self.url + "/v1"


@contextmanager
def live_mock(*options: str) -> Iterator[LiveMock]:
    """`python -m mock_server --workers 1 OPTIONS` on a free port, until the block ends."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    # the log goes to a file: a pipe no one reads fills at 64 KiB and the server then blocks
    # on its next log line (issue 44: a mock with --log-level debug wedged at request 935)
    with tempfile.TemporaryDirectory(prefix="acs-mock-") as folder:
        log = Path(folder) / "mock.log"
        with log.open("wb") as sink:
            process = subprocess.Popen([sys.executable, "-m", "mock_server", "--port", str(port), "--workers",
                                        "1", *options], env=env, stdout=subprocess.DEVNULL, stderr=sink)
        mock = LiveMock(f"http://127.0.0.1:{port}", process, log)
        try:
            wait_ready(mock.url, process, START_TIMEOUT_S, name="the mock", log=log, interval=0.1)
            yield mock
        finally:
            stop_process(process, 10)


if pytest is not None:
    @pytest.fixture(scope="session")
    def acs_mock(request: pytest.FixtureRequest) -> Iterator[LiveMock]:
        """A live mock on a free port for the whole test session (any Bearer key works),
        started with the options of an `acs_mock_options` fixture where the tests have one
        (acs-mock's command-line options, a list of strings), else with none."""
        try:
            options = list(request.getfixturevalue("acs_mock_options"))
        except pytest.FixtureLookupError:
            options = []
        with live_mock(*options) as mock:
            yield mock
