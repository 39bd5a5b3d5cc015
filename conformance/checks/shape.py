"""shape:* — how a success body's logprobs, text, offsets and token ids fit together.

What vLLM 0.32 writes, seen on the reference (api-decisions.md, "Response details
as vLLM writes them"): for "The sky is" with echo and logprobs, the tokens are
["<|begin_of_text|>", "The", " sky", " is", ...], text_offset [0, 17, 20, 24, ...],
and the text "The sky is..." without the BOS text. Special tokens are written as
their text (x-models `special_tokens`), and text_offset counts them.

Each request is a few tokens. Generated tokens are limited to single ASCII
characters (ids 0-9 of the Llama 3 vocabulary: "!", '"', "#", ...) and the end
token, so that each token's text is whole characters and the tokens can be joined.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import Any

from conformance.checks.helpers.common import n_applied, open_stream, usage_of
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.wire.client import Reply

PROMPT = "The sky is"
ASCII_IDS = list(range(10))
MAX_TOKENS, LOGPROBS = 4, 1
TOLERANCE = 1e-4  # a logprob streamed and not streamed: the same up to float noise


def special(ctx: Context) -> dict[int, str]:
    return ctx.api.special_tokens(ctx.config.model)


def _body(ctx: Context, **extra: Any) -> dict[str, Any]:
    """Echo and logprobs; the end token may come (it is special: its text is left out)."""
    allowed = ASCII_IDS + list(ctx.spec_model.eos_token_ids)
    return {
        "model": ctx.config.model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "echo": True,
        "logprobs": LOGPROBS,
        "seed": ctx.draws.seed,
        "allowed_token_ids": allowed,
        **extra,
    }


def _choices(ctx: Context, reply: Reply) -> list[dict[str, Any]]:
    ctx.expect_status(reply, 200, fatal=True)
    choices = reply.data.get("choices") if isinstance(reply.data, dict) else None
    if not isinstance(choices, list) or not choices:
        ctx.stop("no choices in the Completion", received=reply.data, reply=reply)
    return choices


def _logprobs(ctx: Context, choice: dict[str, Any], reply: Reply) -> dict[str, list[Any]]:
    lp = choice.get("logprobs")
    names = ("tokens", "token_logprobs", "top_logprobs", "text_offset")
    if not isinstance(lp, dict) or not all(isinstance(lp.get(n), list) for n in names):
        ctx.stop(
            f"choice {choice.get('index')}: logprobs without its four lists",
            received=lp,
            reply=reply,
        )
    return lp


def offsets_of(tokens: list[str]) -> list[int]:
    """text_offset as vLLM writes it: the running sum of the tokens' lengths, from 0."""
    return list(accumulate((len(t) for t in tokens[:-1]), initial=0)) if tokens else []


@register("shape:text_offset", tags=("logprobs",), tokens=2 * MAX_TOKENS)
def text_offset(ctx: Context) -> None:
    """text_offset is the running sum of the token texts' lengths from 0, special tokens counted:
    with echo from the prompt's first token, without it from the first generated one."""
    for echo in (True, False):
        reply = ctx.client.post(ctx.api.completions_path, _body(ctx, echo=echo))
        for choice in _choices(ctx, reply):
            lp = _logprobs(ctx, choice, reply)
            ctx.equal(
                f"choice {choice.get('index')}, echo {str(echo).lower()}: text_offset",
                offsets_of(lp["tokens"]),
                lp["text_offset"],
                reply,
            )


@register("shape:tokens_join_text", tags=("logprobs",), tokens=2 * MAX_TOKENS)
def tokens_join_text(ctx: Context) -> None:
    """The tokens less the special tokens join to the choice's text, echoed or not; the
    echoed string prompt's first token is the BOS token's text."""
    bos = special(ctx).get(ctx.spec_model.bos_token_id)
    for echo in (True, False):
        reply = ctx.client.post(ctx.api.completions_path, _body(ctx, echo=echo))
        for choice in _choices(ctx, reply):
            lp = _logprobs(ctx, choice, reply)
            where = f"echo {str(echo).lower()}, choice {choice.get('index')}"
            ctx.equal(
                f"{where}: the tokens less the special tokens joined",
                choice.get("text"),
                "".join(t for t in lp["tokens"] if not ctx.is_special(t)),
                reply,
            )
            if echo:
                ctx.equal(
                    f"{where}: the first token (BOS, written as its text)",
                    bos,
                    _first(lp["tokens"]),
                    reply,
                )


@register("shape:bos_echo", tags=("logprobs",), tokens=MAX_TOKENS, effects=("echo",))
def bos_echo(ctx: Context) -> None:
    """A token-id prompt that starts with the BOS id echoes the BOS token's text first, in the
    text and in logprobs, and text_offset counts it."""
    bos_id = ctx.spec_model.bos_token_id
    bos = special(ctx)[bos_id]
    prompt = [bos_id, 0, 1, 2]
    reply = ctx.client.post(ctx.api.completions_path, _body(ctx, prompt=prompt))
    for choice in _choices(ctx, reply):
        lp = _logprobs(ctx, choice, reply)
        where = f"choice {choice.get('index')}"
        text = choice.get("text")
        ctx.expect(
            isinstance(text, str) and text.startswith(bos),
            f"{where}: the echoed text does not start with the BOS token's text",
            expected=bos + "...",
            received=text,
            reply=reply,
        )
        ctx.equal(f"{where}: the first token", bos, _first(lp["tokens"]), reply)
        ctx.equal(
            f"{where}: the second token's text_offset",
            len(bos),
            _first(lp["text_offset"][1:]),
            reply,
        )


