"""logprobs:* — token log probabilities consistent with the text they describe."""

from __future__ import annotations

from typing import Any

from conformance.checks.helpers.common import open_stream
from conformance.engine.context import Context
from conformance.engine.registry import register

PROMPT = [0, 1, 2]
MAX_TOKENS, LOGPROBS = 4, 2


def _body(ctx: Context, **extra: Any) -> dict[str, Any]:
    return {
        "model": ctx.config.model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "logprobs": LOGPROBS,
        "seed": ctx.draws.seed,
        **extra,
    }


def _row_lengths(top: dict[str, Any], token: str | None) -> set[int]:
    """What a row may hold (vLLM: the `logprobs` likeliest, and the sampled token when it is
    not among them). A sampled token no likelier than any other in the row may be the last
    of the likeliest or the one beside them: a bf16 model's log probabilities tie often."""
    if token not in top:
        return {LOGPROBS + 1}
    value = top[token]
    others = [v for t, v in top.items() if t != token and isinstance(v, (int, float))]
    least = isinstance(value, (int, float)) and all(value <= v for v in others)
    return {LOGPROBS, LOGPROBS + 1} if least else {LOGPROBS}


def check_logprobs(
    ctx: Context, text: str, lp: Any, tokens: int | None, reply: Any, where: str
) -> None:
    """Lists of equal length; logprobs <= 0; top_logprobs bounded; tokens join to the text."""
    if not ctx.expect(isinstance(lp, dict), f"{where}: no logprobs", reply=reply):
        return
    toks, values, tops, offsets = (
        lp.get(k) or [] for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    )
    lengths = [len(toks), len(values), len(tops), len(offsets)]
    ctx.expect(
        len(set(lengths)) == 1,
        f"{where}: tokens, token_logprobs, top_logprobs, text_offset differ in length",
        received=lengths,
        reply=reply,
    )
    if tokens is not None:
        ctx.equal(f"{where}: the number of tokens", tokens, len(toks), reply)
    ctx.expect(
        all(v is None or v <= 0 for v in values),
        f"{where}: a log probability above 0",
        received=values,
        reply=reply,
    )
    for i, top in enumerate(tops):
        if not isinstance(top, dict):
            continue
        allowed = _row_lengths(top, toks[i] if i < len(toks) else None)
        ctx.expect(
            len(top) in allowed,
            f"{where}: token {i}'s top_logprobs row holds {len(top)} tokens, not the "
            f"{LOGPROBS} likeliest (logprobs) and the sampled one when it is not among them",
            expected=sorted(allowed),
            received=top,
            reply=reply,
        )
    # vLLM writes a token that ends inside a UTF-8 character as "bytes:\\x..", or as "" (and the
    # text then holds U+FFFD for the bytes no later token completed: seed 279302780 on the tiny
    # model): such tokens do not join to the text, so the text checks apply only without them.
    broken = any(not isinstance(t, str) or t.startswith("bytes:") or t == "" for t in toks)
    if broken or (isinstance(text, str) and "\ufffd" in text):
        return
    # a special token (the end of text sampled under ignore_eos, a reserved one sampled by a
    # small model) is in the tokens and left out of the text (skip_special_tokens), as
    # shape:tokens_join_text holds
    joined = "".join(t for t in toks if not ctx.is_special(t))
    ctx.equal(f"{where}: the tokens less the special tokens joined", text, joined, reply)
    starts = [offsets[0] + len("".join(toks[:i])) for i in range(len(toks))] if offsets else []
    ctx.equal(f"{where}: text_offset", starts, offsets, reply)


@register(
    "logprobs:consistent",
    tags=("logprobs",),
    tokens=2 * MAX_TOKENS,
    effects=("logprobs",),
    catches=("wrong:rows one short", "wrong:rows of the sampled token"),
)
def consistent(ctx: Context) -> None:
    """Without stream, sampled and greedy: one entry per generated token, joined tokens = text,
    offsets follow the text. The greedy answer's every row must hold the `logprobs` likeliest
    alone (its token is the likeliest): a row short of one shows there on any model, where a
    sampled token outside them may hide it."""
    for extra, what in (({}, "sampled"), ({"temperature": 0}, "greedy")):
        reply = ctx.client.post(ctx.api.completions_path, _body(ctx, **extra))
        ctx.expect_status(reply, 200, fatal=True)
        for choice in ctx.expect_object(reply).get("choices", []):
            check_logprobs(
                ctx,
                choice.get("text", ""),
                choice.get("logprobs"),
                MAX_TOKENS,
                reply,
                f"{what}, choice {choice.get('index')}",
            )


@register("logprobs:stream", tags=("logprobs", "streaming"), tokens=MAX_TOKENS)
def stream(ctx: Context) -> None:
    """In a stream, each chunk's logprobs describe that chunk's text."""
    reply = open_stream(ctx, _body(ctx))
    count = 0
    for i, event in enumerate(reply.parsed.events):
        if event.kind != "content":
            continue
        for choice in event.payload["choices"]:
            lp = choice.get("logprobs")
            check_logprobs(ctx, choice.get("text", ""), lp, None, reply, f"chunk {i}")
            count += len(lp.get("tokens") or []) if isinstance(lp, dict) else 0
    ctx.equal("the tokens with logprobs over the stream", MAX_TOKENS, count, reply)


@register(
    "logprobs:prompt_logprobs", tags=("logprobs",), tokens=MAX_TOKENS, effects=("prompt_logprobs",)
)
def prompt_logprobs(ctx: Context) -> None:
    """prompt_logprobs: one entry per prompt token, the first null."""
    reply = ctx.client.post(ctx.api.completions_path, _body(ctx, prompt_logprobs=1))
    ctx.expect_status(reply, 200, fatal=True)
    for choice in ctx.expect_object(reply).get("choices", []):
        entries = choice.get("prompt_logprobs")
        if not ctx.expect(isinstance(entries, list), "no prompt_logprobs", reply=reply):
            continue
        ctx.equal("the number of prompt_logprobs entries", len(PROMPT), len(entries), reply)
        ctx.expect(
            bool(entries) and entries[0] is None,
            "the first prompt_logprobs entry is not null",
            received=entries[:1],
            reply=reply,
        )
