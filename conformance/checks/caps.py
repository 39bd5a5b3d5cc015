"""caps:<cap>.limit and caps:<cap>.limit+1 — each cap at its limit and one past it.

Generated at run time from the spec (x-caps, x-token-rules, the model's hidden
size and layers) and from the server's GET /v1/models (max_model_len), so they
test this deployment's numbers, not the spec's example. Prompts are token ids
(`PROMPT_ID` repeated) so their token counts are exact.

At the limit the request must be accepted, which costs tokens: those checks
run in the full profile only, and cheaply (one generated token, or a stream
closed after its first chunk). One past the limit nothing is generated.
"""

from __future__ import annotations

from typing import Any

from conformance.checks.helpers.claims import shrink
from conformance.checks.helpers.common import first_chunk_accepted, shown_end_tokens
from conformance.engine.config import RunConfig
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.golden import padded_body
from conformance.spec.bodies import error_body, message, token_rule_body
from conformance.wire.ledger import CHEAP_TOKENS
from conformance.wire.token_cost import CostModel

# Token id 0 is in every vocabulary and is short in JSON, so a max_model_len
# prompt stays far below the body cap.
PROMPT_ID = 0


def _body(ctx: Context, prompt_tokens: int, **fields: Any) -> dict[str, Any]:
    return {"model": ctx.config.model, "prompt": [PROMPT_ID] * prompt_tokens, **fields}


def _no_stream_limit_worst(config: RunConfig, cost: CostModel) -> int:
    """One prompt token and max_tokens at the no-stream cap, stopped by the end tokens: a server
    that ignores them (until it has shown it honours them) writes all of it."""
    eos = list(config.api.models[config.model].eos_token_ids)
    return cost.body(
        {
            "prompt": [PROMPT_ID],
            "max_tokens": config.api.caps["max_tokens_without_stream"],
            "allowed_token_ids": eos,
        }
    )


def _fits_body(ctx: Context, prompt_tokens: int) -> None:
    ctx.need_given("max_model_len", f"a prompt of {prompt_tokens} token ids")
    # two bytes per id ("0,"): skip rather than send a body the 413 rule would refuse first; a
    # prompt the server's max_model_len sizes is its claim's (shown first: claims.shrink)
    if 2 * prompt_tokens + 256 > ctx.api.caps["max_body_bytes"]:
        reason = f"a prompt of {prompt_tokens} token ids does not fit the body cap"
        if prompt_tokens >= ctx.max_model_len:
            shrink(ctx, "max_model_len", reason)
        ctx.skip(reason)


def _accepted(ctx: Context, body: dict[str, Any], *, stream: bool = False) -> None:
    """The request must be accepted; only the first event of a stream is read."""
    if stream:
        return first_chunk_accepted(ctx, body)
    reply = ctx.client.post(ctx.api.completions_path, body)
    ctx.expect_status(reply, 200)


# -- max_tokens without stream (deadline_infeasible) ---------------------------


@register(
    "caps:max_tokens.without_stream.limit", tags=("caps",), tokens=1, worst=_no_stream_limit_worst
)
def without_stream_limit(ctx: Context) -> None:
    """max_tokens at the no-stream cap is accepted (it stops at once: allowed_token_ids = end tokens)."""
    cap = ctx.api.caps["max_tokens_without_stream"]
    if 1 + cap > ctx.max_model_len:
        shrink(
            ctx,
            "max_model_len",
            f"max_model_len {ctx.max_model_len} cannot hold a 1-token prompt and {cap} tokens",
        )
    _accepted(ctx, _body(ctx, 1, max_tokens=cap, allowed_token_ids=list(ctx.model.eos_token_ids)))


@register("caps:max_tokens.without_stream.limit+1", tags=("caps",), worst=1)
def without_stream_past(ctx: Context) -> None:
    """One past the no-stream cap: 400 deadline_infeasible, before the context is looked at.

    The prompt fills the context (max_model_len - 1 token ids): x-token-rules checks the
    no-stream cap first, and a server that wrongly accepts the request has room for one token.
    """
    cap = ctx.api.caps["max_tokens_without_stream"]
    _fits_body(ctx, ctx.max_model_len)
    reply = ctx.client.post(
        ctx.api.completions_path, _body(ctx, ctx.max_model_len - 1, max_tokens=cap + 1)
    )
    ctx.expect_error(
        reply,
        token_rule_body(
            ctx.api,
            "deadline_infeasible",
            cap=cap,
            max_tokens=cap + 1,
            minutes=ctx.api.caps["wait_seconds"] // 60,
        ),
    )


