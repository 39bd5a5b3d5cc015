"""The raw layer of the robust: checks: sending over raw sockets (conformance/wire/rawhttp.py,
which knows nothing of checks) with the run's key and bound, and the judging every family
shares: an answer at all (no hang), the error shape, the whole body where the spec fixes it,
no input quoted back past x-caps.quoted_chars, and a server still healthy afterwards.

`front=True` marks a request no HTTP client sends (malformed framing, huge heads, path
tricks), which a front (nginx, an ingress, a load balancer) refuses by itself: its answer
in its own words (not JSON), a 4xx that names the front the user declared (--front;
who_answered.names_front), is a warning, not a finding (conformance/README.md, "A front's own
words"). A close or a reset without an answer names no one: a finding. A hang, a 5xx, an
accepted request, an answer in JSON that is not the API's, an echo and an unhealthy server
stay findings."""

from __future__ import annotations

import functools
import json
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.engine.shapes import schema_errors
from conformance.spec.bodies import REQUEST_ID_MASK, error_body, message, request_id_re
from conformance.wire import meter
from conformance.wire.rawhttp import RawExchange, RawResponse, Target, exchange
from conformance.wire.who_answered import names_front, who_answered

HEALTH = "/health"
UNKNOWN = "/v1/conformance-robust-unknown"
TAGS = ("robust",)


# -- sending -----------------------------------------------------------------------------


def target_of(ctx: Context) -> Target:
    return Target.from_base_url(ctx.config.base_url)


def request_headers(
    ctx: Context,
    body: bytes | None,
    extra: Sequence[tuple[str, str]] = (),
    *,
    length: int | None = None,
    close: bool = True,
) -> list[tuple[str, str]]:
    out = [("Authorization", f"Bearer {ctx.client.api_key}")]
    if body is not None:
        out += [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body) if length is None else length)),
        ]
    out += list(extra)
    if close:
        out.append(("Connection", "close"))
    return out


def deliver(ctx: Context, chunks: Sequence[bytes], **kw: Any) -> RawExchange:
    """rawhttp.exchange to the run's target, paced by the run's rate limit (Client.paced):
    a 429 with Retry-After is waited out and sent again, as the client does. A halted client
    sends no POST that could generate (Ledger.not_halted_raw)."""
    ctx.client.ledger.not_halted_raw(b"".join(chunks[:1]))
    target = target_of(ctx)
    ex = ctx.client.paced(
        lambda: exchange(target, chunks, **kw),
        "a raw request",
        answer=_answer,
        requests=kw.get("expect", 1),  # pipelined requests each take their turn
    )
    _observed(ctx, target, b"".join(chunks), ex)
    return ex


def _observed(ctx: Context, target: Target, sent: bytes, ex: RawExchange) -> None:
    """The first answer, for the client's raw observers (spec coverage): the statuses and codes
    only a raw request provokes count as covered (a request line that does not parse is none)."""
    parts = sent.split(b"\r\n", 1)[0].split(b" ")
    if ex.first is None or len(parts) != 3 or not ctx.client.raw_observers:
        return
    method, path = parts[0].decode("latin-1"), parts[1].decode("latin-1")
    path = path.removeprefix(target.prefix) if target.prefix else path
    body = sent.partition(b"\r\n\r\n")[2]
    for observer in ctx.client.raw_observers:
        observer(method, path, body, ex.first.status, ex.first.headers, ex.first.json())


def _answer(ex: RawExchange) -> tuple[int | None, Mapping[str, str]]:
    first = ex.first
    return (first.status, first.headers) if first else (None, {})


def send(
    ctx: Context,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    extra: Sequence[tuple[str, str]] = (),
    **kw: Any,
) -> RawExchange:
    # a hostile body is priced at what a lax server may read in it (1e999: no bound), which no
    # ceiling holds: raw requests are not held to the ceiling, only to a halted client (deliver)
    head = target_of(ctx).head(method, path, request_headers(ctx, body, extra))
    return deliver(ctx, [head + (body or b"")], bound=ctx.config.timeout, **kw)


