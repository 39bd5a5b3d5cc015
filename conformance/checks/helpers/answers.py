"""Answers read and held to one another (stream:*, determinism:*, isolation:*): each choice's
text and rows, from a Completion or a stream, and the seeded request they agree on; registers
no check."""

from __future__ import annotations

from typing import Any

from conformance.checks.helpers.agree import LOGPROBS, difference
from conformance.engine.context import Context
from conformance.wire.client import Reply, StreamReply


def texts(reply: Reply) -> dict[int, str]:
    """choice index -> text, from a Completion or a stream."""
    out: dict[int, str] = {}
    if isinstance(reply, StreamReply):
        for event in reply.parsed.events:
            if event.kind == "content":
                for c in event.payload["choices"]:
                    out[c["index"]] = out.get(c["index"], "") + c.get("text", "")
    elif isinstance(reply.data, dict):
        for c in reply.data.get("choices", []):
            out[c["index"]] = c.get("text")
    return out


def seeded_body(ctx: Context) -> dict[str, Any]:
    return {
        "model": ctx.config.model,
        "prompt": "The sky is",
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": ctx.draws.seed,
        "n": 2,
    }


def choices(reply: Reply) -> dict[int, dict[str, Any]]:
    """choice index -> {text, logprobs: {tokens, top_logprobs}}, from a Completion or a stream
    (its chunks joined), for agree.difference."""
    if not isinstance(reply, StreamReply):
        data = reply.data if isinstance(reply.data, dict) else {}
        return {
            c["index"]: c for c in data.get("choices", []) if isinstance(c, dict) and "index" in c
        }
    out: dict[int, dict[str, Any]] = {}
    for event in reply.parsed.events:
        for c in event.payload.get("choices", []) if event.kind == "content" else ():
            joined = out.setdefault(
                c["index"], {"text": "", "logprobs": {"tokens": [], "top_logprobs": []}}
            )
            joined["text"] += c.get("text") or ""
            lp = c.get("logprobs") if isinstance(c.get("logprobs"), dict) else {}
            for key in ("tokens", "top_logprobs"):
                joined["logprobs"][key] += lp.get(key) or []
    return out


def agree_with(ctx: Context, what: str, first: Reply, others: list[Reply]) -> None:
    """Every choice of every answer in `others` agrees with `first`'s of its index, as two answers
    of one request may (agree.py's near-tie rule): all of them, no any-of-N."""
    base = choices(first)
    off = [
        (i, found, reply)
        for reply in others
        for i, choice in choices(reply).items()
        if (found := difference(ctx.api, base.get(i, {}), choice)) is not None
    ]
    off += [(i, "missing", reply) for reply in others for i in base.keys() - choices(reply).keys()]
    if off:
        i, found, reply = off[0]
        ctx.fail(
            f"{what}: {len(off)} choices of {len(others)} answers differ from the first answer beyond "
            f"what a batch may change; the first, choice {i}: {found}",
            expected=texts(first),
            received=texts(reply),
            reply=reply,
        )


def agreeing_body(ctx: Context) -> dict[str, Any]:
    """The seeded request, with the rows agree.difference reads."""
    return {**seeded_body(ctx), "logprobs": LOGPROBS}
