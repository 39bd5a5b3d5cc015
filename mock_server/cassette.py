"""Record and replay: what a real deployment answered, as a cassette a client's tests replay.

`Recorder` is a WSGI proxy: each request goes to the upstream as it came (its headers
too, so the upstream sees the client's key), its answer comes back as it is made, and
the exchange is appended to the cassette: the request's method, path and body (never
its headers), the response's status, headers (less x-mock-cassette.left_out_headers)
and each body chunk with the seconds since the request began.

`Replayer` answers from a cassette: a request matches by method, path with its query and
body (JSON compared as data; every header ignored), a key's exchanges are answered in the
order recorded (the last again once they are used up), each chunk at its recorded time.
A miss is the API's 404 not_found naming the request, or, when asked, the fake engine's
answer. GET /health is the mock's own in both modes (its readiness, not the upstream's). A cassette made under another openapi.yaml version is refused at start.

The format, the messages and what is left out are openapi.yaml's x-mock-cassette.
"""
from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from api_server.config import ConfigError
from api_server.responses import REQUEST_ID, dumps
from contract import ApiError, Contract, Message, Spec
from contract.errors import error_class

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
HOP_BY_HOP = ("host", "connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection",
              "content-length")   # never forwarded: each hop sets its own


class BodyTooLarge(Exception):
    pass


def read_body(environ: dict[str, Any], limit: int) -> bytes:
    """The request's body, at most `limit` bytes (BodyTooLarge past it, before reading more)."""
    length = environ.get("CONTENT_LENGTH") or ""
    if length.isdigit() and int(length) > limit:
        raise BodyTooLarge()
    body = environ["wsgi.input"].read(limit + 1) if length else b""
    if len(body) > limit:
        raise BodyTooLarge()
    return body


def target(environ: dict[str, Any]) -> str:
    query = environ.get("QUERY_STRING")
    return environ.get("PATH_INFO", "/") + (f"?{query}" if query else "")


