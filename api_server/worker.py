"""gunicorn workers answering HTTP they cannot parse in the API's error shape.

A request line, header or chunked framing that gunicorn refuses never reaches the
app, and gunicorn would answer with an HTML page and no X-Request-Id. These workers
answer 400 invalid_request (or 500 internal_error for their own failures) with the
API's body instead, through the same Errors.body (the app's Contract's) as every other error.

ApiGeventWorker (the default, serve.py says why) also bounds every read from a
client: a body that stalls for longer than the body-read timeout (x-caps
body_read_seconds; ServerConfig.body_read_seconds) fails its read, and the route
answers 400 with the malformed-HTTP message (completions.read_body).
"""
from __future__ import annotations

import socket
from typing import Any

import gevent
import gevent.local
from gunicorn.http.errors import InvalidResponseHeader, InvalidResponseHeaderName, ParseException
from gunicorn.workers.ggevent import GeventWorker
from gunicorn.workers.gthread import ThreadWorker

from contract import ApiError, Errors, InternalError, InvalidRequest
from api_server.patches import patch_gunicorn, worker_config
from api_server.responses import dumps

# How long a connection's greenlet sleeps between two requests (ApiGeventWorker.handle_request).
YIELD_S = 1e-6
REASONS = {400: "Bad Request", 500: "Internal Server Error"}


def error_bytes(error: ApiError, errors: Errors) -> bytes:
    """A whole HTTP/1.1 response for `error`, worded by `errors` (the app's); the
    connection closes after it."""
    rid = errors.new_request_id()
    body = dumps(errors.body(error, rid))
    status = errors.status(error)
    head = (f"HTTP/1.1 {status} {REASONS.get(status, '')}\r\n"
            f"Connection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Request-Id: {rid}\r\n\r\n")
    return head.encode("latin-1") + body


class _ApiErrors:
    """handle_error for any gunicorn worker: the API's body, not gunicorn's HTML."""

    log: Any
    wsgi: Any   # the app (app.state.contract words its errors)

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        app_fault = isinstance(exc, (InvalidResponseHeader, InvalidResponseHeaderName))
        if isinstance(exc, ParseException) and not app_fault:
            self.log.warning("Invalid request from %s: %s", (addr or ("",))[0], exc)
            error: ApiError = InvalidRequest.from_template("malformed_http")
        else:
            self.log.exception("Error handling request")
            error = InternalError.from_template("internal_error")
        try:
            client.sendall(error_bytes(error, app_errors(self.wsgi)))
        except OSError:
            self.log.debug("Failed to send error message.")


class _ReadOnce:
    cfg: Any

    def init_process(self) -> None:
        self.cfg = worker_config(self.cfg)   # patches.py
        super().init_process()  # type: ignore[misc]


class ApiThreadWorker(_ReadOnce, _ApiErrors, ThreadWorker):  # type: ignore[misc]
    """gthread: a thread per open request (--worker gthread)."""


def body_read_seconds(app: Any) -> float:
    """The app's ServerConfig.body_read_seconds (an app these workers serve has a `state`
    with the API's config and Contract: this API's apps, and the bench's bare ceiling)."""
    return float(app.state.config.body_read_seconds)


def app_errors(app: Any) -> Errors:
    """What words the app's errors: its Contract's."""
    return app.state.contract.errors  # type: ignore[no-any-return]


# The connection this greenlet serves (one greenlet per connection): whether a request came.
_connection = gevent.local.local()


class ApiGeventWorker(_ReadOnce, _ApiErrors, GeventWorker):  # type: ignore[misc]
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
        _connection.served = False
        super().handle(listener, client, addr)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
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
        return done  # type: ignore[no-any-return]
