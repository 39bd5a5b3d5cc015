"""Record and replay: what a real deployment answered, as a cassette a client's tests replay.

`Recorder` is a WSGI proxy: each request goes to the upstream as it came (its headers
too, so the upstream sees the client's key; Accept-Encoding is identity, so that what is
written can be masked), its answer comes back as it is made, and
the exchange is appended to the cassette: the request's method, path and body (never
its headers), the response's status, headers (less x-mock-cassette.left_out_headers)
and each body chunk with the seconds since the request began.

`Replayer` answers from a cassette: a request matches by method, path with its query and
body (JSON compared as data; every header ignored), a key's exchanges are answered in the
order recorded (the last again once they are used up), each chunk at its recorded time.
The API's own preflight (route, key, size, codings, media type) answers first, so a request
without a key gets the API's 401, not a recorded 200. A miss is the API's 404 not_found naming
the request and the closest recorded one, or, when asked, the fake engine's answer; a GET the
cassette lacks (/v1/models, /metrics) is the mock's own, as GET /health always is (its
readiness, not the upstream's). The file is checked line by line at start and read again on
each hit (tape.py); nothing secret is written (tape.Secrets; a key an answer spells in
pieces, pieces.py).

The format, the messages and what is left out are openapi.yaml's x-mock-cassette.
"""

from __future__ import annotations

import base64
import fcntl
import io
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
from flask import Request

from api_server.engine import Dropped
from api_server.state import STATE, state_of
from contract import ApiError, Contract, Message, Spec
from contract.errors import error_class
from mock_server import gateway
from mock_server.cassettes.pieces import masked_answer
from mock_server.cassettes.replayed import asked_of, counted, faulted, paced, played
from mock_server.cassettes.tape import (
    Secrets,
    data_of,
    differing,
    error_shape,
    load,
    match_key,
)

__all__ = ["Recorder", "Replayer", "match_key"]

log = logging.getLogger(__name__)
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
HOP_BY_HOP = (
    "host",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "proxy-connection",
    "content-length",
)  # never forwarded: each hop sets its own


class BodyTooLarge(Exception):
    pass


