"""robust:priority.* — priority as a string past the int64 range."""

from __future__ import annotations

from conformance.checks.robust.raw import minimal, post, refused, robust
from conformance.engine.context import Context
from conformance.spec.bodies import error_body


@robust("robust:priority.int64_string")
def priority_int64_string(ctx: Context) -> None:
    """priority as a string past the int64 range is refused like the number."""
    schema = ctx.api.schema("CompletionRequest")["properties"]["priority"]["anyOf"][0]
    for value in (schema["maximum"] + 1, schema["minimum"] - 1, 10**19 - 1):
        refused(
            ctx,
            post(ctx, minimal(ctx, priority=str(value))),
            f"priority {value!r} as a string",
            error_body(
                ctx.api,
                "invalid_request",
                ctx.api.messages["range"]["pattern"].format(param="priority"),
                "priority",
            ),
        )
