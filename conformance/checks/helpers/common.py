"""Helpers the check modules share; registers no check."""

from __future__ import annotations

from typing import Any

from conformance.engine.context import Context
from conformance.wire.client import AUTH_DEFAULT, Reply, StreamReply
from conformance.wire.token_cost import CostModel


def end_layers(ctx: Context) -> list[int]:
    """The model's first and last layers, ascending: one layer once (a 1-layer model's [0]; the
    spec refuses a layer asked twice, uniqueItems)."""
    return sorted({0, ctx.model.num_layers - 1})


def open_stream(ctx: Context, body: dict[str, Any], **kw: Any) -> StreamReply:
    reply = ctx.client.stream(ctx.api.completions_path, {**body, "stream": True}, **kw)
    ctx.expect_status(reply, 200, fatal=True)
    if "text/event-stream" not in reply.headers.get("content-type", ""):
        ctx.stop(
            "the stream's Content-Type is not text/event-stream",
            expected="text/event-stream",
            received=reply.headers.get("content-type"),
            reply=reply,
        )
    return reply


def cheap_by_end_tokens(body: dict[str, Any], cost: CostModel | None) -> bool:
    """Whether `body` is made cheap by allowing only the end tokens: the body allows any token,
    and with the end tokens alone the cost model prices it at one token a sequence (the server
    has shown it stops there, premise:end_tokens, and nothing in the body holds the end off)."""
    return (
        cost is not None
        and "allowed_token_ids" not in body
        and cost.stops_at_once({**body, "allowed_token_ids": sorted(cost.end_tokens)})
    )


def shown_end_tokens(ctx: Context) -> frozenset[int]:
    """The end tokens the server has shown it stops at (premise:end_tokens), or none."""
    cost = ctx.client.ledger.cost
    return cost.end_tokens if cost is not None else frozenset()


def first_chunk_accepted(
    ctx: Context,
    body: dict[str, Any],
    *,
    path: str | None = None,
    headers: dict[str, str] | None = None,
    auth: str | None = AUTH_DEFAULT,
) -> None:
    """A large stream is accepted: 200 and a first content chunk, seen cheaply (`path`: the
    spec's completions path unless given). Where the server has shown that it stops at its end
    tokens, the stream allows only them and is read whole, so the meter counts all the server
    wrote. Otherwise the suite hangs up after the first event: a server that writes on to the end
    of a closed stream generates a tail the meter cannot see (conformance/README.md)."""
    end_tokens = shown_end_tokens(ctx)
    whole = cheap_by_end_tokens(body, ctx.client.ledger.cost)
    reply = ctx.client.stream(
        path or ctx.api.completions_path,
        {**body, "stream": True, **({"allowed_token_ids": sorted(end_tokens)} if whole else {})},
        headers=headers,
        auth=auth,
        stop_after_events=None if whole else 1,
    )
    ctx.expect_status(reply, 200, fatal=True)
    ctx.expect(
        bool(reply.parsed.events) and reply.parsed.events[0].kind == "content",
        "the first event of the accepted stream is not a content chunk",
        received=reply.exchange.response_body,
        reply=reply,
    )


def n_applied(ctx: Context, n: int, choices: int) -> None:
    """The premise of a check that reads `n` choices of one prompt: a server that ignores n
    answers with one, and the check would pass on half its question or blame another field
    (usage:arithmetic checks n itself)."""
    if choices != n:
        ctx.unproven(
            f"n: {n} was answered with {choices} choices of one prompt: n is not applied here "
            "(usage:arithmetic's finding), and this check needs its choices"
        )


def prompt_ids_returned(ctx: Context, text: str, ids: Any) -> list[int]:
    """The premise of a check that needs a token's id: return_token_ids gives a prompt's ids
    (shape:token_ids checks that it does); without them the check says so and skips."""
    if not (isinstance(ids, list) and ids and all(type(t) is int for t in ids)):
        ctx.unproven(
            f"return_token_ids is not applied here (a prompt of {text!r} came back without prompt_token_ids: "
            "shape:token_ids's finding), and this check needs the id of its token"
        )
    return ids


def usage_of(ctx: Context, reply: Reply) -> dict[str, Any]:
    """The answer's usage object, {} where it has none; the check stops where the answer is no
    JSON object (Context.expect_object)."""
    usage = ctx.expect_object(reply).get("usage")
    return usage if isinstance(usage, dict) else {}


MODELS = "/v1/models"


UNKNOWN_PATH = "/v1/conformance-unknown-route"


# A request that expects a refusal still asks for one token of one sequence: a server
# that wrongly accepts it writes one token, not its max_model_len.
REFUSED_WORST = 1


def minimal(ctx: Context) -> dict:
    return {"model": ctx.config.model, "prompt": [0], "max_tokens": 1, "n": 1}


PROMPTS = [[0, 1, 2], [3, 4]]  # two token-id prompts of known lengths


N, MAX_TOKENS = 2, 3


def many_choices_body(ctx: Context, **extra: Any) -> dict[str, Any]:
    """Two prompts x n = 2, max_tokens 3, ignore_eos: exactly 12 tokens in 4 choices."""
    return {
        "model": ctx.config.model,
        "prompt": PROMPTS,
        "n": N,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "seed": ctx.draws.seed,
        **extra,
    }


def expected_usage() -> dict[str, int]:
    prompt = sum(len(p) for p in PROMPTS)
    completion = len(PROMPTS) * N * MAX_TOKENS
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def usage_numbers(usage: Any) -> Any:
    """The counts of a usage object (expected_usage's keys); other keys the schema allows
    (vLLM's and LiteLLM's `completion_tokens_details: null`) are no part of the arithmetic,
    and stream:event_schema and usage:arithmetic's schema check judge them."""
    return {k: usage.get(k) for k in expected_usage()} if isinstance(usage, dict) else usage


def post(ctx: Context, body: dict[str, Any]) -> tuple[Reply, dict[str, Any]]:
    """The reply and its one choice (a 200 with one choice, or the check stops)."""
    reply = ctx.client.post(ctx.api.completions_path, {"model": ctx.config.model, **body})
    ctx.expect_status(reply, 200, fatal=True)
    choices = reply.data.get("choices") if isinstance(reply.data, dict) else None
    if not (isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)):
        ctx.stop(
            "not exactly one choice for one prompt", expected=1, received=reply.data, reply=reply
        )
    return reply, choices[0]


def memo_post(ctx: Context, key: str, body: dict[str, Any]) -> tuple[Reply, dict[str, Any]]:
    """post(), once per run for each key (several checks read the same request)."""
    if key not in ctx.memo:
        ctx.memo[key] = post(ctx, body)
    reply, choice = ctx.memo[key]
    return reply, choice
