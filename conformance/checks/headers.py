"""headers:* — the request id on every response, success and error alike."""

from __future__ import annotations

from conformance.checks.helpers.common import MODELS, UNKNOWN_PATH
from conformance.engine.context import Context
from conformance.engine.registry import register


@register("headers:x_request_id.success", tags=("headers",))
def request_id_on_success(ctx: Context) -> None:
    """A 200 carries X-Request-Id in the spec's format (GET /v1/models)."""
    reply = ctx.client.request("GET", MODELS)
    ctx.expect_status(reply, 200)
    ctx.expect_request_id(reply, in_body=False)


@register("headers:x_request_id.error", tags=("headers",))
def request_id_on_error(ctx: Context) -> None:
    """An error carries X-Request-Id equal to the body's request_id (here a 404)."""
    reply = ctx.client.request("GET", UNKNOWN_PATH)
    ctx.responded(reply)
    ctx.expect_request_id(reply, in_body=True)


@register("headers:x_request_id.unique", tags=("headers",))
def request_id_unique(ctx: Context) -> None:
    """Two requests get two request ids."""
    first = ctx.client.request("GET", UNKNOWN_PATH)
    second = ctx.client.request("GET", UNKNOWN_PATH)
    ctx.responded(first)
    ctx.responded(second)
    a, b = first.request_id_header, second.request_id_header
    ctx.expect(
        a is None or a != b, "two requests got the same X-Request-Id", received=a, reply=second
    )
