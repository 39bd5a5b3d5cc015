"""gunicorn's gthread worker, answering HTTP it cannot parse in the API's error shape.

A request line, header or chunked framing that gunicorn refuses never reaches the
app, and gunicorn would answer with an HTML page and no X-Request-Id. This worker
answers 400 invalid_request (or 500 internal_error for its own failures) with the
API's body instead, through the same ApiError.body as every other error.
"""
from __future__ import annotations

import socket
from typing import Any

from gunicorn.http.errors import InvalidResponseHeader, InvalidResponseHeaderName, ParseException
from gunicorn.workers.gthread import ThreadWorker

from contract import ApiError, InternalError, InvalidRequest, new_request_id, spec
from api_server.responses import dumps

REASONS = {400: "Bad Request", 500: "Internal Server Error"}


def error_bytes(error: ApiError) -> bytes:
    """A whole HTTP/1.1 response for `error`; the connection closes after it."""
    rid = new_request_id()
    body = dumps(error.body(rid))
    head = (f"HTTP/1.1 {error.status} {REASONS.get(error.status, '')}\r\n"
            f"Connection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Request-Id: {rid}\r\n\r\n")
    return head.encode("latin-1") + body


class ApiThreadWorker(ThreadWorker):  # type: ignore[misc]
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
