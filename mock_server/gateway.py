"""X-Mock-Gateway: the faults a client meets in front of the API, before the API reads the
request: a gateway's 502 or 504 page (its own HTML, as nginx writes it), or a connection reset
before any byte of an answer. Outermost in every mode: the mock's app (`Gateway`), and the
cassette's recorder and replayer (`answered`), so the header means the same live, in process and
replayed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from api_server.engine import Dropped
from api_server.responses import REQUEST_ID, dumps
from contract import ApiError, Errors, Spec
from mock_server.hook.faults import GATEWAY, invalid

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def answered(
    environ: dict[str, Any], start_response: Callable[..., Any], api: Spec, errors: Errors
) -> Iterable[bytes] | None:
    """The gateway's answer X-Mock-Gateway asks for (Dropped for a reset), a 400 in the API's
    shape for a value it does not know, or None: the request goes on to the API."""
    raw = environ.get("HTTP_" + GATEWAY.upper().replace("-", "_"))
    if raw is None:
        return None
    conf = api.mock_faults["gateway"]
    value = raw.strip().lower()
    if value == conf["reset"]:
        raise Dropped()  # before start_response: the server closes without a byte
    page = {str(status): (status, text) for status, text in conf["pages"].items()}.get(value)
    if page is None:
        return error_answer(errors, invalid(api.mock_faults, GATEWAY, "gateway"), start_response)
    status, text = page
    html = text.encode()
    start_response(
        f"{status} {HTTPStatus(status).phrase}",
        [
            ("Server", conf["server"]),
            ("Content-Type", "text/html"),
            ("Content-Length", str(len(html))),
        ],
    )
    return [html]


def error_answer(
    errors: Errors, error: ApiError, start_response: Callable[..., Any]
) -> list[bytes]:
    """`error` as the API answers it (its body, status, request id and headers), from a WSGI app
    in front of the API's own (the gateway, the cassette's recorder and replayer)."""
    rid = errors.new_request_id()
    body = dumps(errors.body(error, rid))
    status = errors.status(error)
    start_response(
        f"{status} {HTTPStatus(status).phrase}",
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            (REQUEST_ID, rid),
            *errors.headers(error).items(),
        ],
    )
    return [body]


class Gateway:
    """WSGI middleware: `app` behind the gateway faults X-Mock-Gateway asks for."""

    def __init__(self, app: WSGIApp, api: Spec) -> None:
        self.app, self.api, self.errors = app, api, Errors(api)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        early = answered(environ, start_response, self.api, self.errors)
        return early if early is not None else self.app(environ, start_response)
