"""premise:* — what the token ledger relies on, proven before any request that relies on it,
each for a price the gate bounds itself. The runner adds them to a full run whose checks may
generate (conformance.engine.runner.premises_for), first.

- `premise:max_tokens`: every price the ledger puts on a request assumes the server stops at
  max_tokens. A stream with max_tokens 2, closed by the gate after its third event, finds a
  server that does not for at most 3 tokens; the run then sends nothing that could generate
  (the client halts) and every such check is UNPROVEN, saying why.
- `premise:end_tokens`: with only the model's end tokens allowed, a server stops at once; the
  ledger prices such requests (the cheap way to see a request accepted) at one token only once
  the answer's own token ids show it.
"""

from __future__ import annotations

import dataclasses

from conformance.checks.helpers.common import open_stream
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.wire import meter
from conformance.wire.sse import Parsed

MAX_TOKENS = 2  # the max_tokens premise:max_tokens asks for
END_MAX_TOKENS = 2  # premise:end_tokens: 1 token if the end tokens are honoured, 2 if not


@register(
    "premise:max_tokens", tags=("premise",), tokens=MAX_TOKENS, worst=MAX_TOKENS + 1, premise=True
)
def max_tokens(ctx: Context) -> None:
    """A stream with max_tokens 2 (ignore_eos) writes at most 2 tokens; the gate reads at most 3
    events of it. A server that writes more is stopped before any request whose price relies on it."""
    body = {
        "model": ctx.config.model,
        # text, the prompt every completions server takes (llama.cpp's takes no token ids): a
        # premise asked in a form the server refuses would prove nothing of max_tokens
        "prompt": ctx.draws.premise_prompt,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    proven = False
    try:
        reply = open_stream(ctx, body, stop_after_events=MAX_TOKENS + 1)
        written = max(meter.stream(reply.parsed, body).tokens, _token_events(reply.parsed))
        proven = (
            ctx.expect(
                written <= MAX_TOKENS,
                f"the server wrote {written} tokens for max_tokens "
                f"{MAX_TOKENS} (the gate closed the stream there): past the bound every "
                "request's price relies on",
                expected=f"at most {MAX_TOKENS}",
                received=written,
                reply=reply,
            )
            and not ctx.findings
        )
    finally:
        if not proven:  # failed, or could not be asked: nothing relies on it
            ctx.client.ledger.halt(
                "the server did not show that it stops at max_tokens (premise:max_tokens): a "
                "request's price cannot be bounded, so none that could generate is sent"
            )


def _token_events(parsed: Parsed) -> int:
    """Content events that carry a token: text, or no finish_reason. A token can show no text (a
    special token skipped, as vLLM writes an end token under ignore_eos; bytes held back): the
    meter, which must not charge a bare finish chunk, counts it as nothing, and a server past
    max_tokens whose third event was such a token passed."""
    return sum(
        1
        for event in parsed.events
        if event.kind == "content"
        for choice in event.payload.get("choices") or ()
        if isinstance(choice, dict) and (choice.get("text") or choice.get("finish_reason") is None)
    )


@register("premise:end_tokens", tags=("premise",), tokens=1, worst=END_MAX_TOKENS, premise=True)
def end_tokens(ctx: Context) -> None:
    """With only the model's end tokens allowed (allowed_token_ids), the server writes one token
    and stops, as its answer's token ids show; only then does the ledger price such requests at one."""
    end = list(ctx.model.eos_token_ids)
    body = {
        "model": ctx.config.model,
        "prompt": [0],
        "max_tokens": END_MAX_TOKENS,
        "allowed_token_ids": end,
        "return_token_ids": True,
        "logprobs": 0,
    }
    reply = ctx.client.post(ctx.api.completions_path, body)
    ctx.expect_status(reply, 200, fatal=True)
    shown = meter.answer(reply.data, body, END_MAX_TOKENS, END_MAX_TOKENS).exact
    if shown is None:
        ctx.unproven(
            "the answer shows no token ids or logprob rows (return_token_ids, logprobs): "
            "requests limited to the end tokens are priced in full"
        )
    # at most one: whether the count is right is shape:token_ids's to judge, not the premise's
    if (
        ctx.expect(
            shown <= 1,
            f"with only the end tokens allowed, the answer holds {shown} tokens",
            expected="at most 1",
            received=shown,
            reply=reply,
        )
        and ctx.client.ledger.cost is not None
    ):
        ctx.client.ledger.cost = dataclasses.replace(
            ctx.client.ledger.cost, end_tokens=frozenset(end)
        )