@register("shape:top_logprobs_hold_the_token", tags=("logprobs",), tokens=MAX_TOKENS)
def top_logprobs_hold_the_token(ctx: Context) -> None:
    """Each top_logprobs entry holds the sampled token (special tokens by their text), with its logprob."""
    reply = ctx.client.post(ctx.api.completions_path, _body(ctx, echo=False, logprobs=2))
    for choice in _choices(ctx, reply):
        lp = _logprobs(ctx, choice, reply)
        for i, (token, value, top) in enumerate(
            zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])
        ):
            where = f"choice {choice.get('index')}, token {i}"
            if not ctx.expect(
                isinstance(top, dict) and token in top,
                f"{where}: top_logprobs lacks the token",
                expected=token,
                received=top,
                reply=reply,
            ):
                continue
            ctx.expect(
                _close(top[token], value),
                f"{where}: the token's logprob differs in top_logprobs",
                expected=value,
                received=top[token],
                reply=reply,
            )


@register("shape:token_ids", tags=("logprobs",), tokens=2 * MAX_TOKENS)
def token_ids(ctx: Context) -> None:
    """With return_token_ids: token_ids has completion_tokens entries over the choices (n = 2),
    prompt_token_ids the prompt's, and logprobs one entry per token id."""
    prompt = [ctx.spec_model.bos_token_id, 0, 1]
    reply = ctx.client.post(
        ctx.api.completions_path,
        _body(ctx, prompt=prompt, echo=False, n=2, temperature=1, return_token_ids=True),
    )
    choices = _choices(ctx, reply)
    usage = usage_of(ctx, reply)
    ids = [c.get("token_ids") for c in choices]
    lists = [x for x in ids if isinstance(x, list)]
    if not ctx.expect(
        len(lists) == len(ids),
        "a choice without token_ids",
        received=ids,
        reply=reply,
    ):
        return
    ctx.equal(
        "token_ids over the choices",
        usage.get("completion_tokens"),
        sum(len(x) for x in lists),
        reply,
    )
    for choice in choices:
        where = f"choice {choice.get('index')}"
        ctx.equal(f"{where}: prompt_token_ids", prompt, choice.get("prompt_token_ids"), reply)
        ctx.equal(
            f"{where}: logprobs entries",
            len(choice["token_ids"]),
            len(_logprobs(ctx, choice, reply)["tokens"]),
            reply,
        )
    n_applied(ctx, 2, len(choices))  # what held for one choice, said; the second unseen


@register(
    "shape:stream_joins_to_whole",
    tags=("logprobs", "streaming"),
    tokens=2 * MAX_TOKENS,
    catches=("wrong:echo one late, in streams only",),
)
def stream_joins_to_whole(ctx: Context) -> None:
    """A stream's chunks of a choice join to the same text and logprobs as the whole response
    (echo included; text_offset runs on across the chunks)."""
    body = _body(ctx, temperature=0)
    whole = _choices(ctx, ctx.client.post(ctx.api.completions_path, body))
    reply = open_stream(ctx, body)
    joined: dict[int, dict[str, Any]] = {}
    for event in reply.parsed.events:
        if event.kind != "content":
            continue
        for c in event.payload.get("choices", []):
            into = joined.setdefault(
                c.get("index"),
                {
                    "text": "",
                    "tokens": [],
                    "token_logprobs": [],
                    "top_logprobs": [],
                    "text_offset": [],
                },
            )
            into["text"] += c.get("text") or ""
            for name, values in (c.get("logprobs") or {}).items():
                if name in into and isinstance(values, list):
                    into[name].extend(values)
    for choice in whole:
        got = joined.get(choice["index"], {}) if "index" in choice else {}
        lp = _logprobs(ctx, choice, reply)
        where = f"choice {choice.get('index')}"
        ctx.equal(f"{where}: the streamed text", choice.get("text"), got.get("text"), reply)
        for name in ("tokens", "text_offset"):
            ctx.equal(f"{where}: the streamed {name}", lp[name], got.get(name), reply)
        ctx.expect(
            _all_close(lp["token_logprobs"], got.get("token_logprobs")),
            f"{where}: the streamed token_logprobs differ",
            expected=lp["token_logprobs"],
            received=got.get("token_logprobs"),
            reply=reply,
        )
        ctx.equal(
            f"{where}: the streamed top_logprobs' tokens",
            [None if t is None else sorted(t) for t in lp["top_logprobs"]],
            [None if t is None else sorted(t) for t in got.get("top_logprobs", [])],
            reply,
        )


def _first(values: list[Any]) -> Any:
    return values[0] if values else None


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return (
        isinstance(a, (int, float))
        and isinstance(b, (int, float))
        and math.isclose(a, b, abs_tol=TOLERANCE)
    )


def _all_close(a: list[Any], b: Any) -> bool:
    return isinstance(b, list) and len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
