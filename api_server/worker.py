"""gunicorn workers answering HTTP they cannot parse in the API's error shape.

A request line, header or chunked framing that gunicorn refuses never reaches the
app, and gunicorn would answer with an HTML page and no X-Request-Id. These workers
answer 400 invalid_request (501 for a transfer coding gunicorn does not know, 500
internal_error for their own failures) with the API's body instead, through the same
Errors.body (the app's Contract's) as every other error.

Both read a chunked body through `BoundedChunks`, which refuses a chunk whose declared size
takes the body past the cap (x-caps.max_body_bytes) as soon as its size line is read: 413,
not a wait for bytes that could never be taken. ApiGeventWorker (the default, serve.py says
why) also bounds every read from a client: a body that stalls for longer than the body-read
timeout (x-caps body_read_seconds; ServerConfig.body_read_seconds) fails its read, and the
route answers 400 with the malformed-HTTP message (completions.read_body).
"""

from __future__ import annotations

import socket
import time
from typing import Any, cast

import gevent
import gevent.local
from gunicorn.http.body import Body, ChunkedReader
from gunicorn.http.errors import (
    InvalidResponseHeader,
    InvalidResponseHeaderName,
    ParseException,
    UnsupportedTransferCoding,
)
from gunicorn.workers.ggevent import GeventWorker
from gunicorn.workers.gthread import ThreadWorker

from api_server.arrival import RECEIVED
from api_server.patches import patch_gunicorn, worker_config
from api_server.responses import dumps
from api_server.state import state_of
from contract import ApiError, Errors, InternalError, InvalidRequest, RequestTooLarge
from contract import UnsupportedTransferCoding as NotDecoded

# How long a connection's greenlet sleeps between two requests (ApiGeventWorker.handle_request).
YIELD_S = 1e-6
REASONS = {400: "Bad Request", 500: "Internal Server Error", 501: "Not Implemented"}


def error_bytes(error: ApiError, errors: Errors) -> bytes:
    """A whole HTTP/1.1 response for `error`, worded by `errors` (the app's); the
    connection closes after it."""
    rid = errors.new_request_id()
    body = dumps(errors.body(error, rid))
    status = errors.status(error)
    head = (
        f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"
        f"Connection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nX-Request-Id: {rid}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class _ApiErrors:
    """handle_error for any gunicorn worker: the API's body, not gunicorn's HTML."""

    log: Any
    wsgi: Any  # the app (its State's contract words its errors)

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        app_fault = isinstance(exc, (InvalidResponseHeader, InvalidResponseHeaderName))
        error: ApiError
        if isinstance(exc, UnsupportedTransferCoding):  # a coding gunicorn does not know: 501
            self.log.warning("Invalid request from %s: %s", (addr or ("",))[0], exc)
            error = NotDecoded.from_template("unsupported_transfer_coding")
        elif isinstance(exc, ParseException) and not app_fault:
            self.log.warning("Invalid request from %s: %s", (addr or ("",))[0], exc)
            error = InvalidRequest.from_template("malformed_http")
        else:
            self.log.exception("Error handling request")
            error = InternalError.from_template("internal_error")
        try:
            client.sendall(error_bytes(error, app_errors(self.wsgi)))
        except OSError:
            self.log.debug("Failed to send error message.")


class BoundedChunks(ChunkedReader):
    """gunicorn's chunked reader, which also adds up the sizes the chunks declare: past
    `limit` it raises the API's 413 at the size line (completions.read_body lets it through)."""

    def __init__(self, req: Any, unreader: Any, limit: int) -> None:
        super().__init__(req, unreader)
        self.limit, self.declared = limit, 0

    def parse_chunk_size(self, unreader: Any, data: Any = None) -> Any:
        size, rest = super().parse_chunk_size(unreader, data)
        self.declared += size
        if self.declared > self.limit:
            raise RequestTooLarge.from_template("request_too_large", limit=self.limit)
        return size, rest


def bound_chunks(req: Any, app: Any) -> None:
    """A chunked request's body read by BoundedChunks (before the app reads any of it)."""
    if isinstance(req.body.reader, ChunkedReader):
        limit = state_of(app).contract.api.caps["max_body_bytes"]
        req.body = Body(BoundedChunks(req, req.unreader, limit))


class _ReadOnce:
    cfg: Any

    def init_process(self) -> None:
        self.cfg = worker_config(self.cfg)  # patches.py
        super().init_process()  # type: ignore[misc]


class ApiThreadWorker(_ReadOnce, _ApiErrors, ThreadWorker):
    """gthread: a thread per open request (--worker gthread)."""

    def handle_request(self, req: Any, conn: Any) -> Any:
        bound_chunks(req, self.wsgi)
        RECEIVED.set(time.monotonic())
        return super().handle_request(req, conn)


def body_read_seconds(app: Any) -> float:
    """The app's ServerConfig.body_read_seconds (an app these workers serve holds a State with
    the API's config and Contract: this API's apps, and the bench's bare ceiling)."""
    return float(cast(float, state_of(app).config.body_read_seconds))  # set: for_spec


def app_errors(app: Any) -> Errors:
    """What words the app's errors: its Contract's."""
    return state_of(app).contract.errors


# The connection this greenlet serves (one greenlet per connection): whether a request came.
_connection = gevent.local.local()


class ApiGeventWorker(_ReadOnce, _ApiErrors, GeventWorker):
    """gevent: a greenlet per connection, so thousands of open streams or stalled
    clients cost a few KiB each, not a thread."""

    def patch(self) -> None:
        super().patch()
        patch_gunicorn()

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
        # a connection's first request was waiting since its greenlet began (accepted, then
        # queued behind the worker's other greenlets); a later one, since gunicorn parsed it
        _connection.served, _connection.began = False, time.monotonic()
        super().handle(listener, client, addr)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        bound_chunks(req, self.wsgi)
        RECEIVED.set(time.monotonic() if _connection.served else _connection.began)
        if not _connection.served:
            # GeventWorker.handle made the socket blocking (no timeout); a timeout bounds
            # each read and write of the requests instead, so a client that stalls holds
            # nothing for longer than body_read_seconds. (The first head's wait is
            # timeout_ctx's.)
            sock.settimeout(body_read_seconds(self.wsgi))
            _connection.served = True
        done = super().handle_request(listener_name, req, sock, addr)
        # Yield before reading the next request of this keep-alive connection: a client
        # that sends it at once would find it readable, and without a switch this
        # greenlet would serve that connection alone while the others wait.
        # sleep(0) would resume it before the loop polls the other sockets; a timer of a
        # microsecond resumes it after (measured: p90 at 64 connections 350 ms -> 22 ms).
        gevent.sleep(YIELD_S)
        return done
