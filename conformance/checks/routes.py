"""routes:*, auth:*, headers:* — routes, methods, keys and the request id on every response."""
from __future__ import annotations

import secrets

from conformance.context import Context
from conformance.spec_bodies import error_body, message
from conformance.registry import register
from contract import Spec

MODELS = "/v1/models"
UNKNOWN_PATH = "/v1/conformance-unknown-route"


def _allowed(api: Spec, path: str) -> list[str]:
    return sorted(r.method for r in api.routes if r.path == path)


def _unused_method(api: Spec, path: str) -> str:
    return next(m for m in ("DELETE", "PUT", "PATCH", "GET", "POST") if m not in _allowed(api, path))


# A request that expects a refusal still asks for one token of one sequence: a server
# that wrongly accepts it writes one token, not its max_model_len.
REFUSED_WORST = 1


def _minimal(ctx: Context) -> dict:
    return {"model": ctx.config.model, "prompt": [0], "max_tokens": 1, "n": 1}


# -- routes --------------------------------------------------------------------

@register("routes:unknown_route", tags=("routes", "http"))
def unknown_route(ctx: Context) -> None:
    """An unknown path: 404 not_found in the error shape."""
    reply = ctx.client.request("GET", UNKNOWN_PATH)
    ctx.expect_error(reply, error_body(ctx.api, "not_found",
                                       message(ctx.api, "not_found", method="GET", path=UNKNOWN_PATH)))


@register("routes:unknown_method", tags=("routes", "http"))
def unknown_method(ctx: Context) -> None:
    """A wrong method on each known route: 405 method_not_allowed, with Allow listing the spec's methods."""
    for path in dict.fromkeys(r.path for r in ctx.api.routes):
        method, allow = _unused_method(ctx.api, path), _allowed(ctx.api, path)
        reply = ctx.client.request(method, path)
        ctx.expect_error(reply, error_body(ctx.api, "method_not_allowed", message(ctx.api, 
            "method_not_allowed", method=method, path=path, allow=", ".join(allow))))
        got = sorted(m.strip().upper() for m in reply.headers.get("allow", "").split(",") if m.strip())
        ctx.equal(f"the Allow header of {method} {path}", allow, got, reply)


@register("routes:models", tags=("routes",))
def models(ctx: Context) -> None:
    """GET /v1/models lists the model with its max_model_len, num_layers and hidden_size, in the ModelList schema."""
    from conformance.checks.common import schema_errors
    reply = ctx.client.request("GET", MODELS)
    ctx.expect_status(reply, 200, fatal=True)
    ctx.expect_request_id(reply, in_body=False)
    errors = schema_errors(reply.data, ctx.api.schema("ModelList"))
    ctx.expect(not errors, "the models list does not match ModelList", expected="ModelList",
               received=errors, reply=reply)
    ids = {m.get("id"): m for m in (reply.data or {}).get("data", []) if isinstance(m, dict)} \
        if isinstance(reply.data, dict) else {}
    ctx.expect(ctx.config.model in ids, f"the model {ctx.config.model!r} is not listed",
               expected=ctx.config.model, received=sorted(map(str, ids)), reply=reply)


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
    reply = ctx.client.post("/v1/chat/completions", {"model": ctx.config.model, "max_tokens": 1, "n": 1,
                                                     "messages": [{"role": "user", "content": "hi"}]})
    ctx.expect_error(reply, error_body(ctx.api, "invalid_request", message(ctx.api, "chat_refused")))


# -- auth ------------------------------------------------------------------------

def _expect_401(ctx: Context, auth: str | None, path: str | None = None) -> None:
    """401 invalid_api_key at `path` (a completion when None or the completions path)."""
    if path in (None, ctx.api.completions_path):
        path = ctx.api.completions_path
        reply = ctx.client.post(path, _minimal(ctx), auth=auth)
    else:
        reply = ctx.client.request("GET", path, auth=auth)
    ctx.expect_error(reply, error_body(ctx.api, "invalid_api_key", message(ctx.api, "invalid_api_key")))


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
        ctx.skip("servers without configured keys accept any key; pass --wrong-key-expected to check")
    _expect_401(ctx, f"Bearer conformance-{secrets.token_hex(16)}")


# -- headers -----------------------------------------------------------------------

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
    ctx.expect(a is None or a != b, "two requests got the same X-Request-Id", received=a, reply=second)
