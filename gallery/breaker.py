"""A middleware that breaks the mock one mode at a time, the way a faulty deployment would.

`Breaker` wraps the mock's WSGI app and breaks one thing at a time (its
`mode`), the way a faulty deployment would: it rewrites the request before the
mock sees it, or the response after. A stream is buffered whole and rewritten
event by event, so only checks that do not time a stream may run through it.
"""

from __future__ import annotations

import io
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from conformance.wire.sse import parse_text
from contract import spec
from gallery.support import Environ, StartResponse, whole_response


def _known_fields() -> set[str]:
    return set(spec().schema("CompletionRequest")["properties"])


# -- what each mode breaks -------------------------------------------------------------
# Request rewrites: (body) -> body, applied to POST /v1/completions before the mock.


def _accept_unknown_field(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k in _known_fields()}


def _cap_off_by_one(body: dict[str, Any]) -> dict[str, Any]:
    cap = spec().caps["max_tokens_without_stream"]
    if body.get("max_tokens") == cap + 1 and not body.get("stream"):
        return {**body, "max_tokens": 1}  # accepted as if it were at the cap
    return body


def _accept_wrong_type(body: dict[str, Any]) -> dict[str, Any]:
    value = body.get("max_tokens")
    if isinstance(value, str) and value.isdigit():
        return {**body, "max_tokens": int(value)}
    return body


def _forget_seed(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "seed"}


# The next three change only what the API accepts: the fault is in how a valid request
# runs, not in its validation.


