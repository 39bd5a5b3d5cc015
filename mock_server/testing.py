"""The mock for client developers' unit tests: in the same process, or live on a port.

    from openai import OpenAI, AsyncOpenAI
    from mock_server.testing import BASE_URL, async_transport, transport

    client = OpenAI(base_url=BASE_URL, api_key="any",
                    http_client=httpx.Client(transport=transport()))
    aclient = AsyncOpenAI(base_url=BASE_URL, api_key="any",
                          http_client=httpx.AsyncClient(transport=async_transport()))

`transport()` runs the mock's WSGI app (httpx's WSGITransport) in a thread of each
response's own: a stream's chunks arrive as the app makes them, simulated latency included;
the client's read timeout fires while the answer or a stream's next chunk is late
(httpx.ReadTimeout, the SDK's APITimeoutError), and a dropped connection raises
httpx.RemoteProtocolError, as over a socket. `async_transport()` waits for the same steps in
anyio's worker threads, so an event loop never waits on it. `reset_fail_counts()`, on either
and on the live mock, starts every X-Mock-Fail-First count anew. Both take a MockConfig, or its
fields as keywords (`transport(ttft_ms=50, max_num_seqs=2)`).

`acs_mock`, a pytest fixture (`from mock_server.testing import acs_mock` in a
conftest.py, or `pytest -p mock_server.testing`): a live mock on a free port
(`python -m mock_server --workers 1`), started once per session with the options of an
`acs_mock_options` fixture where the tests define one:

    @pytest.fixture(scope="session")
    def acs_mock_options() -> list[str]:
        return ["--load-profile", "llama-8b-h100", "--max-num-seqs", "8"]

`--port N` among the options picks the port (a client whose configuration names one; one
another server holds raises RuntimeError);
`live_mock(*options)` starts one with other options, for a block; `served(app)` serves the mock,
or any WSGI app in front of it (a test's own middleware), over a real socket in this process,
for a block, without a process of its own.
This module needs httpx (the [mock] extra) and, for the fixture alone, pytest: without
pytest it imports, with its transports and without `acs_mock`.
"""

from __future__ import annotations

import asyncio
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx

from api_server.children import free_port, stop_process, wait_ready
from api_server.state import state_of
from mock_server.config import MockConfig

try:
    import pytest
except ImportError:  # the [mock] extra has no pytest: the transports work without it (no fixture)
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


# httpx's words (httpcore's) for a connection closed mid-body or before any answer, and for a
# read that waited past its timeout.
CUT_BODY = "peer closed connection without sending complete message body (incomplete chunked read)"
NO_RESPONSE = "Server disconnected without sending a response."
TIMED_OUT = "timed out"


def _read_timeout(request: httpx.Request) -> float | None:
    """The request's read timeout (httpx puts the client's in the request's extensions)."""
    timeout = request.extensions.get("timeout") or {}
    read = timeout.get("read")
    return None if read is None else float(read)


