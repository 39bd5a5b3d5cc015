"""robust:* — hostile input (api-decisions.md, "Hostile input"), as an attacker sends it.

Each check fails on a 5xx, on no answer within the run's --timeout (a hang), on
an error body that is not the API's shape, on an input value quoted back past
x-caps.quoted_chars, or on a server that does not answer GET /health with 200
afterwards. Where the spec fixes the answer, the whole body is compared.

Requests go over raw sockets (conformance/rawhttp.py) to the base URL only, one
connection at a time, each read bounded by --timeout. Every body that a broken
server could accept carries max_tokens 1, and a conformant one accepts none, so
the group generates no tokens (the quick profile runs it); the one check that
needs an accepted stream (disconnect.mid_stream) is in the full profile. A
stalled body waits the server's body-read timeout, so it only runs when
--stall-seconds says how long to wait.
"""
from __future__ import annotations

import base64
import json
import secrets
import struct
from collections.abc import Sequence
from typing import Any

import zstandard

from conformance.checks.common import schema_errors
from conformance.context import Context
from conformance.expect import REQUEST_ID_MASK, error_body, message, request_id_re, steering_body
from conformance.rawhttp import RawExchange, RawResponse, Target, exchange
from conformance.registry import register
from contract import spec

COMPLETIONS = "/v1/completions"
HEALTH = "/health"
UNKNOWN = "/v1/conformance-robust-unknown"
TAGS = ("robust",)


# -- sending -----------------------------------------------------------------------------

def _target(ctx: Context) -> Target:
    return Target.from_base_url(ctx.config.base_url)


def _headers(ctx: Context, body: bytes | None, extra: Sequence[tuple[str, str]] = (), *,
             length: int | None = None, close: bool = True) -> list[tuple[str, str]]:
    out = [("Authorization", f"Bearer {ctx.client.api_key}")]
    if body is not None:
        out += [("Content-Type", "application/json"),
                ("Content-Length", str(len(body) if length is None else length))]
    out += list(extra)
    if close:
        out.append(("Connection", "close"))
    return out


def send(ctx: Context, method: str, path: str, body: bytes | None = None, *,
         extra: Sequence[tuple[str, str]] = (), **kw: Any) -> RawExchange:
    head = _target(ctx).head(method, path, _headers(ctx, body, extra))
    return exchange(_target(ctx), [head + (body or b"")], bound=ctx.config.timeout, **kw)


def post(ctx: Context, payload: Any) -> RawExchange:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
    return send(ctx, "POST", COMPLETIONS, raw)


def minimal(ctx: Context, **fields: Any) -> dict[str, Any]:
    return {"model": ctx.config.model, "prompt": [0], "max_tokens": 1, **fields}


# -- judging -----------------------------------------------------------------------------

def _shown(response: RawResponse | None) -> Any:
    if response is None:
        return None
    text = response.body[:600].decode("utf-8", "replace")
    return {"status": response.status, "body": text + ("..." if len(response.body) > 600 else "")}


def answered(ctx: Context, ex: RawExchange, what: str) -> RawResponse | None:
    """The first response, or a finding: no connection, a hang, or a close without an answer."""
    if ex.error is not None:
        ctx.fail(f"{what}: no connection: {ex.error}")
        return None
    if ex.first is None:
        reason = (f"no answer within {ctx.config.timeout:g} s (a hang)" if ex.timed_out
                  else "the connection closed without an answer")
        ctx.fail(f"{what}: {reason}", received=ex.data[:300].decode("latin-1"))
    for response in ex.responses:       # a broken server's accepted request counts against the ceiling
        data = response.json() if response.status == 200 else None
        usage = data.get("usage") if isinstance(data, dict) else None
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            ctx.client.add_tokens(usage["completion_tokens"])
    return ex.first


