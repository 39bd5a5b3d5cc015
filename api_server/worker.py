"""gunicorn workers answering HTTP they cannot parse in the API's error shape.

A request line, header or chunked framing that gunicorn refuses never reaches the
app, and gunicorn would answer with an HTML page and no X-Request-Id. These workers
answer 400 invalid_request (or 500 internal_error for their own failures) with the
API's body instead, through the same ApiError.body as every other error.

ApiGeventWorker (the default, serve.py says why) also bounds every read from a
client: a body that stalls for longer than the body-read timeout (x-caps
body_read_seconds; ServerConfig.body_read_seconds) fails its read, and the route
answers 400 with the malformed-HTTP message (completions.read_body).
"""
from __future__ import annotations

import io
import socket
import time
from typing import Any

import gevent
import gevent.local
from gunicorn import util
from gunicorn.http import wsgi
from gunicorn.http.errors import InvalidResponseHeader, InvalidResponseHeaderName, ParseException
from gunicorn.workers.base_async import AsyncWorker
from gunicorn.workers.ggevent import GeventWorker
from gunicorn.workers.gthread import ThreadWorker

from contract import ApiError, InternalError, InvalidRequest, new_request_id, spec
from api_server.responses import dumps

# How long a connection's greenlet sleeps between two requests (ApiGeventWorker.handle_request).
YIELD_S = 1e-6
REASONS = {400: "Bad Request", 500: "Internal Server Error"}


def error_bytes(error: ApiError) -> bytes:
    """A whole HTTP/1.1 response for `error`; the connection closes after it."""
    rid = new_request_id()
    body = dumps(error.body(rid))
    head = (f"HTTP/1.1 {error.status} {REASONS.get(error.status, '')}\r\n"
            f"Connection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Request-Id: {rid}\r\n\r\n")
    return head.encode("latin-1") + body


class _ApiErrors:
    """handle_error for any gunicorn worker: the API's body, not gunicorn's HTML."""

    log: Any

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        app_fault = isinstance(exc, (InvalidResponseHeader, InvalidResponseHeaderName))
        if isinstance(exc, ParseException) and not app_fault:
            self.log.warning("Invalid request from %s: %s", (addr or ("",))[0], exc)
            error: ApiError = InvalidRequest(spec().messages["malformed_http"])
        else:
            self.log.exception("Error handling request")
            error = InternalError.from_template("internal_error")
        try:
            client.sendall(error_bytes(error))
        except OSError:
            self.log.debug("Failed to send error message.")


class ReadOnceConfig:
    """gunicorn's Config for one worker, each setting read once. Config looks a setting up
    by name and asks it for its value on every read, and gunicorn reads ~22 per request
    (the limits, the proxy and forwarding rules, is_ssl...): ~0.3 us each. A worker's
    settings never change (a reload starts new workers), so the first read of each is kept."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cfg, name)
        setattr(self, name, value)   # the next read finds it here, not in __getattr__
        return value


class _ReadOnce:
    cfg: Any

    def init_process(self) -> None:
        self.cfg = ReadOnceConfig(self.cfg)
        super().init_process()  # type: ignore[misc]


class ApiThreadWorker(_ReadOnce, _ApiErrors, ThreadWorker):  # type: ignore[misc]
    """gthread: a thread per open request (--worker gthread)."""


def body_read_seconds(app: Any) -> float:
    """The app's ServerConfig.body_read_seconds (the spec's cap for an app without one)."""
    config = getattr(getattr(app, "state", None), "config", None)
    seconds = getattr(config, "body_read_seconds", None)
    return float(seconds if seconds is not None else spec().caps["body_read_seconds"])


class OneWriteResponse(wsgi.Response):  # type: ignore[misc]
    """gunicorn's response, with one send per write.

    gunicorn sends the head and each body piece with a sendall each: two send calls,
    two TCP segments and two wake-ups of the client for a one-piece JSON answer; and
    gevent's sendall asks the kernel for the socket's buffer size before every send
    (one more system call per stream chunk). This response holds the head until the
    first body piece (or close) and sends each piece, framed, with `send` alone.
    A stream's head still leaves with its first piece, as before: the app's first
    write is a keepalive or the first batch, never later than it was."""

    _head: bytes = b""

    def send_headers(self) -> None:
        if self.headers_sent:
            return
        lines = self.default_headers()
        lines.extend(f"{k}: {v}\r\n" for k, v in self.headers)
        self._head = ("".join(lines) + "\r\n").encode("latin-1")
        self.headers_sent = True

    def _emit_body(self, data: bytes) -> None:
        head, self._head = self._head, b""
        if self.chunked:
            data = b"%s%X\r\n%s\r\n" % (head, len(data), data)
        elif head:
            data = head + data
        send_all(self.sock, data)

    def sendfile(self, respiter: Any) -> bool:
        return False   # the app sends no files; write() keeps the head before the body

    def close(self) -> None:
        if not self.headers_sent:
            self.send_headers()
        head, self._head = self._head, b""
        data = head + (b"0\r\n\r\n" if self.chunked else b"")
        if data:
            send_all(self.sock, data)


def send_all(sock: socket.socket, data: bytes) -> None:
    """sock.sendall, minus gevent's buffer-size query per call. Each send waits at
    most the socket's timeout, so a client that stops reading still frees this greenlet."""
    sent = sock.send(data)
    if sent < len(data):
        view = memoryview(data)
        while sent < len(data):
            sent += sock.send(view[sent:])


