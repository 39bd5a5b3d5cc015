"""robust:http.* — HTTP framing an HTTP client would never send: a short or stalled body,
Content-Length with Transfer-Encoding, malformed or ambiguous heads, pipelining."""

from __future__ import annotations

import json
from typing import Any

from conformance.checks.robust.raw import (
    HEALTH,
    UNKNOWN,
    answered,
    deliver,
    error_shaped,
    minimal,
    refused,
    request_headers,
    robust,
    shown,
    target_of,
)
from conformance.engine.context import Context
from conformance.spec.bodies import error_body, message
from conformance.wire.rawhttp import RawExchange

HTTP2_ON_HTTP1 = "HTTP/2.0 on an HTTP/1.1 connection"


def malformed(ctx: Context) -> dict[str, Any]:
    return error_body(ctx.api, "invalid_request", message(ctx.api, "malformed_http"))


@robust("robust:http.short_body")
def short_body(ctx: Context) -> None:
    """Valid JSON shorter than its Content-Length, then a half-close: never executed; 400 malformed HTTP, then
    close; or a close without an answer (RFC 9112 section 8: a server may close on an incomplete message)."""
    body = json.dumps(minimal(ctx), separators=(",", ":")).encode()
    target = target_of(ctx)
    head = target.head(
        "POST",
        ctx.api.completions_path,
        request_headers(ctx, body, length=len(body) + 50, close=False),
    )
    ex = deliver(ctx, [head + body], expect=2, bound=ctx.config.timeout, half_close=True)
    refused(ctx, ex, "a body 50 bytes short", malformed(ctx), front=True, may_close=True)
    _closed_after_one(ctx, ex, "a body 50 bytes short")


@robust("robust:http.stalled_body")
def stalled_body(ctx: Context) -> None:
    """Part of a body, then nothing: 400 malformed HTTP once the server's body-read timeout passes
    (x-caps.body_read_seconds). Runs with --stall-seconds: how long to wait for that answer."""
    wait = ctx.config.stall_seconds
    if not wait:
        ctx.skip(
            f"waits for the server's body-read timeout ({ctx.api.caps['body_read_seconds']} s by the "
            "spec); pass --stall-seconds to run it"
        )
    body = json.dumps(minimal(ctx), separators=(",", ":")).encode()
    target = target_of(ctx)
    head = target.head("POST", ctx.api.completions_path, request_headers(ctx, body, close=False))
    ex = deliver(ctx, [head + body[:10]], expect=2, bound=wait)
    refused(ctx, ex, "a stalled body", malformed(ctx))
    _closed_after_one(ctx, ex, "a stalled body")
    # A body over the cap is refused at once, but a server that reads the rest before
    # answering (so the client reads a 413, not a reset) must not wait for it for ever.
    limit = ctx.api.caps["max_body_bytes"]
    head = target.head(
        "POST", ctx.api.completions_path, request_headers(ctx, body, length=limit + 1, close=False)
    )
    ex = deliver(ctx, [head + body[:10]], expect=2, bound=wait)
    refused(
        ctx,
        ex,
        "a stalled body over the cap",
        error_body(
            ctx.api, "request_too_large", message(ctx.api, "request_too_large", limit=limit)
        ),
    )
    _closed_after_one(ctx, ex, "a stalled body over the cap")


def _closed_after_one(ctx: Context, ex: RawExchange, what: str) -> None:
    """Where the next request would start is unknown: the server answers once, then closes."""
    ctx.expect(
        len(ex.responses) <= 1 and ex.closed,
        f"{what}: the connection stays open after the answer",
        expected="closed after one answer",
        received={"responses": len(ex.responses), "closed": ex.closed},
    )


@robust("robust:http.cl_te")
def cl_te(ctx: Context) -> None:
    """Content-Length and Transfer-Encoding together, hiding a second request: one answer, never two."""
    target = target_of(ctx)
    smuggled = target.head("GET", UNKNOWN, [("Authorization", f"Bearer {ctx.client.api_key}")])
    chunked = b"0\r\n\r\n" + smuggled
    head = target.head(
        "POST",
        ctx.api.completions_path,
        [
            ("Authorization", f"Bearer {ctx.client.api_key}"),
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(chunked))),
            ("Transfer-Encoding", "chunked"),
        ],
    )
    ex = deliver(ctx, [head + chunked], expect=2, bound=min(ctx.config.timeout, 5.0))
    response = answered(ctx, ex, "CL and TE")
    if response is not None and response.status >= 400:
        error_shaped(ctx, response, "CL and TE", front=True)
    ctx.expect(
        response is None or response.status < 500,
        "CL and TE: a server error",
        received=shown(response),
    )
    ctx.expect(
        len(ex.responses) <= 1,
        "the request hidden in the body was answered (smuggled)",
        expected="one answer",
        received=[shown(r) for r in ex.responses],
    )