class _Worker:
    """One daemon thread that runs one response's steps in order: the app's call, then each
    chunk, then its close (a generator is never touched by two threads at once). The caller
    waits for a step at most the read timeout, as a socket's reader would; a step it gave up
    on finishes in the thread, and a daemon thread never holds up the interpreter's exit."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        threading.Thread(target=self._run, daemon=True, name="acs-mock-transport").start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, step = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(step())
                except BaseException as exc:  # handed to the waiting caller
                    future.set_exception(exc)

    def submit(self, step: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._jobs.put((future, step))
        return future

    def finish(self, step: Callable[[], Any]) -> None:
        """Run `step` after the steps before it, then end the thread; nobody waits."""
        self._jobs.put((Future(), step))
        self._jobs.put(None)


def _wait(future: Future[Any], timeout: float | None, request: httpx.Request) -> Any:
    try:
        return future.result(timeout)
    except FutureTimeout:
        raise httpx.ReadTimeout(TIMED_OUT, request=request) from None


class _Body(httpx.SyncByteStream):
    """A WSGI body read in its _Worker, each chunk waited for at most the read timeout; a
    dropped connection (the app's ConnectionResetError: the mock's X-Mock-Stream-Drop-After)
    reads as httpx's error for a body cut off over a socket."""

    def __init__(
        self,
        stream: httpx.SyncByteStream,
        worker: _Worker,
        timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._stream, self._chunks = stream, iter(stream)
        self._worker, self._timeout, self._request = worker, timeout, request
        self._closed = False

    def next_step(self) -> Future[Any]:
        return self._worker.submit(lambda: next(self._chunks, None))

    def chunk(self, future: Future[Any]) -> bytes | None:
        try:
            result: bytes | None = _wait(future, self._timeout, self._request)
        except ConnectionResetError as exc:
            raise httpx.RemoteProtocolError(CUT_BODY, request=self._request) from exc
        return result

    def __iter__(self) -> Iterator[bytes]:
        while (chunk := self.chunk(self.next_step())) is not None:
            yield chunk

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._worker.finish(self._stream.close)


class MockTransport(httpx.WSGITransport):
    """httpx's WSGITransport over the mock, as a socket would serve it: the request's read
    timeout fires (httpx.ReadTimeout, the openai SDK's APITimeoutError) while the answer or a
    stream's next chunk is late, and a dropped connection raises httpx.RemoteProtocolError
    (the SDK's APIConnectionError), not the app's own exception. The app runs in a thread of
    the response's own."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        timeout, worker, future = self.start(request)
        try:
            response = _wait(future, timeout, request)
        except BaseException as exc:
            if (raised := self.failed(exc, worker, request)) is exc:
                raise
            raise raised from exc
        return self.answered(response, worker, timeout, request)

    def start(self, request: httpx.Request) -> tuple[float | None, _Worker, Future[Any]]:
        """The request handed to a worker of its own: the read timeout, the worker, the answer."""
        timeout, worker = _read_timeout(request), _Worker()
        return (
            timeout,
            worker,
            worker.submit(lambda: super(MockTransport, self).handle_request(request)),
        )

    @staticmethod
    def failed(exc: BaseException, worker: _Worker, request: httpx.Request) -> BaseException:
        """What a wait for the answer that failed with `exc` raises; the worker ends after it."""
        worker.finish(lambda: None)  # the app's answer, when it comes, goes nowhere
        if isinstance(exc, ConnectionResetError):  # dropped before the first byte of the body
            return httpx.RemoteProtocolError(NO_RESPONSE, request=request)
        return exc

    @staticmethod
    def answered(
        response: httpx.Response, worker: _Worker, timeout: float | None, request: httpx.Request
    ) -> httpx.Response:
        assert isinstance(response.stream, httpx.SyncByteStream)  # WSGITransport's body
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Body(response.stream, worker, timeout, request),
            extensions=response.extensions,
        )

    def reset_fail_counts(self) -> None:
        """Start every X-Mock-Fail-First count anew (DELETE /mock/fail-counts)."""
        path = state_of(self.app).contract.api.mock_faults["reset_path"]  # its app's spec
        with httpx.Client(transport=self, base_url=URL) as client:
            client.delete(path).raise_for_status()


def transport(
    config: MockConfig | None = None,
    *,
    replay: str | Path | None = None,
    replay_miss: str = "error",
    replay_speed: float = 1.0,
    **settings: Any,
) -> MockTransport:
    """An httpx transport that serves every request with a mock in this process; with `replay`,
    from that cassette, as `acs-mock --replay` (`replay_miss`, `replay_speed`: its
    --replay-miss and --replay-speed)."""
    app = _app(config, settings)
    if replay is not None:
        from mock_server.cassettes.cassette import Replayer

        if replay_miss not in ("error", "engine"):
            raise ValueError(f"replay_miss: 'error' or 'engine', not {replay_miss!r}")
        if not replay_speed >= 0:
            raise ValueError(f"replay_speed: at least 0 (0: no waits), not {replay_speed!r}")
        app = Replayer(
            Path(replay),
            state_of(app).contract.api,
            app,
            misses_to_local=replay_miss == "engine",
            speed=replay_speed,
        )
    return MockTransport(app=app)


async def _awaited(future: Future[Any], timeout: float | None, request: httpx.Request) -> Any:
    """A worker's step awaited without a thread of the caller's: under asyncio the future itself
    (a task cancelled cancels its wait, and nothing is left to hold the interpreter's exit: the
    step finishes in its daemon worker); under another loop, in one of anyio's threads."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # trio's, say
        return await anyio.to_thread.run_sync(
            _wait, future, timeout, request, abandon_on_cancel=True
        )
    try:
        with anyio.fail_after(timeout):
            return await asyncio.wrap_future(future)
    except TimeoutError:
        raise httpx.ReadTimeout(TIMED_OUT, request=request) from None


class _AsyncBody(httpx.AsyncByteStream):
    """A transport()'s body for an AsyncClient: each chunk awaited on the event loop, the wait
    bounded by the request's read timeout, as the sync one's."""

    def __init__(self, body: _Body) -> None:
        self._body = body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        body = self._body
        while True:
            try:
                chunk = await _awaited(body.next_step(), body._timeout, body._request)
            except ConnectionResetError as exc:
                raise httpx.RemoteProtocolError(CUT_BODY, request=body._request) from exc
            if chunk is None:
                return
            yield chunk

    async def aclose(self) -> None:
        self._body.close()


class AsyncMockTransport(httpx.AsyncBaseTransport):
    """The mock in this process for an httpx.AsyncClient: transport()'s workers, awaited."""

    def __init__(self, sync: MockTransport) -> None:
        self._sync = sync

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        plain = httpx.Request(
            request.method,
            request.url,
            headers=request.headers,
            content=body,
            extensions=request.extensions,
        )
        timeout, worker, future = self._sync.start(plain)
        try:
            response = await _awaited(future, timeout, plain)
        except BaseException as exc:
            if (raised := self._sync.failed(exc, worker, plain)) is exc:
                raise
            raise raised from exc
        stream = self._sync.answered(response, worker, timeout, plain).stream
        assert isinstance(stream, _Body)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_AsyncBody(stream),
            extensions=response.extensions,
        )

    def reset_fail_counts(self) -> None:
        """Start every X-Mock-Fail-First count anew (DELETE /mock/fail-counts)."""
        self._sync.reset_fail_counts()