def error_shaped(ctx: Context, response: RawResponse, what: str) -> bool:
    """A status below 500 and at least 400, the ErrorBody shape, X-Request-Id equal to its request_id."""
    ok = ctx.expect(response.status < 500, f"{what}: a server error", expected="a 4xx", received=_shown(response))
    ok &= ctx.expect(400 <= response.status, f"{what}: not refused", expected="a 4xx", received=_shown(response))
    data = response.json()
    problems = schema_errors(data, spec().schema("ErrorBody")) if data is not None else ["not JSON"]
    ok &= ctx.expect(not problems, f"{what}: the error body is not the API's shape",
                     expected="ErrorBody", received={"problems": problems, **(_shown(response) or {})})
    rid = response.headers.get("x-request-id")
    ok &= ctx.expect(rid is not None and bool(request_id_re().fullmatch(rid)) and
                     isinstance(data, dict) and data.get("request_id") == rid,
                     f"{what}: X-Request-Id missing or not the body's request_id", received=rid)
    return ok


def refused(ctx: Context, ex: RawExchange, what: str, body: dict[str, Any] | None = None,
            echo: str | None = None) -> RawResponse | None:
    """Answered, in the error shape; the whole body when the spec fixes it; `echo` not quoted back."""
    response = answered(ctx, ex, what)
    if response is None:
        return None
    error_shaped(ctx, response, what)
    if body is not None:
        data = response.json()
        if isinstance(data, dict) and "request_id" in data:
            data = {**data, "request_id": REQUEST_ID_MASK}
        ctx.equal(f"{what}: the body", body, data)
        status = spec().error_codes[body["error"]["code"]]["status"]
        ctx.expect(response.status == status, f"{what}: status {response.status}, expected {status}",
                   expected=status, received=response.status)
    if echo is not None:
        not_echoed(ctx, echo, response, what)
    return response


def not_echoed(ctx: Context, sent: str, response: RawResponse, what: str) -> None:
    """No more than x-caps.quoted_chars characters of `sent` come back, in body or headers."""
    window = sent[:spec().caps["quoted_chars"] + 1]
    text = response.body.decode("utf-8", "replace") + json.dumps(response.headers)
    ctx.expect(window not in text and json.dumps(window)[1:-1] not in text,
               f"{what}: the input comes back past {spec().caps['quoted_chars']} characters",
               expected=f"at most {spec().caps['quoted_chars']} characters of it",
               received={"bytes": len(response.body), **(_shown(response) or {})})


def healthy_after(ctx: Context) -> None:
    ex = exchange(_target(ctx), [_target(ctx).head("GET", HEALTH, [("Connection", "close")])],
                  bound=ctx.config.timeout)
    response = answered(ctx, ex, f"GET {HEALTH} afterwards")
    if response is not None:
        ctx.expect(response.status == 200, f"the server is unhealthy afterwards: GET {HEALTH} answered "
                   f"{response.status}", expected=200, received=_shown(response))


def cut(text: str) -> str:
    """How an error quotes an input value (x-caps.quoted_chars, x-messages.cut_mark)."""
    limit = spec().caps["quoted_chars"]
    return text if len(text) <= limit else text[:limit] + spec().messages["cut_mark"]


def invalid_json() -> dict[str, Any]:
    return error_body("invalid_json", message("invalid_json"))


# -- text that is not Unicode scalar values ----------------------------------------------

def _surrogate_bodies(ctx: Context, lone: bytes) -> dict[str, bytes]:
    m = ctx.config.model.encode()
    return {
        "prompt": b'{"model":"' + m + b'","prompt":"a' + lone + b'","max_tokens":1}',
        "key": b'{"model":"' + m + b'","prompt":"a","max_tokens":1,"' + lone + b'":1}',
        "model": b'{"model":"' + lone + b'","prompt":"a","max_tokens":1}',
        "stop": b'{"model":"' + m + b'","prompt":"a","max_tokens":1,"stop":["' + lone + b'"]}',
        "priority": b'{"model":"' + m + b'","prompt":"a","max_tokens":1,"priority":"' + lone + b'"}',
    }