def _keep_stop_string(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("stop") and body.get("include_stop_str_in_output") in (None, False):
        return {**body, "include_stop_str_in_output": True}
    return body


def _drop_stop_string(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("stop") and body.get("include_stop_str_in_output") is True:
        return {**body, "include_stop_str_in_output": False}
    return body


def _ignore_min_tokens(body: dict[str, Any]) -> dict[str, Any]:
    value, most = body.get("min_tokens"), body.get("max_tokens")
    if type(value) is int and type(most) is int and 0 < value <= most:
        return {k: v for k, v in body.items() if k != "min_tokens"}
    return body


REQUEST_MODES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "unknown_field_accepted": _accept_unknown_field,
    "cap_off_by_one": _cap_off_by_one,
    "wrong_type_accepted": _accept_wrong_type,
    "seed_not_reproducing": _forget_seed,
    "stop_string_kept": _keep_stop_string,
    "stop_string_dropped": _drop_stop_string,
    "min_tokens_ignored": _ignore_min_tokens,
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
    if mode.startswith("changed_message") and err.get("message", "").startswith("Invalid type"):
        err = {**err, "message": err["message"].rstrip(".")}
        if mode == "changed_message_and_param":  # a new breakage where the message already broke
            err["param"] = None
        return status, {**body, "error": err}
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
            lp["top_logprobs"] = [
                None if top is None else {("" if k in texts else k): v for k, v in top.items()}
                for top in lp["top_logprobs"]
            ]
            start = lp["text_offset"][0] if lp["text_offset"] else 0
            lp["text_offset"] = [
                start + sum(map(len, lp["tokens"][:i])) for i in range(len(lp["tokens"]))
            ]
    return payload


# Success-body rewrites: (a Completion or a stream's JSON event, its position in the
# stream or None, the number of choices in the body or stream) -> the same, with one
# meaning broken and every schema still met.


def _each_choice(
    payload: dict[str, Any], change: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    for choice in payload.get("choices") or []:
        change(choice)
    return payload


def _other_model(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    """The model's Hugging Face id, not the name the caller used."""
    return (
        {**payload, "model": spec().models[payload["model"]].hf_id}
        if payload.get("model") in spec().models
        else payload
    )


def _stop_for_length(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    def change(c: dict[str, Any]) -> None:
        if c.get("finish_reason") == "length":
            c["finish_reason"] = "stop"

    return _each_choice(payload, change)


def _fresh_ids(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    """An id of the right shape, but new for every body and chunk (tied to nothing)."""
    rid = spec().request_id
    return {**payload, "id": rid["completion_prefix"] + secrets.token_hex(rid["hex_digits"] // 2)}


def _wrong_created(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    """A day early without stream; in a stream, one second later at every chunk."""
    return {
        **payload,
        "created": payload["created"] - 86400 if at is None else payload["created"] + at,
    }


def _lose_stop_reason(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    def change(c: dict[str, Any]) -> None:
        c["stop_reason"] = None

    return _each_choice(payload, change)


def _eos_as_stop_reason(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    """An end of sequence reported with the end token's id as if it were a stop_token_ids id."""
    eos = spec().models[spec().default_model].eos_token_ids[0]

    def change(c: dict[str, Any]) -> None:
        if c.get("finish_reason") == "stop" and c.get("stop_reason") is None:
            c["stop_reason"] = eos

    return _each_choice(payload, change)


def _choices_n_first(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    """Indexes that run over n first, then prompts: for two prompts x n = 2, 1 and 2 trade places."""
    swap = {1: 2, 2: 1}

    def change(c: dict[str, Any]) -> None:
        c["index"] = swap.get(c["index"], c["index"])

    if count != 4:
        return payload
    payload = _each_choice(payload, change)
    if at is None:
        payload["choices"].sort(key=lambda c: c["index"])
    return payload


def _token_ids_short(payload: dict[str, Any], at: int | None, count: int) -> dict[str, Any]:
    """The last token id of each choice left out (without stream) or its last chunk's (in a stream)."""

    def change(c: dict[str, Any]) -> None:
        if isinstance(c.get("token_ids"), list) and (
            at is None or c.get("finish_reason") is not None
        ):
            c["token_ids"] = c["token_ids"][:-1]

    return _each_choice(payload, change)


SUCCESS_MODES: dict[str, Callable[[dict[str, Any], int | None, int], dict[str, Any]]] = {
    "other_model": _other_model,
    "stop_for_length": _stop_for_length,
    "fresh_ids": _fresh_ids,
    "wrong_created": _wrong_created,
    "stop_reason_lost": _lose_stop_reason,
    "eos_as_stop_reason": _eos_as_stop_reason,
    "choices_n_first": _choices_n_first,
    "token_ids_short": _token_ids_short,
}


def _is_success(payload: Any) -> bool:
    return isinstance(payload, dict) and "choices" in payload and "error" not in payload


MODES = (
    *REQUEST_MODES,
    "wrong_status",
    "wrong_code",
    "missing_param",
    "changed_message",
    "no_request_id",
    *STREAM_MODES,
    "wrong_usage",
    "missing_x_request_id",
    "special_tokens_blanked",
    *SUCCESS_MODES,
)


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
        status, headers, body = self._rewrite_response(mode, *whole_response(self.app, environ))
        start_response(status, headers)
        return [body]

    @staticmethod
    def _rewrite_request(
        environ: Environ, rewrite: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        changed = rewrite(body) if isinstance(body, dict) else body
        if changed != body:  # left as sent otherwise (an 8 MiB body stays at its size)
            raw = json.dumps(changed).encode()
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))

    def _rewrite_response(
        self, mode: str, status: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[str, list[tuple[str, str]], bytes]:
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
            elif mode in SUCCESS_MODES and _is_success(data):
                data = SUCCESS_MODES[mode](data, None, len(data["choices"]))
            body = json.dumps(data).encode()
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        headers.append(("Content-Length", str(len(body))))
        reason = status.split(" ", 1)[1] if code == int(status.split()[0]) else "Changed"
        return f"{code} {reason}", headers, body

    @staticmethod
    def _rewrite_stream(mode: str, body: bytes) -> bytes:
        events = [event.data for event in parse_text(body.decode()).events]
        if mode in STREAM_MODES:
            events = STREAM_MODES[mode](events)
        elif mode == "wrong_usage":
            events = [
                e if e == "[DONE]" else json.dumps(_wrong_usage(json.loads(e))) for e in events
            ]
        elif mode in SUCCESS_MODES:
            payloads: list[Any] = [None if e == "[DONE]" else json.loads(e) for e in events]
            count = len({c.get("index") for p in payloads if _is_success(p) for c in p["choices"]})
            events = [
                json.dumps(SUCCESS_MODES[mode](p, at, count)) if _is_success(p) else e
                for at, (e, p) in enumerate(zip(events, payloads, strict=True))
            ]
        return "".join(f"data: {e}\n\n" for e in events).encode()


def _too_many(start_response: StartResponse, retry_after: int) -> Iterable[bytes]:
    """A gateway's 429: Retry-After, and its own body, not the API's."""
    body = b'{"message": "rate limit exceeded"}'
    start_response(
        "429 Too Many Requests",
        [
            ("Content-Type", "application/json"),
            ("Retry-After", str(retry_after)),
            ("Content-Length", str(len(body))),
        ],
    )
    return [body]


class RateLimited:
    """WSGI middleware: a deployment with a rate limit in front, as a gateway words it: a
    request less than 1/`per_second` s after the last one let through gets 429 with
    Retry-After (and the gateway's own body, not the API's)."""

    def __init__(
        self,
        app: Callable[[Environ, StartResponse], Iterable[bytes]],
        per_second: float,
        retry_after: int = 1,
    ) -> None:
        self.app, self.interval, self.retry_after = app, 1.0 / per_second, retry_after
        self.last = float("-inf")
        self.refused = 0
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        now = time.monotonic()
        with self._lock:
            limited = now - self.last < self.interval
            if limited:
                self.refused += 1
            else:
                self.last = now
        if not limited:
            return self.app(environ, start_response)
        return _too_many(start_response, self.retry_after)


class EveryKth:
    """WSGI middleware: RateLimited's exact and fast sibling: every `k`-th request to the
    API's routes (under /v1/) gets the gateway's 429 with `Retry-After: 0`, whatever its
    timing. Only the API's routes: schemathesis's two capability probes (GET / and a path
    of its own) go out past its hooks, so no client can wait them out. `streams`: the
    text/event-stream answers let through."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]], k: int) -> None:
        self.app, self.k = app, k
        self.seen = self.refused = self.streams = 0
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if not environ["PATH_INFO"].startswith("/v1/"):
            return self.app(environ, start_response)
        with self._lock:
            self.seen += 1
            limited = self.seen % self.k == 0
            self.refused += limited
        if limited:
            return _too_many(start_response, 0)

        def counted(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            if any(
                k.lower() == "content-type" and v.startswith("text/event-stream")
                for k, v in headers
            ):
                with self._lock:
                    self.streams += 1
            return start_response(status, headers, *exc_info)

        return self.app(environ, counted)
