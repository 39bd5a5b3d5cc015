"""usage:* — a Completion's usage arithmetic and its choices, one per prompt x n, in order
(stream:usage_arithmetic holds a stream's usage chunk to the same arithmetic)."""

from __future__ import annotations

from conformance.checks.helpers.common import (
    PROMPTS,
    N,
    expected_usage,
    many_choices_body,
    usage_numbers,
)
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.engine.shapes import schema_errors


@register("usage:arithmetic", tags=("usage",), tokens=12)
def usage_arithmetic(ctx: Context) -> None:
    """Without stream: the same usage arithmetic, and one choice per prompt x n, indexed in order."""
    reply = ctx.client.post(ctx.api.completions_path, many_choices_body(ctx))
    ctx.expect_status(reply, 200, fatal=True)
    data = reply.data if isinstance(reply.data, dict) else {}
    ctx.equal("the usage", expected_usage(), usage_numbers(data.get("usage")), reply)
    indexes = [c.get("index") for c in data.get("choices", []) if isinstance(c, dict)]
    ctx.equal("the choice indexes", list(range(len(PROMPTS) * N)), indexes, reply)
    errors = schema_errors(data, ctx.api.schema("Completion"))
    ctx.expect(not errors, "the Completion does not match its schema", received=errors, reply=reply)
