"""Helpers the check modules share; registers no check."""

from __future__ import annotations

from typing import Any

from conformance.engine.context import Context
from conformance.wire.client import AUTH_DEFAULT, Reply, StreamReply


def end_layers(ctx: Context) -> list[int]:
    """The model's first and last layers, ascending: one layer once (a 1-layer model's [0]; the
    spec refuses a layer asked twice, uniqueItems)."""
    return sorted({0, ctx.model.num_layers - 1})


def open_stream(ctx: Context, body: dict[str, Any], **kw: Any) -> StreamReply:
    reply = ctx.client.stream(ctx.api.completions_path, {**body, "stream": True}, **kw)
    ctx.expect_status(reply, 200, fatal=True)
    if "text/event-stream" not in reply.headers.get("content-type", ""):
        ctx.stop(
            "the stream's Content-Type is not text/event-stream",
            expected="text/event-stream",
            received=reply.headers.get("content-type"),
            reply=reply,
        )
    return reply


def first_chunk_accepted(
    ctx: Context,
    body: dict[str, Any],
    *,
    path: str | None = None,
    headers: dict[str, str] | None = None,
    auth: str | None = AUTH_DEFAULT,
) -> None:
    """A stream is accepted: 200 and a first content chunk. Then the suite hangs up:
    the cheap way to see a large request accepted without paying for all of it (`path`: the
    spec's completions path unless given)."""
    reply = ctx.client.stream(
        path or ctx.api.completions_path,
        {**body, "stream": True},
        headers=headers,
        auth=auth,
        stop_after_events=1,
    )
    ctx.expect_status(reply, 200, fatal=True)
    ctx.expect(
        bool(reply.parsed.events) and reply.parsed.events[0].kind == "content",
        "the first event of the accepted stream is not a content chunk",
        received=reply.exchange.response_body,
        reply=reply,
    )


def n_applied(ctx: Context, n: int, choices: int) -> None:
    """The premise of a check that reads `n` choices of one prompt: a server that ignores n
    answers with one, and the check would pass on half its question or blame another field
    (usage:arithmetic checks n itself)."""
    if choices != n:
        ctx.unproven(
            f"n: {n} was answered with {choices} choices of one prompt: n is not applied here "
            "(usage:arithmetic's finding), and this check needs its choices"
        )


def prompt_ids_returned(ctx: Context, text: str, ids: Any) -> list[int]:
    """The premise of a check that needs a token's id: return_token_ids gives a prompt's ids
    (shape:token_ids checks that it does); without them the check says so and skips."""
    if not (isinstance(ids, list) and ids and all(type(t) is int for t in ids)):
        ctx.unproven(
            f"return_token_ids is not applied here (a prompt of {text!r} came back without prompt_token_ids: "
            "shape:token_ids's finding), and this check needs the id of its token"
        )
    return ids


def usage_of(ctx: Context, reply: Reply) -> dict[str, Any]:
    """The answer's usage object, {} where it has none; the check stops where the answer is no
    JSON object (Context.expect_object)."""
    usage = ctx.expect_object(reply).get("usage")
    return usage if isinstance(usage, dict) else {}