@register("robust:surrogate.escaped", tags=TAGS)
def surrogate_escaped(ctx: Context) -> None:
    """A lone surrogate escape (\\ud800, \\udc00\\ud800) in the prompt, a key, the model, stop, priority: 400 invalid_json."""
    for lone in (b"\\ud800", b"\\udc00\\ud800"):
        for place, raw in _surrogate_bodies(ctx, lone).items():
            refused(ctx, post(ctx, raw), f"{lone.decode()} in {place}", invalid_json())
    healthy_after(ctx)


@register("robust:surrogate.raw_bytes", tags=TAGS)
def surrogate_raw_bytes(ctx: Context) -> None:
    """A surrogate written as raw bytes ED A0 80 (not UTF-8) anywhere in the body: 400 invalid_json."""
    for place, raw in _surrogate_bodies(ctx, b"\xed\xa0\x80").items():
        refused(ctx, post(ctx, raw), f"raw ED A0 80 in {place}", invalid_json())
    healthy_after(ctx)


# -- JSON edge cases ----------------------------------------------------------------------

@register("robust:json.constants", tags=TAGS)
def json_constants(ctx: Context) -> None:
    """NaN, Infinity and -Infinity literals are not JSON: 400 invalid_json."""
    for literal in ("NaN", "Infinity", "-Infinity"):
        raw = f'{{"model":"{ctx.config.model}","prompt":[0],"max_tokens":1,"temperature":{literal}}}'.encode()
        refused(ctx, post(ctx, raw), f"temperature {literal}", invalid_json())
    healthy_after(ctx)


@register("robust:json.huge_numbers", tags=TAGS)
def json_huge_numbers(ctx: Context) -> None:
    """1e999, 1e-999 and a 5,000-digit integer where an integer belongs: refused in the error shape, not echoed."""
    digits = "9" * 5000
    for literal in ("1e999", "-1e999", "1e-999", digits, "-" + digits):
        raw = f'{{"model":"{ctx.config.model}","prompt":[0],"max_tokens":{literal}}}'.encode()
        refused(ctx, post(ctx, raw), f"max_tokens {literal[:12]}", echo=literal if len(literal) > 100 else None)
    healthy_after(ctx)


@register("robust:json.deep_nesting", tags=TAGS)
def json_deep_nesting(ctx: Context) -> None:
    """Arrays and objects nested 100,000 deep: refused in the error shape."""
    depth = 100_000
    arrays = b"[" * depth + b"]" * depth
    objects = b'{"a":' * depth + b"1" + b"}" * depth
    for name, nested in (("arrays", arrays), ("objects", objects)):
        raw = b'{"model":"' + ctx.config.model.encode() + b'","max_tokens":1,"prompt":' + nested + b"}"
        refused(ctx, post(ctx, raw), f"{name} nested {depth} deep")
    healthy_after(ctx)


# -- steering vectors: compression bombs --------------------------------------------------

def _tensor(frame: bytes, shape: list[int]) -> dict[str, Any]:
    return {"data": base64.b64encode(frame).decode(), "dtype": "float32",
            "original_dtype": "torch.float32", "shape": shape, "compression": "zstd"}


def _zeros(size: int) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=True).compress(bytes(size))


def _steer(ctx: Context, *vectors: dict[str, Any]) -> dict[str, Any]:
    return minimal(ctx, apply_steering_vectors=[{"activations": v, "layer_indices": [0]} for v in vectors])


def _declaring(frame: bytes, size: int) -> bytes:
    """The frame with its header's content size rewritten to `size`, in the 8-byte field
    (RFC 8878 3.1.1.1: descriptor, window descriptor unless single-segment, dictionary id, size)."""
    fhd = frame[4]
    single = fhd & 0x20
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    old = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    return frame[:4] + bytes([(fhd & 0x3F) | 0xC0]) + frame[5:at] + struct.pack("<Q", size) + frame[at + old:]


