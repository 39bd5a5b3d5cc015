"""stream:* — framing, schemas, order, finish_reason, the usage chunk, keepalive, and a stream's
text equal to the same request's without stream.

Every request here is small (a few tokens) and uses token-id prompts so the
usage is exact, and ignore_eos so every choice writes exactly max_tokens.
"""

from __future__ import annotations

import re
from typing import Any

from conformance.checks.helpers.answers import (
    agree_with,
    agreeing_body,
    seeded_body,
    texts,
)
from conformance.checks.helpers.common import (
    PROMPTS,
    N,
    expected_usage,
    many_choices_body,
    n_applied,
    open_stream,
    usage_numbers,
)
from conformance.engine.config import RunConfig
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.engine.shapes import schema_errors
from conformance.wire.client import Reply, StreamReply

ORDER = re.compile(r"(content )+(usage )?(activations )?done ")


def usage_stream(ctx: Context) -> StreamReply:
    """One stream with include_usage, shared by the checks that only read it."""
    if "usage_stream" not in ctx.memo:
        ctx.memo["usage_stream"] = open_stream(
            ctx, many_choices_body(ctx, stream_options={"include_usage": True})
        )
    reply = ctx.memo["usage_stream"]
    ctx.expect_status(reply, 200, fatal=True)
    if "text/event-stream" not in reply.headers.get("content-type", ""):
        ctx.stop(
            "the stream's Content-Type is not text/event-stream",
            expected="text/event-stream",
            received=reply.headers.get("content-type"),
            reply=reply,
        )
    return reply


def kinds(reply: StreamReply) -> str:
    return "".join(f"{e.kind} " for e in reply.parsed.events)


# -- streams -------------------------------------------------------------------------


@register(
    "stream:framing", tags=("streaming",), tokens=12, shares="usage_stream", effects=("stream",)
)
def framing(ctx: Context) -> None:
    """`data: ` lines separated by blank lines, `:` comments only, `data: [DONE]` last, nothing after."""
    reply = usage_stream(ctx)
    for error in reply.parsed.framing_errors:
        ctx.fail(f"framing: {error}", reply=reply)
    events = reply.parsed.events
    ctx.expect(
        bool(events) and events[-1].kind == "done",
        "the stream does not end with data: [DONE]",
        expected="data: [DONE]",
        received=events[-1].data[:200] if events else None,
        reply=reply,
    )
    invalid = [e.data[:200] for e in events if e.kind == "invalid"]
    ctx.expect(not invalid, "data that is neither JSON nor [DONE]", received=invalid, reply=reply)


@register("stream:event_schema", tags=("streaming",), tokens=12, shares="usage_stream")
def event_schema(ctx: Context) -> None:
    """Each event matches its schema in x-event-schemas (content, usage, activations, error, done)."""
    reply = usage_stream(ctx)
    _check_event_schemas(ctx, reply)


def _check_event_schemas(ctx: Context, reply: StreamReply) -> None:
    schemas = ctx.api.event_schemas
    ctx.expect(bool(reply.parsed.events), "the stream has no events", reply=reply)
    for i, event in enumerate(reply.parsed.events):
        if event.kind not in schemas:
            ctx.fail(
                f"event {i} is of no kind in x-event-schemas",
                expected=sorted(schemas),
                received=event.data[:300],
                reply=reply,
            )
            continue
        errors = schema_errors(event.payload, schemas[event.kind])
        ctx.expect(
            not errors,
            f"event {i} ({event.kind}) does not match its schema",
            expected=event.kind,
            received=errors,
            reply=reply,
        )


@register(
    "stream:event_order",
    tags=("streaming",),
    tokens=12,
    shares="usage_stream",
    effects=("stream_options",),
)
def event_order(ctx: Context) -> None:
    """Content chunks, then the usage chunk (include_usage), then [DONE]."""
    reply = usage_stream(ctx)
    order = kinds(reply)
    ctx.expect(
        bool(ORDER.fullmatch(order)) and "usage" in order,
        "events out of order",
        expected="content... usage done",
        received=order.strip(),
        reply=reply,
    )


@register("stream:finish_reason_last_chunk", tags=("streaming",), tokens=12, shares="usage_stream")
def finish_reason_last(ctx: Context) -> None:
    """finish_reason and stop_reason are null until the last chunk of each choice, then set."""
    reply = usage_stream(ctx)
    per_choice: dict[int, list[dict[str, Any]]] = {}
    for event in reply.parsed.events:
        if event.kind == "content":
            for choice in event.payload["choices"]:
                per_choice.setdefault(choice.get("index"), []).append(choice)
    want = list(range(len(PROMPTS) * N))
    ctx.equal("the choice indexes", want, sorted(per_choice, key=str), reply)
    for index, chunks in per_choice.items():
        early = [
            c.get("finish_reason")
            for c in chunks[:-1]
            if c.get("finish_reason") is not None or c.get("stop_reason") is not None
        ]
        ctx.expect(
            not early,
            f"choice {index}: finish_reason or stop_reason before its last chunk",
            expected=None,
            received=early,
            reply=reply,
        )
        ctx.expect(
            chunks[-1].get("finish_reason") in ("stop", "length"),
            f"choice {index}: its last chunk has no finish_reason",
            expected="stop or length",
            received=chunks[-1].get("finish_reason"),
            reply=reply,
        )


