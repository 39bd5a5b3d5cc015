"""routes:* — the routes and methods the API has, and those it refuses."""

from __future__ import annotations

from conformance.checks.helpers.common import MODELS, REFUSED_WORST, UNKNOWN_PATH
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.spec.bodies import error_body, message
from contract import Spec


def _allowed(api: Spec, path: str) -> list[str]:
    return sorted(r.method for r in api.routes if r.path == path)


def _unused_method(api: Spec, path: str) -> str:
    return next(
        m for m in ("DELETE", "PUT", "PATCH", "GET", "POST") if m not in _allowed(api, path)
    )


@register("routes:unknown_route", tags=("routes", "http"))
def unknown_route(ctx: Context) -> None:
    """An unknown path: 404 not_found in the error shape."""
    reply = ctx.client.request("GET", UNKNOWN_PATH)
    ctx.expect_error(
        reply,
        error_body(
            ctx.api, "not_found", message(ctx.api, "not_found", method="GET", path=UNKNOWN_PATH)
        ),
    )


@register("routes:unknown_method", tags=("routes", "http"))
def unknown_method(ctx: Context) -> None:
    """A wrong method on each known route: 405 method_not_allowed, with Allow listing the spec's methods."""
    for path in dict.fromkeys(r.path for r in ctx.api.routes):
        method, allow = _unused_method(ctx.api, path), _allowed(ctx.api, path)
        reply = ctx.client.request(method, path)
        ctx.expect_error(
            reply,
            error_body(
                ctx.api,
                "method_not_allowed",
                message(
                    ctx.api, "method_not_allowed", method=method, path=path, allow=", ".join(allow)
                ),
            ),
        )
        got = sorted(
            m.strip().upper() for m in reply.headers.get("allow", "").split(",") if m.strip()
        )
        ctx.equal(f"the Allow header of {method} {path}", allow, got, reply)


@register("routes:models", tags=("routes",))
def models(ctx: Context) -> None:
    """GET /v1/models lists the model with its max_model_len, num_layers and hidden_size, in the ModelList schema."""
    from conformance.engine.shapes import schema_errors

    reply = ctx.client.request("GET", MODELS)
    ctx.expect_status(reply, 200, fatal=True)
    ctx.expect_request_id(reply, in_body=False)
    errors = schema_errors(reply.data, ctx.api.schema("ModelList"))
    ctx.expect(
        not errors,
        "the models list does not match ModelList",
        expected="ModelList",
        received=errors,
        reply=reply,
    )
    ids = (
        {m.get("id"): m for m in (reply.data or {}).get("data", []) if isinstance(m, dict)}
        if isinstance(reply.data, dict)
        else {}
    )
    ctx.expect(
        ctx.config.model in ids,
        f"the model {ctx.config.model!r} is not listed",
        expected=ctx.config.model,
        received=sorted(map(str, ids)),
        reply=reply,
    )


@register("routes:health", tags=("routes",))
def health(ctx: Context) -> None:
    """The readiness route answers 200 without a key (security: [] in the spec)."""
    path = next(r.path for r in ctx.api.routes if r.method == "GET" and not r.needs_auth)
    reply = ctx.client.request("GET", path, auth=None)
    ctx.expect_status(reply, 200)
    ctx.expect_request_id(reply, in_body=False)


@register("routes:chat_refused", tags=("routes",), worst=REFUSED_WORST)
def chat_refused(ctx: Context) -> None:
    """POST /v1/chat/completions: 400 with the documentation's message, param null."""
    reply = ctx.client.post(
        "/v1/chat/completions",
        {
            "model": ctx.config.model,
            "max_tokens": 1,
            "n": 1,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    ctx.expect_error(
        reply, error_body(ctx.api, "invalid_request", message(ctx.api, "chat_refused"))
    )
