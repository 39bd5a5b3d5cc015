"""robust:echo.* — long input values (a model name, an unknown key, a path) quoted back at most
x-caps.quoted_chars characters."""

from __future__ import annotations

from conformance.checks.robust.raw import (
    cut,
    distinctive,
    minimal,
    post,
    refused,
    robust,
    send,
    target_of,
)
from conformance.engine.context import Context
from conformance.spec.bodies import error_body, message


@robust("robust:echo.model")
def echo_model(ctx: Context) -> None:
    """A 256 KiB model name: 404 quoting at most x-caps.quoted_chars of it."""
    name = distinctive(1 << 18)
    refused(
        ctx,
        post(ctx, minimal(ctx, model=name)),
        "a 256 KiB model name",
        error_body(
            ctx.api,
            "model_not_found",
            message(ctx.api, "model_not_found", model=cut(ctx, name)),
            "model",
        ),
        echo=name,
    )


@robust("robust:echo.unknown_key")
def echo_unknown_key(ctx: Context) -> None:
    """A 256 KiB unknown key: 400 with the key cut in the message and the param."""
    key = distinctive(1 << 18)
    refused(
        ctx,
        post(ctx, {**minimal(ctx), key: 1}),
        "a 256 KiB unknown key",
        error_body(
            ctx.api,
            "invalid_request",
            message(ctx.api, "unknown_field", field=cut(ctx, key)),
            cut(ctx, key),
        ),
        echo=key,
    )


@robust("robust:echo.path")
def echo_path(ctx: Context) -> None:
    """A 2,000-character unknown path: 404 quoting at most x-caps.quoted_chars of it."""
    path = "/v1/" + distinctive(2000)
    full = target_of(ctx).prefix + path
    refused(
        ctx,
        send(ctx, "GET", path),
        "a long unknown path",
        error_body(
            ctx.api, "not_found", message(ctx.api, "not_found", method="GET", path=cut(ctx, full))
        ),
        echo=path,
    )
