"""For the conformance suite's tests: the mock served in-process, and a middleware that breaks it.

`Breaker` wraps the mock's WSGI app and breaks one thing at a time (its
`mode`), the way a faulty deployment would: it rewrites the request before the
mock sees it, or the response after. A stream is buffered whole and rewritten
event by event, so only checks that do not time a stream may run through it.
"""
from __future__ import annotations

import io
import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from werkzeug.serving import make_server

from contract import spec

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> Iterator[str]:
    """A real HTTP server (werkzeug, a thread per request) on a free port; yields its URL."""
    server = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def _known_fields() -> set[str]:
    return set(spec().schema("CompletionRequest")["properties"])


# -- what each mode breaks -------------------------------------------------------------
# Request rewrites: (body) -> body, applied to POST /v1/completions before the mock.

def _accept_unknown_field(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k in _known_fields()}


def _cap_off_by_one(body: dict[str, Any]) -> dict[str, Any]:
    cap = spec().caps["max_tokens_without_stream"]
    if body.get("max_tokens") == cap + 1 and not body.get("stream"):
        return {**body, "max_tokens": 1}          # accepted as if it were at the cap
    return body


def _accept_wrong_type(body: dict[str, Any]) -> dict[str, Any]:
    value = body.get("max_tokens")
    if isinstance(value, str) and value.isdigit():
        return {**body, "max_tokens": int(value)}
    return body


def _forget_seed(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "seed"}


REQUEST_MODES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "unknown_field_accepted": _accept_unknown_field,
    "cap_off_by_one": _cap_off_by_one,
    "wrong_type_accepted": _accept_wrong_type,
    "seed_not_reproducing": _forget_seed,
}


# Error-body rewrites: (status, body) -> (status, body), for JSON error responses.

def _error_rewrite(status: int, body: dict[str, Any], mode: str) -> tuple[int, dict[str, Any]]:
    err = body.get("error", {})
    if mode == "wrong_status" and err.get("code") == "unsupported_media_type":
        return 400, body
    if mode == "wrong_code" and err.get("code") == "deadline_infeasible":
        return status, {**body, "error": {**err, "code": "invalid_request"}}
    if mode == "missing_param" and status == 400:
        return status, {**body, "error": {**err, "param": None}}
    if mode == "changed_message" and err.get("message", "").startswith("Invalid type"):
        return status, {**body, "error": {**err, "message": err["message"].rstrip(".")}}
    if mode == "no_request_id":
        return status, {k: v for k, v in body.items() if k != "request_id"}
    return status, body


# Stream rewrites: list of data payloads (str) -> list.

def _is_usage(event: str) -> bool:
    payload = None if event == "[DONE]" else json.loads(event)
    return isinstance(payload, dict) and payload.get("choices") == [] and "usage" in payload


def _usage_first(events: list[str]) -> list[str]:
    usage = [e for e in events if _is_usage(e)]
    rest = [e for e in events if e not in usage]
    return usage + rest


def _drop_done(events: list[str]) -> list[str]:
    return [e for e in events if e != "[DONE]"]


def _finish_reason_everywhere(events: list[str]) -> list[str]:
    out = []
    for e in events:
        if e != "[DONE]":
            payload = json.loads(e)
            for choice in payload.get("choices", []):
                choice["finish_reason"] = choice.get("finish_reason") or "length"
            e = json.dumps(payload)
        out.append(e)
    return out


STREAM_MODES: dict[str, Callable[[list[str]], list[str]]] = {
    "events_out_of_order": _usage_first,
    "missing_done": _drop_done,
    "finish_reason_early": _finish_reason_everywhere,
}


def _wrong_usage(payload: Any) -> Any:
    if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
        usage = dict(payload["usage"])
        usage["completion_tokens"] = usage.get("completion_tokens", 0) + 1
        return {**payload, "usage": usage}
    return payload


def _blank_special_tokens(payload: Any) -> Any:
    """The mock before special tokens were written as text: "" for each in logprobs and in
    the echoed text, and text_offset summing the blanked tokens (a proxy that blanks them)."""
    if not isinstance(payload, dict):
        return payload
    texts = set(spec().special_tokens(spec().default_model).values())
    for choice in payload.get("choices") or []:
        for text in texts:
            choice["text"] = (choice.get("text") or "").replace(text, "")
        lp = choice.get("logprobs")
        if isinstance(lp, dict):
            lp["tokens"] = ["" if t in texts else t for t in lp["tokens"]]
            lp["top_logprobs"] = [None if top is None else {("" if k in texts else k): v for k, v in top.items()}
                                  for top in lp["top_logprobs"]]
            start = lp["text_offset"][0] if lp["text_offset"] else 0
            lp["text_offset"] = [start + sum(map(len, lp["tokens"][:i])) for i in range(len(lp["tokens"]))]
    return payload


MODES = (*REQUEST_MODES, "wrong_status", "wrong_code", "missing_param", "changed_message",
         "no_request_id", *STREAM_MODES, "wrong_usage", "missing_x_request_id", "special_tokens_blanked")


class Breaker:
    """WSGI middleware: the wrapped app, with `mode` broken (None: untouched)."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        self.mode: str | None = None

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        mode = self.mode
        if mode is None:
            return self.app(environ, start_response)
        if mode in REQUEST_MODES and environ.get("PATH_INFO") == "/v1/completions":
            self._rewrite_request(environ, REQUEST_MODES[mode])
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None
        chunks = self.app(environ, capture)
        try:
            body = b"".join(chunks)
        finally:
            getattr(chunks, "close", lambda: None)()
        status, headers, body = self._rewrite_response(mode, captured["status"], captured["headers"], body)
        start_response(status, headers)
        return [body]

    @staticmethod
    def _rewrite_request(environ: Environ, rewrite: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict):
            raw = json.dumps(rewrite(body)).encode()
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))

    def _rewrite_response(self, mode: str, status: str, headers: list[tuple[str, str]],
                          body: bytes) -> tuple[str, list[tuple[str, str]], bytes]:
        code = int(status.split()[0])
        ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
        if mode == "missing_x_request_id":
            headers = [(k, v) for k, v in headers if k.lower() != "x-request-id"]
        elif "text/event-stream" in ctype:
            body = self._rewrite_stream(mode, body)
        elif "json" in ctype:
            data = json.loads(body)
            if code >= 400:
                code, data = _error_rewrite(code, data, mode)
            elif mode == "wrong_usage":
                data = _wrong_usage(data)
            elif mode == "special_tokens_blanked":
                data = _blank_special_tokens(data)
            body = json.dumps(data).encode()
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        headers.append(("Content-Length", str(len(body))))
        reason = status.split(" ", 1)[1] if code == int(status.split()[0]) else "Changed"
        return f"{code} {reason}", headers, body

    @staticmethod
    def _rewrite_stream(mode: str, body: bytes) -> bytes:
        events = [line[len("data: "):] for line in body.decode().split("\n") if line.startswith("data: ")]
        if mode in STREAM_MODES:
            events = STREAM_MODES[mode](events)
        elif mode == "wrong_usage":
            events = [e if e == "[DONE]" else json.dumps(_wrong_usage(json.loads(e))) for e in events]
        return "".join(f"data: {e}\n\n" for e in events).encode()