def match_key(method: str, path: str, body: bytes) -> str:
    """What a request is matched by: method, path and query, and its body as data."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        canonical = body
    return hashlib.sha256(b"\0".join([method.upper().encode(), path.encode(), canonical])).hexdigest()


def _chunk(seconds: float, data: bytes) -> list[Any]:
    try:
        return [round(seconds, 6), data.decode("utf-8")]
    except UnicodeDecodeError:
        return [round(seconds, 6), None, base64.b64encode(data).decode()]


def _data(chunk: list[Any]) -> bytes:
    return chunk[1].encode("utf-8") if chunk[1] is not None else base64.b64decode(chunk[2])


class _Answer:
    """Error bodies in the API's shape, through the core."""

    def __init__(self, api: Spec) -> None:
        self.errors = Contract(api).errors
        self.conf = api.mock_cassette
        self.limit = int(api.caps["max_body_bytes"])

    def error(self, error: ApiError, start_response: Callable[..., Any]) -> list[bytes]:
        rid = self.errors.new_request_id()
        body = dumps(self.errors.body(error, rid))
        status = self.errors.status(error)
        start_response(f"{status} {httpx.codes.get_reason_phrase(status)}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                        (REQUEST_ID, rid), *self.errors.headers(error).items()])
        return [body]

    def coded(self, code: str, template: str, **fields: Any) -> ApiError:
        return error_class(code)(Message(text=self.conf[template], fields=fields))

    def too_large(self) -> ApiError:
        return error_class("request_too_large").from_template("request_too_large", limit=self.limit)


def _own(api: Spec) -> set[str]:
    """The paths the mock answers itself in both modes (its readiness): the spec's health route."""
    return {r.path for r in api.routes if r.operation_id == "health"}


def _entered(tape: Recorder | Replayer, environ: dict[str, Any],
             start_response: Callable[..., Any]) -> Iterable[bytes] | None:
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
    """A proxy to `upstream` that appends each exchange to the cassette at `path`; the mock's
    own readiness (GET /health) is `local`'s, never the upstream's."""

    def __init__(self, upstream: str, path: Path, api: Spec, local: WSGIApp, timeout: float = 600.0) -> None:
        self.upstream, self.path, self.answer = upstream.rstrip("/"), path, _Answer(api)
        self.local, self.own = local, _own(api)
        self.state = local.state   # type: ignore[attr-defined]  # what the API's workers read of an app: the mock's
        self.left_out = {h.lower() for h in api.mock_cassette["left_out_headers"]}
        self.client = httpx.Client(base_url=self.upstream, timeout=httpx.Timeout(timeout, connect=10.0))
        if not path.exists() or path.stat().st_size == 0:
            self._append({"cassette": api.mock_cassette["format"], "spec_version": api.version,
                          "upstream": self.upstream})

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        early = _entered(self, environ, start_response)
        return early if early is not None else self._take(environ, start_response)

    def _take(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method, path, body = environ["REQUEST_METHOD"], target(environ), environ["acs.body"]
        headers = [(k[5:].replace("_", "-").title(), v) for k, v in environ.items()
                   if k.startswith("HTTP_") and k[5:].replace("_", "-").lower() not in HOP_BY_HOP]
        if environ.get("CONTENT_TYPE"):
            headers.append(("Content-Type", environ["CONTENT_TYPE"]))
        began = time.monotonic()
        try:
            resp = self.client.send(self.client.build_request(method, path, headers=headers, content=body),
                                    stream=True)
        except httpx.HTTPError as exc:
            return self.answer.error(self.answer.coded(self.answer.conf["upstream_code"], "upstream_down",
                                                       upstream=self.upstream, reason=type(exc).__name__),
                                     start_response)
        kept = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in self.left_out]
        start_response(f"{resp.status_code} {resp.reason_phrase}",
                       [(k, v) for k, v in kept if k.lower() not in HOP_BY_HOP])
        return self._relay(resp, {"method": method, "path": path, "body": _chunk(0, body)[1:],
                                  "response": {"status": resp.status_code, "headers": kept}}, began)

    def _relay(self, resp: httpx.Response, exchange: dict[str, Any], began: float) -> Iterator[bytes]:
        chunks: list[list[Any]] = []
        try:
            for data in resp.iter_raw():
                chunks.append(_chunk(time.monotonic() - began, data))
                yield data
        finally:
            resp.close()
            exchange["response"]["chunks"] = chunks
            self._append(exchange)

    def _append(self, line: dict[str, Any]) -> None:
        # one line a write, under a lock on the file: the workers share the cassette
        with self.path.open("a", encoding="utf-8") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


def load(path: Path, api: Spec) -> dict[str, list[dict[str, Any]]]:
    """A cassette's exchanges by match key, in the order recorded (ConfigError for a file that
    is not one, or one recorded under another openapi.yaml)."""
    conf = api.mock_cassette
    try:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--replay {path}: not a cassette: {exc}") from None
    if not lines or not isinstance(lines[0], dict) or lines[0].get("cassette") != conf["format"]:
        raise ConfigError(f"--replay {path}: not a cassette of format {conf['format']}")
    if lines[0].get("spec_version") != api.version:
        raise ConfigError("--replay: " + conf["stale"].format(cassette=path, recorded=lines[0].get("spec_version"),
                                                               current=api.version))
    exchanges: dict[str, list[dict[str, Any]]] = {}
    for e in lines[1:]:
        body = _data([0, *e["body"]])
        exchanges.setdefault(match_key(e["method"], e["path"], body), []).append(e["response"])
    return exchanges


class Replayer:
    """Answers from the cassette at `path`; the mock's own readiness from `local`, and a miss
    too when `misses_to_local` (the fake engine's answer)."""

    def __init__(self, path: Path, api: Spec, local: WSGIApp, misses_to_local: bool = False,
                 sleep: Callable[[float], Any] = time.sleep) -> None:
        self.path, self.answer, self.local, self.sleep = path, _Answer(api), local, sleep
        self.misses_to_local, self.own = misses_to_local, _own(api)
        self.state = local.state   # type: ignore[attr-defined]  # what the API's workers read of an app: the mock's
        self.exchanges = load(path, api)
        self.used: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        early = _entered(self, environ, start_response)
        return early if early is not None else self._take(environ, start_response)

    def _take(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method, path, body = environ["REQUEST_METHOD"], target(environ), environ["acs.body"]
        key = match_key(method, path, body)
        recorded = self.exchanges.get(key)
        if not recorded:
            if self.misses_to_local:
                environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(body), str(len(body))
                return self.local(environ, start_response)
            return self.answer.error(self.answer.coded(self.answer.conf["miss_code"], "miss", cassette=self.path.name,
                                                       method=method, path=path, digest=key[:16]), start_response)
        with self._lock:
            n = self.used.get(key, 0)
            self.used[key] = n + 1
        response = recorded[min(n, len(recorded) - 1)]
        status = response["status"]
        start_response(f"{status} {httpx.codes.get_reason_phrase(status)}",
                       [(k, v) for k, v in response["headers"] if k.lower() not in HOP_BY_HOP])
        return self._chunks(response["chunks"], time.monotonic())

    def _chunks(self, chunks: list[list[Any]], began: float) -> Iterator[bytes]:
        for chunk in chunks:
            wait = chunk[0] - (time.monotonic() - began)
            if wait > 0:
                self.sleep(wait)
            yield _data(chunk)
