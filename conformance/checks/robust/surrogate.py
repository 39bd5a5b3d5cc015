"""robust:surrogate.* — text that is not Unicode scalar values: lone surrogates, escaped and as raw bytes."""

from __future__ import annotations

from conformance.checks.robust.raw import invalid_json, post, refused, robust
from conformance.engine.context import Context


def _surrogate_bodies(ctx: Context, lone: bytes) -> dict[str, bytes]:
    m = ctx.config.model.encode()
    return {
        "prompt": b'{"model":"' + m + b'","prompt":"a' + lone + b'","max_tokens":1}',
        "key": b'{"model":"' + m + b'","prompt":"a","max_tokens":1,"' + lone + b'":1}',
        "model": b'{"model":"' + lone + b'","prompt":"a","max_tokens":1}',
        "stop": b'{"model":"' + m + b'","prompt":"a","max_tokens":1,"stop":["' + lone + b'"]}',
        "priority": b'{"model":"'
        + m
        + b'","prompt":"a","max_tokens":1,"priority":"'
        + lone
        + b'"}',
    }


@robust("robust:surrogate.escaped")
def surrogate_escaped(ctx: Context) -> None:
    """A lone surrogate escape (\\ud800, \\udc00\\ud800) in the prompt, a key, the model, stop, priority: 400 invalid_json."""  # noqa: E501  (the check's one-line description)
    for lone in (b"\\ud800", b"\\udc00\\ud800"):
        for place, raw in _surrogate_bodies(ctx, lone).items():
            refused(ctx, post(ctx, raw), f"{lone.decode()} in {place}", invalid_json(ctx))


@robust("robust:surrogate.raw_bytes")
def surrogate_raw_bytes(ctx: Context) -> None:
    """A surrogate written as raw bytes ED A0 80 (not UTF-8) anywhere in the body: 400 invalid_json."""
    for place, raw in _surrogate_bodies(ctx, b"\xed\xa0\x80").items():
        refused(ctx, post(ctx, raw), f"raw ED A0 80 in {place}", invalid_json(ctx))
