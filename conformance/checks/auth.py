"""auth:* — a completion and the model list need a valid key; anything else is 401."""

from __future__ import annotations

import secrets

from conformance.checks.helpers.common import MODELS, REFUSED_WORST, minimal
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.spec.bodies import error_body, message


def _expect_401(ctx: Context, auth: str | None, path: str | None = None) -> None:
    """401 invalid_api_key at `path` (a completion when None or the completions path)."""
    if path in (None, ctx.api.completions_path):
        path = ctx.api.completions_path
        reply = ctx.client.post(path, minimal(ctx), auth=auth)
    else:
        reply = ctx.client.request("GET", path, auth=auth)
    ctx.expect_error(
        reply, error_body(ctx.api, "invalid_api_key", message(ctx.api, "invalid_api_key"))
    )


@register("auth:missing_key", tags=("auth",), worst=REFUSED_WORST)
def missing_key(ctx: Context) -> None:
    """No Authorization header: 401 invalid_api_key."""
    _expect_401(ctx, None)


@register("auth:malformed_key", tags=("auth",), worst=REFUSED_WORST)
def malformed_key(ctx: Context) -> None:
    """An Authorization header that is not `Bearer KEY`: 401 invalid_api_key."""
    _expect_401(ctx, f"Token {ctx.client.api_key}")


@register("auth:missing_key.models", tags=("auth",))
def missing_key_models(ctx: Context) -> None:
    """GET /v1/models needs the key too."""
    _expect_401(ctx, None, MODELS)


@register("auth:wrong_key", tags=("auth",), worst=REFUSED_WORST)
def wrong_key(ctx: Context) -> None:
    """An unknown Bearer key: 401 (only where the deployment has keys configured: --wrong-key-expected)."""
    if not ctx.config.wrong_key_expected:
        ctx.skip(
            "servers without configured keys accept any key; pass --wrong-key-expected to check"
        )
    _expect_401(ctx, f"Bearer conformance-{secrets.token_hex(16)}")