def _framings(ctx: Context, body: bytes) -> dict[str, bytes]:
    """Request heads a lenient or a strict parser may take differently; the body is refused either way."""
    auth = f"Authorization: Bearer {ctx.client.api_key}"
    host = f"Host: {target_of(ctx).host_header}"
    line = f"POST {target_of(ctx).prefix}{ctx.api.completions_path} HTTP/1.1"

    def head(*lines: str, sep: str = "\r\n") -> bytes:
        return (
            sep.join([line, host, auth, "Content-Type: application/json", *lines]) + sep + sep
        ).encode("latin-1")

    n = len(body)
    return {
        "Content-Length -1": head("Content-Length: -1") + body,
        "Content-Length 1e3": head("Content-Length: 1e3") + body,
        "two differing Content-Lengths": head(f"Content-Length: {n}", "Content-Length: 5") + body,
        "Content-Length with a sign": head(f"Content-Length: +{n}") + body,
        "bare LF line endings": head(f"Content-Length: {n}", sep="\n") + body,
        "an obsolete folded header": head("X-Conformance: a", " folded", f"Content-Length: {n}")
        + body,
        "a NUL in a header value": head("X-Conformance: a\0b", f"Content-Length: {n}") + body,
        "a header name with a space": head("X Conformance: a", f"Content-Length: {n}") + body,
        HTTP2_ON_HTTP1: head(f"Content-Length: {n}").replace(b"HTTP/1.1", b"HTTP/2.0", 1) + body,
        "a chunk extension of 100,000 bytes": head("Transfer-Encoding: chunked")
        + f"{n:x};".encode()
        + b"x" * 100_000
        + b"\r\n"
        + body
        + b"\r\n0\r\n\r\n",
        "3,000 trailers": head("Transfer-Encoding: chunked")
        + f"{n:x}\r\n".encode()
        + body
        + b"\r\n0\r\n"
        + b"".join(b"X-T%d: x\r\n" % i for i in range(3000))
        + b"\r\n",
    }


@robust("robust:http.transfer_coding")
def transfer_coding(ctx: Context) -> None:
    """A valid body under a transfer coding the server does not decode (gzip or br before chunked):
    refused with the spec's 501 (RFC 9112 section 6.1), never read as if it were plain."""
    body = json.dumps(minimal(ctx), separators=(",", ":")).encode()
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    want = error_body(
        ctx.api, "unsupported_transfer_coding", message(ctx.api, "unsupported_transfer_coding")
    )
    for coding in ("gzip, chunked", "br, chunked"):
        head = target_of(ctx).head(
            "POST",
            ctx.api.completions_path,
            [
                *request_headers(ctx, None),
                ("Content-Type", "application/json"),
                ("Transfer-Encoding", coding),
            ],
        )
        ex = deliver(ctx, [head + chunked], bound=ctx.config.timeout)
        refused(ctx, ex, f"Transfer-Encoding {coding}", want, front=True, refusal="transfer_coding")


@robust("robust:http.chunk_size")
def chunk_size(ctx: Context) -> None:
    """A chunk whose size line declares 2**64 - 1 bytes, a few of them sent, the connection held
    open: refused at once, before the server's body-read timeout (x-caps.body_read_seconds), not
    after waiting for bytes no cap could take."""
    within = min(ctx.config.timeout, ctx.api.caps["body_read_seconds"] / 2)
    head = target_of(ctx).head(
        "POST",
        ctx.api.completions_path,
        [
            *request_headers(ctx, None, close=False),
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
    )
    ex = deliver(ctx, [head + b'FFFFFFFFFFFFFFFF\r\n{"model":'], bound=within)
    refused(ctx, ex, "a chunk size of 2**64 - 1", front=True, within=within)


# the framings a protocol refusal answers (x-protocol-refusals): RFC 9110 lets a server refuse
# an HTTP version it does not support with 505
REFUSALS = {HTTP2_ON_HTTP1: "http_version"}


@robust("robust:http.framing")
def framing(ctx: Context) -> None:
    """Malformed or ambiguous framing (bad Content-Lengths, bare LFs, folded headers, NULs, HTTP/2.0 on
    HTTP/1.1, odd Transfer-Encodings, huge chunk extensions and trailers): refused in the error shape."""
    body = json.dumps(
        {**minimal(ctx), "conformance_unknown_field": 1}, separators=(",", ":")
    ).encode()
    for name, data in _framings(ctx, body).items():
        ex = deliver(ctx, [data], bound=ctx.config.timeout)
        refused(ctx, ex, name, front=True, refusal=REFUSALS.get(name))


@robust("robust:http.pipelining")
def pipelining(ctx: Context) -> None:
    """20 requests sent at once on one connection: answered in order (/health's answer before the
    checks, 200 where it is served, and 404 alternating), each whole."""
    if ctx.server.health.get(True) is None:
        ctx.unproven(
            f"GET {HEALTH} gave no HTTP answer before the checks: nothing to expect of it pipelined"
        )
    target = target_of(ctx)
    paths = [HEALTH if i % 2 == 0 else UNKNOWN for i in range(20)]
    auth = [("Authorization", f"Bearer {ctx.client.api_key}")]
    data = b"".join(
        target.head("GET", p, auth + ([("Connection", "close")] if i == len(paths) - 1 else []))
        for i, p in enumerate(paths)
    )
    ex = deliver(ctx, [data], expect=len(paths), bound=ctx.config.timeout)
    if answered(ctx, ex, "pipelined requests") is None:
        return
    got = [r.status for r in ex.responses]
    # /health as it answered the key before the checks (ServerInfo.health)
    want = [
        ctx.server.health.get(True) if p == HEALTH else ctx.api.error_codes["not_found"]["status"]
        for p in paths
    ]
    ctx.equal("the statuses of the pipelined requests", want, got)
    for response, path in zip(ex.responses, paths):
        if path == UNKNOWN:
            error_shaped(ctx, response, f"pipelined GET {path}")