def post(ctx: Context, payload: Any) -> RawExchange:
    raw = (
        payload
        if isinstance(payload, bytes)
        else json.dumps(payload, separators=(",", ":")).encode()
    )
    return send(ctx, "POST", ctx.api.completions_path, raw)


def minimal(ctx: Context, **fields: Any) -> dict[str, Any]:
    return {"model": ctx.config.model, "prompt": [0], "max_tokens": 1, **fields}


# -- judging -----------------------------------------------------------------------------


def shown(response: RawResponse | None) -> Any:
    if response is None:
        return None
    text = response.body[:600].decode("utf-8", "replace")
    return {"status": response.status, "body": text + ("..." if len(response.body) > 600 else "")}


def answered(
    ctx: Context,
    ex: RawExchange,
    what: str,
    *,
    may_close: bool = False,
    within: float | None = None,
) -> RawResponse | None:
    """The first response, or a finding: no connection, a hang (no answer `within` the bound
    the exchange was sent with: --timeout unless said), or a close without an answer (nothing
    with `may_close`, where HTTP lets any server close). A close is never a warning, even with
    `front`: it says nothing of who closed."""
    if ex.error is not None:
        ctx.fail(f"{what}: no connection: {ex.error}")
        return None
    if ex.first is None:
        if ex.malformed is not None:
            ctx.fail(
                f"{what}: an answer that is not HTTP/1.1 ({ex.malformed})",
                received=ex.data[:300].decode("latin-1"),
            )
        elif ex.timed_out:
            ctx.fail(
                f"{what}: no answer within {within or ctx.config.timeout:g} s (a hang)",
                received=ex.data[:300].decode("latin-1"),
            )
        elif not may_close:
            ctx.fail(
                f"{what}: the connection {'was reset' if ex.reset else 'closed'} without an answer",
                received=ex.data[:300].decode("latin-1"),
            )
    for response in ex.responses:  # a broken server's accepted request counts against the ceiling
        if response.status == 200:
            ctx.client.ledger.add(meter.answer(response.json(), None, 0, 0).tokens)
    return ex.first


def in_own_words(response: RawResponse) -> bool:
    """Not JSON at all: not the API's answer (it answers every refusal in JSON), a front's page."""
    return response.json() is None


def error_shaped(
    ctx: Context,
    response: RawResponse,
    what: str,
    *,
    front: bool = False,
    status: int | None = None,
    refusals: Collection[int] = (),
) -> bool:
    """A status below 500 and at least 400 (or `status`, the one the spec gives the expected
    error: 501 for a transfer coding, or one of `refusals`, the spec's x-protocol-refusals), the
    ErrorBody shape, X-Request-Id equal to its request_id. A 4xx or a protocol refusal not in JSON
    names who answered; with `front`, the declared front's is a warning (and the rest unjudged).
    Any other 5xx is a server error whoever wrote it."""
    ok = ctx.expect(
        response.status < 500 or response.status == status or response.status in refusals,
        f"{what}: a server error",
        expected="a 4xx" if status is None or status < 500 else status,
        received=shown(response),
    )
    ok &= ctx.expect(
        response.status >= 400, f"{what}: not refused", expected="a 4xx", received=shown(response)
    )
    data = response.json()
    problems = (
        schema_errors(data, ctx.api.schema("ErrorBody")) if data is not None else ["not JSON"]
    )
    if problems:
        named = (response.headers, response.body, response.status, ctx.config.front, refusals)
        who = who_answered(*named)
        warns = front and ok and in_own_words(response) and names_front(*named)
        (ctx.warn if warns else ctx.fail)(
            f"{what}: the error body is not the API's shape ({who})",
            expected="ErrorBody",
            received={"problems": problems, **(shown(response) or {})},
        )
        if warns:
            return False
        ok = False
    rid = response.headers.get("x-request-id")
    ok &= ctx.expect(
        rid is not None
        and bool(request_id_re(ctx.api).fullmatch(rid))
        and isinstance(data, dict)
        and data.get("request_id") == rid,
        f"{what}: X-Request-Id missing or not the body's request_id",
        received=rid,
    )
    return ok