# -- prompts x n x max_tokens ---------------------------------------------------


def _split(ctx: Context) -> tuple[int, int]:
    """(n, max_tokens) with n x max_tokens = the cap, each sequence fitting max_model_len."""
    cap = ctx.api.caps["max_generated_tokens"]
    n_max = ctx.api.schema("CompletionRequest")["properties"]["n"]["maximum"]
    for n in range(1, n_max + 1):
        if cap % n == 0 and 1 + cap // n <= ctx.max_model_len:
            return n, cap // n
    shrink(
        ctx,
        "max_model_len",
        f"no n up to {n_max} splits {cap} tokens into sequences that fit max_model_len",
    )
    raise AssertionError("unreachable")


@register("caps:generated_tokens.limit", tags=("caps", "streaming"), tokens=CHEAP_TOKENS)
def generated_limit(ctx: Context) -> None:
    """prompts x n x max_tokens at the cap is accepted (stream, closed after the first chunk)."""
    n, max_tokens = _split(ctx)
    _accepted(ctx, _body(ctx, 1, n=n, max_tokens=max_tokens), stream=True)


@register("caps:generated_tokens.limit+1", tags=("caps", "streaming"), worst=CHEAP_TOKENS)
def generated_past(ctx: Context) -> None:
    """max_tokens one past the generated-token cap's split: 400 invalid_request, param max_tokens."""
    n, max_tokens = _split(ctx)
    cap = ctx.api.caps["max_generated_tokens"]
    # a stream, closed after its first event should a server wrongly accept it, and stopped by
    # the end tokens where the server has shown it stops there: no tail past the close
    body = _body(ctx, 1, n=n, max_tokens=max_tokens + 1, stream=True)
    if end_tokens := shown_end_tokens(ctx):
        body["allowed_token_ids"] = sorted(end_tokens)
    reply = ctx.client.stream(ctx.api.completions_path, body, stop_after_events=1)
    ctx.expect_error(
        reply,
        token_rule_body(
            ctx.api,
            "generated_tokens_cap",
            cap=cap,
            n=n,
            max_tokens=max_tokens + 1,
            prompts=1,
            total=n * (max_tokens + 1),
        ),
    )


# -- the context: prompt + max_tokens <= max_model_len ---------------------------


@register("caps:context.limit", tags=("caps",), tokens=1)
def context_limit(ctx: Context) -> None:
    """A prompt of max_model_len - 1 token ids and max_tokens 1 is accepted."""
    _fits_body(ctx, ctx.max_model_len)
    _accepted(ctx, _body(ctx, ctx.max_model_len - 1, max_tokens=1))


@register("caps:context.limit+1", tags=("caps",), worst=2)
def context_past(ctx: Context) -> None:
    """A prompt of max_model_len - 1 token ids and max_tokens 2: one past the context together,
    400 context_length_exceeded, param max_tokens (the field whose value does not fit)."""
    length = ctx.max_model_len
    _fits_body(ctx, length)
    reply = ctx.client.post(ctx.api.completions_path, _body(ctx, length - 1, max_tokens=2))
    ctx.expect_error(
        reply,
        token_rule_body(
            ctx.api,
            "context_length",
            max_model_len=length,
            total=length + 1,
            prompt_tokens=length - 1,
            max_tokens=2,
        ),
    )


@register("caps:context.prompt_alone", tags=("caps",), worst=1)
def context_prompt_alone(ctx: Context) -> None:
    """A prompt of max_model_len token ids with max_tokens 1: the prompt alone leaves no token,
    400 context_length_exceeded, param prompt (no max_tokens could help)."""
    length = ctx.max_model_len
    _fits_body(ctx, length)
    reply = ctx.client.post(ctx.api.completions_path, _body(ctx, length, max_tokens=1))
    ctx.expect_error(
        reply,
        token_rule_body(ctx.api, "prompt_too_long", max_model_len=length, prompt_tokens=length),
    )