@dataclass(frozen=True)
class Upstream:
    """An upstream URL split into what each request goes to and what is the upstream's own: its
    userinfo and its query (a key an upstream takes in the URL), never the client's and never
    written. `shown` is the URL with the userinfo left out and every query value masked."""

    base: str  # scheme, host, port and path: each request's target is appended to it
    params: tuple[tuple[str, str], ...]  # the query, added to each request's own
    user: str | None
    password: str | None
    shown: str
    secrets: tuple[str, ...]  # the password, its Basic credentials, the query's values

    @classmethod
    def of(cls, url: str, mask: str) -> Upstream:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        netloc += f":{parts.port}" if parts.port is not None else ""
        params = tuple(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        base = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        secrets = [value for _, value in params]
        user = password = None
        if parts.username is not None or parts.password is not None:
            user = urllib.parse.unquote(parts.username or "")
            password = urllib.parse.unquote(parts.password or "")
            basic = base64.b64encode(f"{user}:{password}".encode()).decode()
            secrets += [password, basic]
        query = urllib.parse.urlencode([(name, mask) for name, _ in params], safe="*")
        shown = base + (f"?{query}" if query else "")
        return cls(base, params, user, password, shown, tuple(secrets))

    def url(self, target: str) -> httpx.URL:
        """Where a request for `target` (path and query, as the client sent it) goes."""
        return httpx.URL(self.base + target).copy_merge_params(self.params)

    def auth(self, headers: Iterable[tuple[str, str]]) -> httpx.Auth | None:
        """The userinfo's Basic credentials, for a request that carries no Authorization of its
        own: the client's key goes as it was sent."""
        if self.user is None or any(k.lower() == "authorization" for k, _ in headers):
            return None
        return httpx.BasicAuth(self.user, self.password or "")


def read_body(environ: dict[str, Any], limit: int) -> bytes:
    """The request's body, at most `limit` bytes (BodyTooLarge past it, before reading more)."""
    length = environ.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > limit:
        raise BodyTooLarge()
    # at most its Content-Length: a server that does not end the input there would block
    body = environ["wsgi.input"].read(int(length)) if length.isdigit() else b""
    if len(body) > limit:
        raise BodyTooLarge()
    return body


def target(environ: dict[str, Any]) -> str:
    query = environ.get("QUERY_STRING")
    return environ.get("PATH_INFO", "/") + (f"?{query}" if query else "")


def request_headers(environ: dict[str, Any]) -> list[tuple[str, str]]:
    """The request's headers, as names and values (the hop-by-hop ones left out)."""
    headers = [
        (k[5:].replace("_", "-").title(), v)
        for k, v in environ.items()
        if k.startswith("HTTP_") and k[5:].replace("_", "-").lower() not in HOP_BY_HOP
    ]
    if environ.get("CONTENT_TYPE"):
        headers.append(("Content-Type", environ["CONTENT_TYPE"]))
    return headers


def _chunk(seconds: float, data: bytes) -> list[Any]:
    try:
        return [round(seconds, 6), data.decode("utf-8")]
    except UnicodeDecodeError:
        return [round(seconds, 6), None, base64.b64encode(data).decode()]


def masked(secrets: Secrets, method: str, path: str, body: bytes) -> tuple[str, bytes, str]:
    """The request as it is written and matched: its path and body masked, and its match key."""
    path = secrets.text(secrets.target(path))
    body = secrets.data(secrets.body(body))
    return path, body, match_key(method, path, body)


class _Answer:
    """Error bodies in the API's shape, through the core."""

    def __init__(self, api: Spec) -> None:
        self.errors = Contract(api).errors
        self.conf = api.mock_cassette
        self.limit = int(api.caps["max_body_bytes"])

    def error(self, error: ApiError, start_response: Callable[..., Any]) -> list[bytes]:
        return gateway.error_answer(self.errors, error, start_response)

    def coded(self, code: str, template: str, **fields: Any) -> ApiError:
        return error_class(code)(Message(text=self.conf[template], fields=fields))

    def too_large(self) -> ApiError:
        return error_class("request_too_large").from_template("request_too_large", limit=self.limit)


def _own(api: Spec) -> set[str]:
    """The paths the mock answers itself in both modes (its readiness): the spec's health route."""
    return {r.path for r in api.routes if r.operation_id == "health"}


def _entered(
    tape: Recorder | Replayer, environ: dict[str, Any], start_response: Callable[..., Any]
) -> Iterable[bytes] | None:
    """What both modes do first: the mock's own readiness answered by `local`, the body read
    (bounded) into environ["acs.body"]; an answer here, or None to go on."""
    if environ.get("PATH_INFO") in tape.own:
        return tape.local(environ, start_response)
    try:
        environ["acs.body"] = read_body(environ, tape.answer.limit)
    except BodyTooLarge:
        return tape.answer.error(tape.answer.too_large(), start_response)
    return None


class Recorder:
    """A proxy to `upstream` that appends each exchange to the cassette at `path`, its secrets
    masked; the mock's own readiness (GET /health) is `local`'s, never the upstream's."""

    def __init__(
        self, upstream: str, path: Path, api: Spec, local: WSGIApp, timeout: float = 600.0
    ) -> None:
        self.path, self.answer, self.api = path, _Answer(api), api
        # the upstream's userinfo and query are its own: sent, never written or told to clients
        self.upstream = Upstream.of(upstream, str(api.mock_cassette["mask"]))
        self.shown, self.secrets = self.upstream.shown, self.upstream.secrets
        self.local, self.own = local, _own(api)
        # what the API's workers read of an app (its State): the mock's
        self.extensions = {STATE: state_of(local)}
        self.left_out = {h.lower() for h in api.mock_cassette["left_out_headers"]}
        self.client = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0))
        self.error_shape = error_shape(api)
        if not path.exists() or path.stat().st_size == 0:
            self._append(
                {
                    "cassette": api.mock_cassette["format"],
                    "spec_version": api.version,
                    "upstream": self.shown,
                }
            )

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        gate = gateway.answered(environ, start_response, self.api, self.answer.errors)
        if gate is not None:  # in front of the API, as live: X-Mock-Gateway
            return gate
        early = _entered(self, environ, start_response)
        return early if early is not None else self._take(environ, start_response)

    def _take(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method, path, body = environ["REQUEST_METHOD"], target(environ), environ["acs.body"]
        route = path.split("?")[0]
        try:  # the X-Mock-* headers are the mock's: applied here, never sent to the upstream
            asked = asked_of(state_of(self.local), environ, method, route, body)
        except ApiError as error:
            return self.answer.error(error, start_response)
        prefix = self.api.mock_faults["header_prefix"].lower()
        # identity: a compressed answer could not be masked (one still compressed is decoded)
        headers = [
            h
            for h in request_headers(environ)
            if h[0].lower() != "accept-encoding" and not h[0].lower().startswith(prefix)
        ]
        headers.append(("Accept-Encoding", "identity"))
        secrets = Secrets(self.api, self.secrets)
        secrets.of_headers(headers)
        written_path, written_body, _ = masked(secrets, method, path, body)
        began = time.monotonic()
        try:
            resp = self.client.send(
                self.client.build_request(
                    method, self.upstream.url(path), headers=headers, content=body
                ),
                auth=self.upstream.auth(headers),
                stream=True,
            )
        except httpx.HTTPError as exc:
            return self.answer.error(
                self.answer.coded(
                    self.answer.conf["upstream_code"],
                    "upstream_down",
                    upstream=self.shown,
                    reason=type(exc).__name__,
                ),
                start_response,
            )
        kept = [
            (k, v)
            for k, v in resp.headers.multi_items()
            if k.lower() not in self.left_out and k.lower() != "content-encoding"
        ]
        start_response(
            f"{resp.status_code} {resp.reason_phrase}",
            [(k, v) for k, v in kept if k.lower() not in HOP_BY_HOP],
        )
        if asked is not None and asked.ttft_s:
            time.sleep(asked.ttft_s)
        relayed = self._relay(
            resp,
            secrets,
            {
                "method": method,
                "path": written_path,
                "body": _chunk(0, written_body)[1:],
                "response": {
                    "status": resp.status_code,
                    "headers": [(k, secrets.text(v)) for k, v in kept],
                },
            },
            began,
        )
        stream = resp.headers.get("content-type", "").startswith("text/event-stream")
        if stream and asked is not None and asked.stream:  # the client's; the cassette, whole
            return faulted(relayed, asked, self.answer.errors, time.sleep)
        return relayed

    def _relay(
        self, resp: httpx.Response, secrets: Secrets, exchange: dict[str, Any], began: float
    ) -> Iterator[bytes]:
        """The upstream's body as it comes; the exchange written once it ends, with how it ended
        where that was not whole: dropped by the upstream (the client's connection is cut the
        same way) or left by the client (the exchange's response.end)."""
        chunks: list[tuple[float, bytes]] = []
        end = None
        try:
            for data in resp.iter_bytes():
                chunks.append((time.monotonic() - began, data))
                yield data  # the client gets what the upstream said; the cassette, it masked
        except httpx.HTTPError:  # the upstream's body cut off
            end = "dropped"
            raise Dropped() from None
        except GeneratorExit:  # the client went away before the end
            end = "left"
            raise
        finally:
            resp.close()
            stream = resp.headers.get("content-type", "").startswith("text/event-stream")
            written = masked_answer(chunks, stream, secrets.values, secrets.mask, secrets.data)
            exchange["response"]["chunks"] = [_chunk(t, data) for t, data in written]
            if end is not None:
                exchange["response"]["end"] = end
            if not stream and resp.status_code >= 400 and not self._api_shaped(chunks):
                # replayed as recorded, it would teach a client's tests a shape the API never has
                log.warning(
                    "recorded %s %s: the upstream's %d is not in the API's error shape "
                    "(ErrorBody): a front's page, or another server's words",
                    exchange["method"],
                    exchange["path"],
                    resp.status_code,
                )
            self._append(exchange)

    def _api_shaped(self, chunks: list[tuple[float, bytes]]) -> bool:
        """Whether an error answer's body is the API's ErrorBody."""
        return self.error_shape(b"".join(data for _, data in chunks))

    def _append(self, line: dict[str, Any]) -> None:
        # one line a write, under a lock on the file: the workers share the cassette
        with self.path.open("a", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


class Replayer:
    """Answers from the cassette at `path` behind the API's preflight; the mock's own readiness
    from `local`, a GET the cassette lacks too, and any miss when `misses_to_local` (the fake
    engine's answer)."""

    def __init__(
        self,
        path: Path,
        api: Spec,
        local: WSGIApp,
        misses_to_local: bool = False,
        sleep: Callable[[float], Any] = time.sleep,
        speed: float = 1.0,
    ) -> None:
        self.path, self.answer, self.local, self.sleep = path, _Answer(api), local, sleep
        self.api, self.misses_to_local, self.own = api, misses_to_local, _own(api)
        self.speed = speed  # recorded times divided by it; 0: every chunk at once
        # what the API's workers read of an app (its State): the mock's
        state = state_of(local)
        self.extensions = {STATE: state}
        self.state = state
        self.contract, self.keys = state.contract, state.config.keys
        self.routes = {r.path for r in api.routes}
        self.tape = load(path, api)
        self.used: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        gate = gateway.answered(environ, start_response, self.api, self.answer.errors)
        if gate is not None:  # in front of the API, as live: X-Mock-Gateway
            return gate
        refused = self._preflight(environ)
        if refused is not None:
            return self.answer.error(refused, start_response)
        early = _entered(self, environ, start_response)
        return early if early is not None else self._take(environ, start_response)

    def _preflight(self, environ: dict[str, Any]) -> ApiError | None:
        """The API's own answer before any recorded one, on the spec's routes."""
        path = environ.get("PATH_INFO", "/")
        if path not in self.routes:
            return None
        request = Request(environ)
        try:
            # werkzeug's Headers: the case-insensitive mapping preflight wants, though no Mapping
            self.contract.preflight(
                request.method,
                path,
                cast(Mapping[str, str], request.headers),
                request.content_length,
                self.keys,
            )
        except ApiError as error:
            return error
        return None

    def _take(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method, path, body = environ["REQUEST_METHOD"], target(environ), environ["acs.body"]
        secrets = Secrets(self.api)
        secrets.of_headers(request_headers(environ))
        written_path, written_body, key = masked(secrets, method, path, body)
        recorded = self.tape.by_key.get(key)
        if not recorded:
            if self.misses_to_local or method == "GET":
                environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
                return self.local(environ, start_response)
            return self.answer.error(
                self._miss(method, written_path, written_body, key), start_response
            )
        route = path.split("?")[0] if path.split("?")[0] in self.routes else None
        try:  # what its X-Mock-* headers ask, as of the engine's answer (Faults.asked)
            asked = asked_of(self.state, environ, method, route, body)
        except ApiError as error:
            self.state.metrics.responded(route, self.answer.errors.status(error), error.code)
            return self.answer.error(error, start_response)
        with self._lock:
            n = self.used.get(key, 0)
            self.used[key] = n + 1
        response = self.tape.exchange(recorded[min(n, len(recorded) - 1)])["response"]
        status, end = response["status"], response.get("end")
        times, data = paced(response["chunks"], data_of, asked, self.speed)
        counted(self.state.metrics, route, status, data)
        headers = [(k, v) for k, v in response["headers"] if k.lower() not in HOP_BY_HOP]
        stream = any(
            k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in headers
        )
        if not stream and end is None:  # a whole body: its length, as the live answer has it
            headers.append(("Content-Length", str(sum(len(d) for d in data))))
        start_response(f"{status} {httpx.codes.get_reason_phrase(status)}", headers)
        body_out = played(times, data, time.monotonic(), self.sleep)
        if stream and asked is not None and asked.stream:
            body_out = faulted(body_out, asked, self.answer.errors, self.sleep)
        return self._ended(body_out, end)

    @staticmethod
    def _ended(chunks: Iterator[bytes], end: str | None) -> Iterator[bytes]:
        """A body recorded cut (dropped, or left by its client) is cut here too, after its last
        chunk: no end of the chunked body."""
        yield from chunks
        if end is not None:
            raise Dropped()

    def _miss(self, method: str, path: str, body: bytes, key: str) -> ApiError:
        """The 404 naming the request and the recorded one of its method and path that differs
        from it in the fewest top-level fields (x-mock-cassette.closest_scan of them read)."""
        conf = self.answer.conf
        route = path.split("?")[0]
        best: list[str] | None = None
        for where in self.tape.by_route.get((method, route), [])[: conf["closest_scan"]]:
            recorded = self.tape.exchange(where)
            fields = differing(body, data_of([0, *recorded["body"]])) or ["the body"]
            if recorded["path"] != path:
                fields = ["the query", *fields]
            if best is None or len(fields) < len(best):
                best = fields
        closest = (
            Message(text=conf["closest_none"], fields={"method": method, "path": route})
            if best is None
            else Message(text=conf["closest"], fields={"fields": ", ".join(best)})
        )
        return self.answer.coded(
            conf["miss_code"],
            "miss",
            cassette=self.path.name,
            method=method,
            path=path,
            digest=key[:16],
            closest=closest,
        )