@register("robust:steering.positions", tags=TAGS)
def steering_positions(ctx: Context) -> None:
    """A 200-byte frame declaring 1 TiB (shape [1, 67108864, hidden], sizes agreeing): 400 before anything is decoded."""
    hidden, positions = ctx.model.hidden_size, 67108864
    frame = _declaring(_zeros(4 * hidden), positions * hidden * 4)
    param = "apply_steering_vectors[0]"
    refused(ctx, post(ctx, _steer(ctx, _tensor(frame, [1, positions, hidden]))), "1 TiB declared",
            steering_body("positions", param, got=positions, max_model_len=ctx.max_model_len))
    healthy_after(ctx)


@register("robust:steering.decoded_cap", tags=TAGS)
def steering_decoded_cap(ctx: Context) -> None:
    """Vectors of zeros that decode past x-caps.steering_decoded_bytes in all: 400 on the one that passes it."""
    hidden, cap = ctx.model.hidden_size, spec().caps["steering_decoded_bytes"]
    positions = max(1, min(ctx.max_model_len, cap // (hidden * 4)))
    size = positions * hidden * 4
    count = cap // size + 1
    frame = _zeros(size)
    vectors = [_tensor(frame, [1, positions, hidden])] * count
    param = f"apply_steering_vectors[{count - 1}]"
    refused(ctx, post(ctx, _steer(ctx, *vectors)), f"{count} vectors of {size} bytes",
            steering_body("decoded_cap", param, cap=cap, total=count * size))
    healthy_after(ctx)


@register("robust:steering.frames", tags=TAGS)
def steering_frames(ctx: Context) -> None:
    """One zstd frame and nothing after it, inflating to exactly its declared size: trailing bytes, a
    second frame, and a header that lies (the data inflates past it, or short of it) get 400."""
    hidden = ctx.model.hidden_size
    want = hidden * 4
    good = _zeros(want)
    cases = {"trailing bytes": good + b"junk", "a second frame": good + good,
             "inflating past its size": _declaring(_zeros(want + 4096), want),
             "inflating short of its size": _declaring(_zeros(want // 2), want)}
    param = "apply_steering_vectors[0]"
    for name, frame in cases.items():
        refused(ctx, post(ctx, _steer(ctx, _tensor(frame, [1, hidden]))), name,
                steering_body("zstd", param))
    healthy_after(ctx)


# -- priority ----------------------------------------------------------------------------

@register("robust:priority.int64_string", tags=TAGS)
def priority_int64_string(ctx: Context) -> None:
    """priority as a string past the int64 range is refused like the number."""
    schema = spec().schema("CompletionRequest")["properties"]["priority"]["anyOf"][0]
    for value in (schema["maximum"] + 1, schema["minimum"] - 1, 10 ** 19 - 1):
        refused(ctx, post(ctx, minimal(ctx, priority=str(value))), f"priority {value!r} as a string",
                error_body("invalid_request", spec().messages["range"]["pattern"].format(param="priority"),
                           "priority"))
    healthy_after(ctx)


# -- no echo -------------------------------------------------------------------------------

def _long(n: int) -> str:
    """A distinctive input value of n characters."""
    seed = "conformance-" + secrets.token_hex(8) + "-"
    return (seed * (n // len(seed) + 1))[:n]


@register("robust:echo.model", tags=TAGS)
def echo_model(ctx: Context) -> None:
    """A 256 KiB model name: 404 quoting at most x-caps.quoted_chars of it."""
    name = _long(1 << 18)
    refused(ctx, post(ctx, minimal(ctx, model=name)), "a 256 KiB model name",
            error_body("model_not_found", message("model_not_found", model=cut(name)), "model"), echo=name)
    healthy_after(ctx)


@register("robust:echo.unknown_key", tags=TAGS)
def echo_unknown_key(ctx: Context) -> None:
    """A 256 KiB unknown key: 400 with the key cut in the message and the param."""
    key = _long(1 << 18)
    refused(ctx, post(ctx, {**minimal(ctx), key: 1}), "a 256 KiB unknown key",
            error_body("invalid_request", message("unknown_field", field=cut(key)), cut(key)), echo=key)
    healthy_after(ctx)


@register("robust:echo.path", tags=TAGS)
def echo_path(ctx: Context) -> None:
    """A 2,000-character unknown path: 404 quoting at most x-caps.quoted_chars of it."""
    path = "/v1/" + _long(2000)
    full = _target(ctx).prefix + path
    refused(ctx, send(ctx, "GET", path), "a long unknown path",
            error_body("not_found", message("not_found", method="GET", path=cut(full))), echo=path)
    healthy_after(ctx)


# -- HTTP framing ------------------------------------------------------------------------

def malformed() -> dict[str, Any]:
    return error_body("invalid_request", message("malformed_http"))


@register("robust:http.short_body", tags=TAGS)
def short_body(ctx: Context) -> None:
    """Valid JSON shorter than its Content-Length, then a half-close: never executed; 400 malformed HTTP, then close."""
    body = json.dumps(minimal(ctx), separators=(",", ":")).encode()
    target = _target(ctx)
    head = target.head("POST", COMPLETIONS, _headers(ctx, body, length=len(body) + 50, close=False))
    ex = exchange(target, [head + body], expect=2, bound=ctx.config.timeout, half_close=True)
    refused(ctx, ex, "a body 50 bytes short", malformed())
    _closed_after_one(ctx, ex, "a body 50 bytes short")
    healthy_after(ctx)


@register("robust:http.stalled_body", tags=TAGS)
def stalled_body(ctx: Context) -> None:
    """Part of a body, then nothing: 400 malformed HTTP once the server's body-read timeout passes
    (x-caps.body_read_seconds). Runs with --stall-seconds: how long to wait for that answer."""
    wait = ctx.config.stall_seconds
    if not wait:
        ctx.skip(f"waits for the server's body-read timeout ({spec().caps['body_read_seconds']} s by the "
                 "spec); pass --stall-seconds to run it")
    body = json.dumps(minimal(ctx), separators=(",", ":")).encode()
    target = _target(ctx)
    head = target.head("POST", COMPLETIONS, _headers(ctx, body, close=False))
    ex = exchange(target, [head + body[:10]], expect=2, bound=wait)
    refused(ctx, ex, "a stalled body", malformed())
    _closed_after_one(ctx, ex, "a stalled body")
    # A body over the cap is refused at once, but a server that reads the rest before
    # answering (so the client reads a 413, not a reset) must not wait for it for ever.
    limit = spec().caps["max_body_bytes"]
    head = target.head("POST", COMPLETIONS, _headers(ctx, body, length=limit + 1, close=False))
    ex = exchange(target, [head + body[:10]], expect=2, bound=wait)
    refused(ctx, ex, "a stalled body over the cap",
            error_body("request_too_large", message("request_too_large", limit=limit)))
    _closed_after_one(ctx, ex, "a stalled body over the cap")
    healthy_after(ctx)


def _closed_after_one(ctx: Context, ex: RawExchange, what: str) -> None:
    """Where the next request would start is unknown: the server answers once, then closes."""
    ctx.expect(len(ex.responses) <= 1 and ex.closed, f"{what}: the connection stays open after the answer",
               expected="closed after one answer", received={"responses": len(ex.responses), "closed": ex.closed})


@register("robust:http.cl_te", tags=TAGS)
def cl_te(ctx: Context) -> None:
    """Content-Length and Transfer-Encoding together, hiding a second request: one answer, never two."""
    target = _target(ctx)
    smuggled = target.head("GET", UNKNOWN, [("Authorization", f"Bearer {ctx.client.api_key}")])
    chunked = b"0\r\n\r\n" + smuggled
    head = target.head("POST", COMPLETIONS, [
        ("Authorization", f"Bearer {ctx.client.api_key}"), ("Content-Type", "application/json"),
        ("Content-Length", str(len(chunked))), ("Transfer-Encoding", "chunked")])
    ex = exchange(target, [head + chunked], expect=2, bound=min(ctx.config.timeout, 5.0))
    response = answered(ctx, ex, "CL and TE")
    if response is not None and response.status >= 400:
        error_shaped(ctx, response, "CL and TE")
    ctx.expect(response is None or response.status < 500, "CL and TE: a server error", received=_shown(response))
    ctx.expect(len(ex.responses) <= 1, "the request hidden in the body was answered (smuggled)",
               expected="one answer", received=[_shown(r) for r in ex.responses])
    healthy_after(ctx)


def _framings(ctx: Context, body: bytes) -> dict[str, bytes]:
    """Request heads a lenient or a strict parser may take differently; the body is refused either way."""
    auth = f"Authorization: Bearer {ctx.client.api_key}"
    host = f"Host: {_target(ctx).host_header}"
    line = f"POST {_target(ctx).prefix}{COMPLETIONS} HTTP/1.1"

    def head(*lines: str, sep: str = "\r\n") -> bytes:
        return (sep.join([line, host, auth, "Content-Type: application/json", *lines]) + sep + sep).encode("latin-1")
    n = len(body)
    return {
        "Content-Length -1": head("Content-Length: -1") + body,
        "Content-Length 1e3": head("Content-Length: 1e3") + body,
        "two differing Content-Lengths": head(f"Content-Length: {n}", "Content-Length: 5") + body,
        "Content-Length with a sign": head(f"Content-Length: +{n}") + body,
        "bare LF line endings": head(f"Content-Length: {n}", sep="\n") + body,
        "an obsolete folded header": head("X-Conformance: a", " folded", f"Content-Length: {n}") + body,
        "a NUL in a header value": head("X-Conformance: a\0b", f"Content-Length: {n}") + body,
        "a header name with a space": head("X Conformance: a", f"Content-Length: {n}") + body,
        "HTTP/2.0 on an HTTP/1.1 connection": head(f"Content-Length: {n}").replace(b"HTTP/1.1", b"HTTP/2.0", 1) + body,
        "Transfer-Encoding gzip, chunked": head("Transfer-Encoding: gzip, chunked") + b"0\r\n\r\n",
        "a chunk extension of 100,000 bytes": head("Transfer-Encoding: chunked")
        + f"{n:x};".encode() + b"x" * 100_000 + b"\r\n" + body + b"\r\n0\r\n\r\n",
        "3,000 trailers": head("Transfer-Encoding: chunked") + f"{n:x}\r\n".encode() + body + b"\r\n0\r\n"
        + b"".join(b"X-T%d: x\r\n" % i for i in range(3000)) + b"\r\n",
    }


@register("robust:http.framing", tags=TAGS)
def framing(ctx: Context) -> None:
    """Malformed or ambiguous framing (bad Content-Lengths, bare LFs, folded headers, NULs, HTTP/2.0 on
    HTTP/1.1, odd Transfer-Encodings, huge chunk extensions and trailers): refused in the error shape."""
    body = json.dumps({**minimal(ctx), "conformance_unknown_field": 1}, separators=(",", ":")).encode()
    for name, data in _framings(ctx, body).items():
        ex = exchange(_target(ctx), [data], bound=ctx.config.timeout)
        refused(ctx, ex, name)
    healthy_after(ctx)


@register("robust:http.pipelining", tags=TAGS)
def pipelining(ctx: Context) -> None:
    """20 requests sent at once on one connection: answered in order (200 and 404 alternating), each whole."""
    target = _target(ctx)
    paths = [HEALTH if i % 2 == 0 else UNKNOWN for i in range(20)]
    auth = [("Authorization", f"Bearer {ctx.client.api_key}")]
    data = b"".join(target.head("GET", p, auth + ([("Connection", "close")] if i == len(paths) - 1 else []))
                    for i, p in enumerate(paths))
    ex = exchange(target, [data], expect=len(paths), bound=ctx.config.timeout)
    if answered(ctx, ex, "pipelined requests") is None:
        return
    got = [r.status for r in ex.responses]
    want = [200 if p == HEALTH else spec().error_codes["not_found"]["status"] for p in paths]
    ctx.equal("the statuses of the pipelined requests", want, got)
    for response, path in zip(ex.responses, paths):
        if path == UNKNOWN:
            error_shaped(ctx, response, f"pipelined GET {path}")
    healthy_after(ctx)


# -- headers and paths ----------------------------------------------------------------------

def _header_check(ctx: Context, what: str, extra: list[tuple[str, str]], echo: str | None = None) -> None:
    """A request the server may answer (200) or refuse (a 4xx in the error shape), but never 5xx or hang."""
    ex = send(ctx, "GET", HEALTH, extra=extra)
    response = answered(ctx, ex, what)
    if response is not None and response.status != 200:
        error_shaped(ctx, response, what)
        if echo is not None:
            not_echoed(ctx, echo, response, what)
    healthy_after(ctx)


@register("robust:headers.huge_value", tags=TAGS)
def headers_huge_value(ctx: Context) -> None:
    """One 64 KiB header: 200, or refused in the error shape without quoting it."""
    value = _long(1 << 16)
    _header_check(ctx, "a 64 KiB header", [("X-Conformance-Huge", value)], echo=value)


@register("robust:headers.many", tags=TAGS)
def headers_many(ctx: Context) -> None:
    """2,000 headers: 200, or refused in the error shape."""
    _header_check(ctx, "2,000 headers", [(f"X-Conformance-{i}", "x") for i in range(2000)])


@register("robust:headers.long_request_line", tags=TAGS)
def long_request_line(ctx: Context) -> None:
    """A 64 KiB request line: refused in the error shape (404, 414 or 400), never 5xx or a hang, not quoted back."""
    path = "/v1/" + _long(1 << 16)
    ex = send(ctx, "GET", path)
    refused(ctx, ex, "a 64 KiB request line", echo=path)
    healthy_after(ctx)


PATH_TRICKS = ("/v1/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "//v1//completions", "/v1/completions/",
               "/V1/COMPLETIONS", "/v1/completions%00", "/v1/completions;x", "/v1/%ff%fe",
               "/v1/completions?" + "a=1&" * 500)


@register("robust:path.tricks", tags=TAGS)
def path_tricks(ctx: Context) -> None:
    """Traversal, doubled slashes, case, NUL and invalid percent-escapes, a long query: each a 4xx in the error shape."""
    for path in PATH_TRICKS:
        refused(ctx, send(ctx, "GET", path), f"GET {path[:40]}")
    healthy_after(ctx)


# -- disconnects ----------------------------------------------------------------------------

@register("robust:disconnect.mid_body", tags=TAGS)
def disconnect_mid_body(ctx: Context) -> None:
    """A client that resets the connection halfway through its body leaves the server healthy."""
    body = json.dumps(minimal(ctx), separators=(",", ":")).encode()
    target = _target(ctx)
    for _ in range(5):
        head = target.head("POST", COMPLETIONS, _headers(ctx, body, close=False))
        exchange(target, [head + body[: len(body) // 2]], bound=ctx.config.timeout, linger_reset=True)
    healthy_after(ctx)


@register("robust:disconnect.mid_stream", tags=TAGS, tokens=lambda config: 5)
def disconnect_mid_stream(ctx: Context) -> None:
    """Clients that reset the connection as a stream starts leave the server healthy (5 streams of max_tokens 1)."""
    body = json.dumps(minimal(ctx, stream=True), separators=(",", ":")).encode()
    target = _target(ctx)
    for _ in range(5):
        head = target.head("POST", COMPLETIONS, _headers(ctx, body, close=False))
        exchange(target, [head + body], bound=ctx.config.timeout, linger_reset=True)
    ctx.client.add_tokens(5)
    healthy_after(ctx)