@register("caps:prompt.without_max_tokens.limit", tags=("caps",), tokens=1)
def prompt_limit(ctx: Context) -> None:
    """Without max_tokens, a prompt of max_model_len - 1 leaves one token: accepted."""
    _fits_body(ctx, ctx.max_model_len)
    _accepted(ctx, _body(ctx, ctx.max_model_len - 1))


@register("caps:prompt.without_max_tokens.limit+1", tags=("caps",))
def prompt_past(ctx: Context) -> None:
    """Without max_tokens, a prompt of max_model_len leaves none: 400 context_length_exceeded, param prompt."""
    length = ctx.max_model_len
    _fits_body(ctx, length)
    reply = ctx.client.post(ctx.api.completions_path, _body(ctx, length))
    ctx.expect_error(
        reply,
        token_rule_body(ctx.api, "prompt_too_long", max_model_len=length, prompt_tokens=length),
    )


# -- the capture: Layers x (prompt + max_tokens - 1) ------------------------------


@register("caps:capture.limit", tags=("caps", "activations", "streaming"), tokens=1)
def capture_limit(ctx: Context) -> None:
    """One Layer x capture-cap positions is accepted (stream, closed after the first chunk)."""
    cap = ctx.model.capture_cap
    if cap + 1 > ctx.max_model_len:
        shrink(
            ctx, "max_model_len", f"max_model_len {ctx.max_model_len} cannot hold {cap} positions"
        )
    _fits_body(ctx, cap)
    _accepted(ctx, _body(ctx, cap, max_tokens=1, output_residual_stream=[0]), stream=True)


@register("caps:capture.limit+1", tags=("caps", "activations"), worst=1)
def capture_past(ctx: Context) -> None:
    """One Layer x (capture cap + 1) positions: 400 invalid_request, param output_residual_stream."""
    cap = ctx.model.capture_cap
    _fits_body(ctx, cap + 1)
    reply = ctx.client.post(
        ctx.api.completions_path, _body(ctx, cap + 1, max_tokens=1, output_residual_stream=[0])
    )
    ctx.expect_error(
        reply,
        token_rule_body(
            ctx.api, "capture_cap", cap=cap, layers=1, positions=cap + 1, total=cap + 1
        ),
    )


# -- the body: max_body_bytes on every route --------------------------------------


@register("caps:body.limit", tags=("caps", "http"), tokens=1)
def body_limit(ctx: Context) -> None:
    """A body of exactly max_body_bytes is read and accepted."""
    content = padded_body(_body(ctx, 1, max_tokens=1), ctx.api.caps["max_body_bytes"])
    reply = ctx.client.request("POST", ctx.api.completions_path, content=content)
    ctx.expect_status(reply, 200)


@register("caps:body.limit+1", tags=("caps", "http"), worst=1)
def body_past(ctx: Context) -> None:
    """One byte more: 413 request_too_large."""
    limit = ctx.api.caps["max_body_bytes"]
    reply = ctx.client.request(
        "POST",
        ctx.api.completions_path,
        content=padded_body(_body(ctx, 1, max_tokens=1), limit + 1),
    )
    ctx.expect_error(
        reply,
        error_body(
            ctx.api, "request_too_large", message(ctx.api, "request_too_large", limit=limit)
        ),
    )


@register("caps:body.limit+1.chat", tags=("caps", "http"), worst=1)
def body_past_chat(ctx: Context) -> None:
    """The body cap holds on every route: 413 on POST /v1/chat/completions too (size comes first)."""
    limit = ctx.api.caps["max_body_bytes"]
    body = {
        "model": ctx.config.model,
        "max_tokens": 1,
        "n": 1,
        "messages": [{"role": "user", "content": "hi"}],
    }
    reply = ctx.client.request("POST", "/v1/chat/completions", content=padded_body(body, limit + 1))
    ctx.expect_error(
        reply,
        error_body(
            ctx.api, "request_too_large", message(ctx.api, "request_too_large", limit=limit)
        ),
    )