_format_date = util.http_date
_date = (0, "")


def http_date(timestamp: float | None = None) -> str:
    """gunicorn's Date header, formatted once a second instead of once a response (2 us)."""
    global _date
    if timestamp is not None:
        return _format_date(timestamp)  # type: ignore[no-any-return]
    now = int(time.time())
    if _date[0] != now:
        _date = (now, _format_date(now))
    return _date[1]


_ErrorsWrapper = wsgi.WSGIErrorsWrapper


class LazyErrors(io.RawIOBase):
    """wsgi.errors: gunicorn's WSGIErrorsWrapper, built when something is written.
    gunicorn builds one for every request, a logger lookup under logging's lock, for a
    stream this app never writes to."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> None:   # type: ignore[override]
        _ErrorsWrapper(self._cfg).write(data)

    def writelines(self, lines: Any) -> None:
        _ErrorsWrapper(self._cfg).writelines(lines)


# The connection this greenlet serves (one greenlet per connection): whether a request came.
_connection = gevent.local.local()


class ApiGeventWorker(_ReadOnce, _ApiErrors, GeventWorker):  # type: ignore[misc]
    """gevent: a greenlet per connection, so thousands of open streams or stalled
    clients cost a few KiB each, not a thread."""

    def patch(self) -> None:
        super().patch()
        # gevent accepts up to 100 connections per wake-up: in a burst (wrk's 64
        # keep-alive connections, 2,000 streams at once) one worker would take nearly
        # all of them and the other idle. One per wake-up spreads them over the workers.
        from gevent.server import StreamServer
        StreamServer.max_accept = 1
        # gunicorn builds its Response, Date header and wsgi.errors by these module-level
        # names (wsgi.create, Response.default_headers, wsgi.base_environ); this process
        # runs only this worker. tests/test_worker_response.py fails if a name goes.
        wsgi.Response = OneWriteResponse
        util.http_date = http_date
        wsgi.WSGIErrorsWrapper = LazyErrors

    def timeout_ctx(self) -> gevent.Timeout:
        # gunicorn waits for every request's head under the keepalive setting (5 s) and
        # then closes without an answer. Between two requests of a connection that is
        # right (an idle connection); for the first, a client whose head was slow to come
        # (a busy machine, hundreds of client threads starting at once) lost its request
        # with no answer. The first head gets as long as any other read, body_read_seconds.
        if getattr(_connection, "served", True):
            return super().timeout_ctx()
        return gevent.Timeout(max(self.cfg.keepalive, body_read_seconds(self.wsgi)), False)

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        # GeventWorker.handle makes the socket blocking (no timeout); a timeout here
        # bounds each read and write instead, so a client that stalls holds nothing
        # for longer than body_read_seconds.
        client.settimeout(body_read_seconds(self.wsgi))
        _connection.served = False
        AsyncWorker.handle(self, listener, client, addr)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        _connection.served = True
        done = super().handle_request(listener_name, req, sock, addr)
        # Yield before reading the next request of this keep-alive connection: a client
        # that sends it at once would find it readable, and without a switch this
        # greenlet would serve that connection alone while the others wait.
        # sleep(0) would resume it before the loop polls the other sockets; a timer of a
        # microsecond resumes it after (measured: p90 at 64 connections 350 ms -> 22 ms).
        gevent.sleep(YIELD_S)
        return done  # type: ignore[no-any-return]