def refused(
    ctx: Context,
    ex: RawExchange,
    what: str,
    body: dict[str, Any] | None = None,
    echo: str | None = None,
    *,
    front: bool = False,
    may_close: bool = False,
    within: float | None = None,
    refusal: str | None = None,
) -> RawResponse | None:
    """Answered, in the error shape; the whole body when the spec fixes it (a 5xx then too, where
    the spec's code has one); `echo` not quoted back. `front`: as `error_shaped` takes it;
    `may_close`, `within`: as `answered` takes them (a front's page is not compared with the
    API's body); `refusal`: the kind of protocol refusal the request may meet (a key of the
    spec's x-protocol-refusals)."""
    response = answered(ctx, ex, what, may_close=may_close, within=within)
    if response is None:
        return None
    status = None if body is None else ctx.api.error_codes[body["error"]["code"]]["status"]
    refusals = ctx.api.protocol_refusals.get(refusal, frozenset()) if refusal else frozenset()
    error_shaped(ctx, response, what, front=front, status=status, refusals=refusals)
    if body is not None and not (front and in_own_words(response) and response.status >= 400):
        data = response.json()
        if isinstance(data, dict) and "request_id" in data:
            data = {**data, "request_id": REQUEST_ID_MASK}
        ctx.equal(f"{what}: the body", body, data)
        status = ctx.api.error_codes[body["error"]["code"]]["status"]
        ctx.expect(
            response.status == status,
            f"{what}: status {response.status}, expected {status}",
            expected=status,
            received=response.status,
        )
    if echo is not None:
        not_echoed(ctx, echo, response, what)
    return response


def not_echoed(ctx: Context, sent: str, response: RawResponse, what: str) -> None:
    """No more than x-caps.quoted_chars characters of `sent` come back, in body or headers."""
    window = sent[: ctx.api.caps["quoted_chars"] + 1]
    text = response.body.decode("utf-8", "replace") + json.dumps(response.headers)
    ctx.expect(
        window not in text and json.dumps(window)[1:-1] not in text,
        f"{what}: the input comes back past {ctx.api.caps['quoted_chars']} characters",
        expected=f"at most {ctx.api.caps['quoted_chars']} characters of it",
        received={"bytes": len(response.body), **(shown(response) or {})},
    )


def robust(
    check_id: str, **kw: Any
) -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    """Register a robust check: every one ends by asking whether the server is still healthy
    (healthy_after), a property of the group, not a line each check must remember."""

    def wrap(func: Callable[[Context], None]) -> Callable[[Context], None]:
        @functools.wraps(func)
        def check(ctx: Context) -> None:
            func(ctx)
            healthy_after(ctx)

        return register(check_id, tags=TAGS, **kw)(check)

    return wrap


def healthy_after(ctx: Context) -> None:
    """GET /health without a key answers as it did before the checks (ServerInfo.health): a
    server whose /health is keyed (LiteLLM: 401) or absent (llama.cpp: 404) says so throughout."""
    before = ctx.server.health.get(False)
    ex = deliver(
        ctx,
        [target_of(ctx).head("GET", HEALTH, [("Connection", "close")])],
        bound=ctx.config.timeout,
    )
    response = answered(ctx, ex, f"GET {HEALTH} afterwards")
    if response is not None and before is not None:
        ctx.expect(
            response.status == before,
            f"the server is unhealthy afterwards: GET {HEALTH} answered "
            f"{response.status}, {before} before the checks",
            expected=before,
            received=shown(response),
        )


def cut(ctx: Context, text: str) -> str:
    """How an error quotes an input value (x-caps.quoted_chars, x-messages.cut_mark)."""
    limit = ctx.api.caps["quoted_chars"]
    return text if len(text) <= limit else text[:limit] + ctx.api.messages["cut_mark"]


def invalid_json(ctx: Context) -> dict[str, Any]:
    return error_body(ctx.api, "invalid_json", message(ctx.api, "invalid_json"))


def distinctive(n: int) -> str:
    """A distinctive input value of n characters."""
    seed = "conformance-" + secrets.token_hex(8) + "-"
    return (seed * (n // len(seed) + 1))[:n]
