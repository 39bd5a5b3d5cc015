"""robust:disconnect.* — clients that reset the connection mid-body and as a stream starts."""

from __future__ import annotations

import json

from conformance.checks.robust.raw import deliver, minimal, request_headers, robust, target_of
from conformance.engine.context import Context


@robust("robust:disconnect.mid_body")
def disconnect_mid_body(ctx: Context) -> None:
    """A client that resets the connection halfway through its body leaves the server healthy."""
    body = json.dumps(minimal(ctx), separators=(",", ":")).encode()
    target = target_of(ctx)
    for _ in range(5):
        head = target.head(
            "POST", ctx.api.completions_path, request_headers(ctx, body, close=False)
        )
        deliver(ctx, [head + body[: len(body) // 2]], bound=ctx.config.timeout, linger_reset=True)


@robust("robust:disconnect.mid_stream", tokens=lambda config: 5)
def disconnect_mid_stream(ctx: Context) -> None:
    """Clients that reset the connection as a stream starts leave the server healthy (5 streams of max_tokens 1)."""
    body = json.dumps(minimal(ctx, stream=True), separators=(",", ":")).encode()
    target = target_of(ctx)
    for _ in range(5):
        head = target.head(
            "POST", ctx.api.completions_path, request_headers(ctx, body, close=False)
        )
        deliver(ctx, [head + body], bound=ctx.config.timeout, linger_reset=True)
    ctx.client.ledger.add(5)