def async_transport(config: MockConfig | None = None, **settings: Any) -> AsyncMockTransport:
    """An httpx async transport that serves every request with a mock in this process (the
    same settings as `transport`, `replay` included)."""
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

    def reset_fail_counts(self) -> None:
        """Start every X-Mock-Fail-First count anew (DELETE /mock/fail-counts): a test of a
        session's mock that counts by the API key no longer sees the tests before it."""
        from contract import spec  # the live mock's: the spec its process reads

        httpx.delete(self.url + spec().mock_faults["reset_path"]).raise_for_status()


def _port(options: tuple[str, ...]) -> tuple[int | None, list[str]]:
    """The port `--port N` (or `--port=N`) in acs-mock's options asks for, and the other options."""
    rest, port = list(options), None
    for i, option in enumerate(options):
        if option == "--port" and i + 1 < len(options):
            port, rest = int(options[i + 1]), [*options[:i], *options[i + 2 :]]
        elif option.startswith("--port="):
            port, rest = int(option.split("=", 1)[1]), [*options[:i], *options[i + 1 :]]
    return port, rest


def _owned(port: int) -> None:
    """RuntimeError where `port` is taken: the mock's server would keep trying to bind it while
    whatever holds it answered the readiness probe (another mock), and the tests would run
    against that one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server's own bind
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise RuntimeError(
                f"the mock cannot have port {port}: {exc.strerror or exc} (another server holds it)"
            ) from exc


@contextmanager
def served(
    app: Callable[[dict[str, Any], Callable[..., Any]], Any] | None = None,
    config: MockConfig | None = None,
    **settings: Any,
) -> Iterator[str]:
    """`app` (the mock of `config` or its fields as keywords, by default) on a free port of
    127.0.0.1, werkzeug's threaded server in a thread of this process, until the block ends;
    yields its URL. A client that cannot take a transport (another library, a subprocess) talks
    to it over a socket, and a middleware of the test's own stands in front of the mock."""
    from werkzeug.serving import make_server

    server = make_server(
        "127.0.0.1", free_port(), app if app is not None else _app(config, settings), threaded=True
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


@contextmanager
def live_mock(*options: str) -> Iterator[LiveMock]:
    """`python -m mock_server --workers 1 OPTIONS` until the block ends: on the port a
    `--port N` among the options asks for, else on a free one."""
    chosen, rest = _port(options)
    if chosen is not None:
        _owned(chosen)
    port = chosen if chosen is not None else free_port()
    options = tuple(rest)
    if not any(o == "--graceful-timeout" or o.startswith("--graceful-timeout=") for o in options):
        # a test's mock has nothing to drain when its block ends: a client's idle keep-alive
        # connection (a session-scoped client) would hold the stop for the whole graceful timeout
        options = ("--graceful-timeout", "0", *options)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOCK_")}
    # the log goes to a file: a pipe no one reads fills at 64 KiB and the server then blocks
    # on its next log line (issue 44: a mock with --log-level debug wedged at request 935)
    with tempfile.TemporaryDirectory(prefix="acs-mock-") as folder:
        log = Path(folder) / "mock.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "mock_server",
                    "--port",
                    str(port),
                    "--workers",
                    "1",
                    *options,
                ],
                env=env,
                stdout=sink,  # --access-log's lines, beside the rest of its log
                stderr=subprocess.STDOUT,
            )
        mock = LiveMock(f"http://127.0.0.1:{port}", process, log)
        try:
            wait_ready(mock.url, process, START_TIMEOUT_S, name="the mock", log=log, interval=0.1)
            yield mock
        finally:
            stop_process(process, 10)


if pytest is not None:

    @pytest.fixture(scope="session")
    def acs_mock(request: pytest.FixtureRequest) -> Iterator[LiveMock]:
        """A live mock for the whole test session (any Bearer key works), started with the
        options of an `acs_mock_options` fixture where the tests have one (acs-mock's
        command-line options, a list of strings; `--port N` picks its port), else with none
        on a free port."""
        try:
            options = list(request.getfixturevalue("acs_mock_options"))
        except pytest.FixtureLookupError:
            options = []
        with live_mock(*options) as mock:
            yield mock