@register("stream:usage_arithmetic", tags=("streaming",), tokens=12, shares="usage_stream")
def stream_usage(ctx: Context) -> None:
    """The usage chunk: prompts counted once each, completion = prompts x n x max_tokens, total = sum."""
    reply = usage_stream(ctx)
    usage = [e.payload.get("usage") for e in reply.parsed.events if e.kind == "usage"]
    if not ctx.expect(
        len(usage) == 1, "not exactly one usage chunk", expected=1, received=len(usage), reply=reply
    ):
        return
    ctx.equal("the usage", expected_usage(), usage_numbers(usage[0]), reply)
    written = sum(1 for e in reply.parsed.events if e.kind == "content")
    ctx.expect(
        written <= expected_usage()["completion_tokens"],
        "more content chunks than tokens",
        expected=expected_usage()["completion_tokens"],
        received=written,
        reply=reply,
    )


@register("stream:error_event", tags=("streaming",), tokens=12)
def error_event(ctx: Context) -> None:
    """An error after the stream started is one ErrorBody event, then [DONE] (mock: X-Mock-Stream-Error-After)."""
    header = next(h for h in ctx.api.mock_headers if h.endswith("Stream-Error-After"))
    reply = open_stream(ctx, many_choices_body(ctx), headers={header: "1"})
    order = kinds(reply)
    if "error" not in order:
        ctx.skip(f"the server did not inject an error ({header} is the bundled mock's)")
    ctx.expect(
        bool(re.fullmatch(r"(content )*error done ", order)),
        "the error event is not last before [DONE]",
        expected="content... error done",
        received=order.strip(),
        reply=reply,
    )
    _check_event_schemas(ctx, reply)


def _slow_header(ctx: Context) -> tuple[str, str]:
    """The mock's time-to-first-token header, set past one keepalive interval."""
    name = next(h for h in ctx.api.mock_headers if h.endswith("Ttft-Ms"))
    return name, str(int((ctx.api.caps["keepalive_seconds"] + 1.5) * 1000))


KEEPALIVE_SLACK_S = 2.0  # a keepalive comment this late is still on time (the check's slack)


def _keepalive_wait(config: RunConfig) -> float:
    """The read that waits for the keepalive comment: its interval, and the slack."""
    return float(config.api.caps["keepalive_seconds"]) + KEEPALIVE_SLACK_S


@register("stream:keepalive", tags=("streaming",), tokens=2, waits=_keepalive_wait)
def keepalive(ctx: Context) -> None:
    """While nothing else is sent for keepalive_seconds, a `: keepalive` comment line is.

    The mock is slowed by its X-Mock-Ttft-Ms header; another server that
    ignores it streams fast, and the check is skipped (no quiet gap to judge). A stream that
    goes silent (the read times out) or ends before [DONE] is a finding, never that skip.
    """
    interval = ctx.api.caps["keepalive_seconds"]
    name, value = _slow_header(ctx)
    body = {"model": ctx.config.model, "prompt": [0], "max_tokens": 2, "ignore_eos": True}
    reply = open_stream(ctx, body, headers={name: value})
    ended = any(e.kind == "done" for e in reply.parsed.events)
    if reply.error is not None or not ended:
        # a silence is never "the stream never went quiet": it is the quiet, unbroken
        ctx.stop(
            f"the stream went silent or broke off before [DONE] after {len(reply.lines)} lines "
            f"({reply.error or 'closed'}): no keepalive comment kept it open",
            expected=f"': keepalive' at least every {interval} s, then the stream's events and [DONE]",
            received=[line for _, line in reply.lines[-3:]],
            reply=reply,
        )
    times = [0.0] + [t for t, line in reply.lines if line]
    comments = {t for t, _ in reply.parsed.comments}
    gaps = [(a, b) for a, b in zip(times, times[1:], strict=False) if b - a > interval]
    # a gap longer than the interval is fine only if it ends with a comment that the
    # server sent on time (the next line is that comment): slack for scheduling.
    late = [
        (round(a, 2), round(b, 2))
        for a, b in gaps
        if b not in comments or b - a > interval + KEEPALIVE_SLACK_S
    ]
    if not gaps and not comments:
        ctx.skip(f"the stream never went quiet for {interval} s (the server ignored {name})")
    ctx.expect(
        not late,
        f"more than {interval} s without a line and no keepalive comment",
        expected=f"': keepalive' at least every {interval} s",
        received=late,
        reply=reply,
    )
    ctx.expect(bool(comments), "no keepalive comment on a slow stream", reply=reply)
    bad = [line for _, line in reply.parsed.comments if line.strip() != ": keepalive"]
    ctx.expect(not bad, "a comment line other than ': keepalive'", received=bad[:3], reply=reply)


# -- text equality (determinism.py holds its answers to one another too) -----------------


# Streams of one seeded request, each held to the answer without stream: a server that loses the
# seed in a quarter of its streams passes all with odds 0.75^16 = 1%.
STREAM_TWINS, TWIN_TOKENS = 16, 2


@register(
    "stream:text_equals_non_stream",
    tags=("streaming", "determinism"),
    tokens=(STREAM_TWINS + 1) * 2 * TWIN_TOKENS,
)
def text_equals(ctx: Context) -> None:
    """Each choice of a seeded request streamed is the one without stream: the same tokens, or a
    near tie a batch may turn (agree.py); every stream of STREAM_TWINS, no any-of-N."""
    body = {**agreeing_body(ctx), "max_tokens": TWIN_TOKENS}
    plain = ctx.client.post(ctx.api.completions_path, body)
    ctx.expect_status(plain, 200, fatal=True)
    n_applied(ctx, seeded_body(ctx)["n"], len(texts(plain)))
    streams: list[Reply] = [open_stream(ctx, body) for _ in range(STREAM_TWINS)]
    agree_with(ctx, "streamed", plain, streams)
