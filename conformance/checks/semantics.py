"""semantics:* — what a success body means, not only its shape, in a few tokens.

A body can match every schema and still lie: name another model, say "stop" for
a choice that ran to max_tokens, count usage that its token ids contradict.
These checks hold each field to its meaning (openapi.yaml and the docs'
"Response fields"), without and with stream (`semantics:stream.*`, chunk by
chunk), for any deployment:

- a request whose every choice must run to max_tokens (token-id prompts, n,
  ignore_eos, return_token_ids) says model, id, created, finish_reason
  "length", the choice indexes and usage;
- requests that must stop use `allowed_token_ids` so the tokens are known
  whatever the model: the model's end tokens (x-models eos_token_ids) for the
  end of sequence; the token of a one-token string (learned from the server's
  own prompt_token_ids) for a stop string, a stop token id and min_tokens.

`object` is the schema's const, which stream:event_schema and usage:arithmetic
already hold every body to.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.checks.helpers.common import PROMPTS, open_stream, prompt_ids_returned
from conformance.engine.config import CLOCK_SLACK_S
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.wire.client import Reply, StreamReply

N, MAX_TOKENS = 2, 2  # 2 prompts x n = 2 x 2 tokens: 8 tokens
PROBE = "a"  # a string of one token whose text is itself (any byte-level BPE)
MIN_TOKENS = 2  # the stop string fires on every token, so min_tokens + 1 are written
STOP_MAX_TOKENS = MIN_TOKENS + 2
EXHAUSTING = N * len(PROMPTS) * MAX_TOKENS  # the tokens of the request that runs to max_tokens


@dataclass
class Choice:
    """One choice as a client sees it, from a Completion or put together from a stream's chunks."""

    index: Any  # the server's, as it wrote it (checked for being an int where it matters)
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    finish_reason: Any = None
    stop_reason: Any = None
    chunks: list[dict[str, Any]] = field(default_factory=list)  # a stream's, in order


@dataclass
class Sent:
    """A reply with the client's clock before the request and after the response."""

    reply: Reply
    window: tuple[float, float]

    def heads(self) -> list[dict[str, Any]]:
        """The Completion, or every JSON event of the stream but errors."""
        if isinstance(self.reply, StreamReply):
            return [
                e.payload
                for e in self.reply.parsed.events
                if isinstance(e.payload, dict) and e.kind in ("content", "usage", "activations")
            ]
        return [self.reply.data] if isinstance(self.reply.data, dict) else []

    def choices(self) -> list[Choice]:
        """In the order they arrived (a stream: by each choice's first chunk)."""
        if not isinstance(self.reply, StreamReply):
            return [
                Choice(
                    c.get("index"),
                    c.get("text") or "",
                    list(c.get("token_ids") or []),
                    c.get("prompt_token_ids"),
                    c.get("finish_reason"),
                    c.get("stop_reason"),
                )
                for head in self.heads()
                for c in head.get("choices") or []
                if isinstance(c, dict)
            ]
        out: dict[Any, Choice] = {}
        for head in self.heads():
            for c in head.get("choices") or []:
                if not isinstance(c, dict):
                    continue
                choice = out.setdefault(c.get("index"), Choice(c.get("index")))
                choice.chunks.append(c)
                choice.text += c.get("text") or ""
                choice.token_ids += c.get("token_ids") or []
                if c.get("prompt_token_ids") is not None:
                    choice.prompt_token_ids = c["prompt_token_ids"]
                choice.finish_reason, choice.stop_reason = (
                    c.get("finish_reason"),
                    c.get("stop_reason"),
                )
        return list(out.values())

    def usage(self) -> Any:
        usage = [h["usage"] for h in self.heads() if isinstance(h.get("usage"), dict)]
        return usage[-1] if usage else None


# -- the requests, each sent once per run ---------------------------------------------


def _send(ctx: Context, key: str, body: dict[str, Any], stream: bool) -> Sent:
    memo = f"semantics.{'stream.' if stream else ''}{key}"
    if memo not in ctx.memo:
        start = time.time()
        if stream:
            reply: Reply = open_stream(ctx, {**body, "stream_options": {"include_usage": True}})
        else:
            reply = ctx.client.post(ctx.api.completions_path, body)
        ctx.memo[memo] = Sent(reply, (start, time.time()))
    sent: Sent = ctx.memo[memo]
    ctx.expect_status(sent.reply, 200, fatal=True)
    if not sent.heads():
        ctx.stop(
            "a 200 without a Completion",
            received=sent.reply.exchange.response_body,
            reply=sent.reply,
        )
    return sent


def exhausting(ctx: Context, stream: bool) -> Sent:
    """Every choice runs to max_tokens: ignore_eos, no stop."""
    return _send(
        ctx,
        "exhausting",
        {
            "model": ctx.config.model,
            "prompt": PROMPTS,
            "n": N,
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "return_token_ids": True,
        },
        stream,
    )


def end_of_sequence(ctx: Context, stream: bool) -> Sent:
    """Only the model's end tokens are allowed: the first token ends the sequence."""
    return _send(
        ctx,
        "eos",
        {
            "model": ctx.config.model,
            "prompt": PROBE,
            "max_tokens": MAX_TOKENS,
            "allowed_token_ids": list(ctx.model.eos_token_ids),
            "return_token_ids": True,
        },
        stream,
    )


def probe_token(ctx: Context) -> int:
    """The id of PROBE's one token, as the server tokenizes it (the last of its prompt_token_ids)."""
    sent = end_of_sequence(ctx, stream=False)
    return prompt_ids_returned(
        ctx, PROBE, sent.choices()[0].prompt_token_ids if sent.choices() else None
    )[-1]


def repeating(ctx: Context, key: str, stream: bool, **fields: Any) -> Sent:
    """Only PROBE's token is allowed, so the text is PROBE repeated, whatever the model (the
    premise: a choice of other tokens skips the check, which would blame its own field)."""
    probe = probe_token(ctx)
    sent = _send(
        ctx,
        key,
        {
            "model": ctx.config.model,
            "prompt": PROBE,
            "max_tokens": STOP_MAX_TOKENS,
            "allowed_token_ids": [probe],
            "return_token_ids": True,
            **fields,
        },
        stream,
    )
    allowed = {probe, *ctx.model.eos_token_ids, *fields.get("stop_token_ids", ())}
    other = sorted({t for c in sent.choices() for t in c.token_ids if t not in allowed})
    if other:
        ctx.unproven(
            f"with only the token of {PROBE!r} ({probe}) allowed, a choice holds tokens {other[:8]}: "
            "allowed_token_ids is not applied here (semantics:finish_reason.eos), and this check reads "
            "its field through it"
        )
    return sent


def the_choice(ctx: Context, sent: Sent) -> Choice:
    choices = sent.choices()
    if len(choices) != 1:
        ctx.stop(
            "not exactly one choice for one prompt and n = 1",
            expected=1,
            received=len(choices),
            reply=sent.reply,
        )
    return choices[0]


# -- registration: each meaning without and with stream -------------------------------

Meaning = Callable[[Context, bool], None]
PROBE_BOUND = MAX_TOKENS  # the probe (end_of_sequence without stream) a stop check may send first


def both(
    name: str,
    tokens: int,
    shares: str = "",
    tags: tuple[str, ...] = (),
    effects: tuple[str, ...] = (),
) -> Callable[[Meaning], Meaning]:
    """Register `semantics:<name>` and `semantics:stream.<name>` from one function of (ctx, stream)."""

    def wrap(func: Meaning) -> Meaning:
        doc = (func.__doc__ or "").strip()

        def plain(ctx: Context) -> None:
            func(ctx, False)

        def streamed(ctx: Context) -> None:
            func(ctx, True)

        register(
            f"semantics:{name}",
            tags=tags,
            tokens=tokens,
            shares=shares and f"semantics.{shares}",
            doc=doc,
            effects=effects,
        )(plain)
        register(
            f"semantics:stream.{name}",
            tags=("streaming", *tags),
            tokens=tokens,
            shares=shares and f"semantics.stream.{shares}",
            doc=f"In a stream, chunk by chunk: {doc}",
            effects=effects,
        )(streamed)
        return func

    return wrap


# -- what every body says --------------------------------------------------------------


@both("model", EXHAUSTING, "exhausting", effects=("model",))
def model(ctx: Context, stream: bool) -> None:
    """`model` is the name the caller used, in the Completion and in every chunk."""
    sent = exhausting(ctx, stream)
    names = [h.get("model") for h in sent.heads()]
    wrong = sorted({repr(n) for n in names if n != ctx.config.model})
    ctx.expect(
        not wrong,
        "the body names another model than the caller's",
        expected=ctx.config.model,
        received=wrong,
        reply=sent.reply,
    )


@both("id", EXHAUSTING, "exhausting")
def completion_id(ctx: Context, stream: bool) -> None:
    """`id` is x-request-id.completion_prefix and the hex digits of X-Request-Id, the same in every chunk."""
    sent = exhausting(ctx, stream)
    rid = ctx.api.request_id
    header = sent.reply.request_id_header or ""
    want = rid["completion_prefix"] + header.removeprefix(rid["prefix"])
    ids = [h.get("id") for h in sent.heads()]
    ctx.expect(
        len(set(map(repr, ids))) == 1,
        "the chunks of one stream have different ids",
        expected="one id",
        received=sorted(set(map(repr, ids)))[:5],
        reply=sent.reply,
    )
    ctx.expect(
        header.startswith(rid["prefix"]) and ids[0] == want,
        "the id is not the completion prefix and the digits of X-Request-Id",
        expected=want,
        received=ids[0],
        reply=sent.reply,
    )


@both("created", EXHAUSTING, "exhausting")
def created(ctx: Context, stream: bool) -> None:
    """`created` (Unix seconds) lies in the client's clock window of the request, the same in every chunk."""
    sent = exhausting(ctx, stream)
    stamps = [h.get("created") for h in sent.heads()]
    ctx.expect(
        len(set(map(repr, stamps))) == 1,
        "the chunks of one stream have different created",
        expected="one created",
        received=sorted(set(map(repr, stamps)))[:5],
        reply=sent.reply,
    )
    low, high = int(sent.window[0]) - CLOCK_SLACK_S, int(sent.window[1]) + CLOCK_SLACK_S
    ctx.expect(
        type(stamps[0]) is int and low <= stamps[0] <= high,
        f"created is not the time of the request (client clock, {CLOCK_SLACK_S} s of slack)",
        expected=f"{low}..{high}",
        received=stamps[0],
        reply=sent.reply,
    )


# -- the choices -----------------------------------------------------------------------


@both("choices", EXHAUSTING, "exhausting", effects=("prompt", "n"))
def choices(ctx: Context, stream: bool) -> None:
    """One choice per prompt x n, indexed prompts first, then n; each with its own prompt's ids."""
    sent = exhausting(ctx, stream)
    got = sent.choices()
    want = list(range(len(PROMPTS) * N))
    indexes = [c.index for c in got]
    if stream:
        # chunks of different choices interleave; each index once, each choice finished once
        ctx.equal("the choice indexes", want, sorted(indexes, key=repr), sent.reply)
        for c in got:
            finished = [
                x.get("finish_reason") for x in c.chunks if x.get("finish_reason") is not None
            ]
            ctx.expect(
                len(finished) == 1,
                f"choice {c.index}: not exactly one chunk with a finish_reason",
                expected=1,
                received=finished,
                reply=sent.reply,
            )
    else:
        ctx.equal("the choice indexes (in order)", want, indexes, sent.reply)
    for c in got:
        if type(c.index) is int and 0 <= c.index < len(want):
            ctx.equal(
                f"choice {c.index}'s prompt_token_ids (index = prompt x n + j)",
                PROMPTS[c.index // N],
                c.prompt_token_ids,
                sent.reply,
            )


@both("usage_token_ids", EXHAUSTING, "exhausting", effects=("return_token_ids",))
def usage_token_ids(ctx: Context, stream: bool) -> None:
    """usage agrees with the ids (return_token_ids): each prompt's prompt_token_ids counted once, every token_ids."""
    sent = exhausting(ctx, stream)
    got = sent.choices()
    # each prompt is in n choices (which ones is semantics:choices's to say)
    prompt = sum(len(c.prompt_token_ids or []) for c in got) // N
    completion = sum(len(c.token_ids) for c in got)
    want = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    usage = sent.usage()
    received = {k: usage.get(k) for k in want} if isinstance(usage, dict) else usage
    ctx.equal("the usage counted from token_ids and prompt_token_ids", want, received, sent.reply)


# -- why each choice ended ---------------------------------------------------------------


@both("finish_reason.length", EXHAUSTING, "exhausting", effects=("max_tokens",))
def finish_length(ctx: Context, stream: bool) -> None:
    """A choice that wrote max_tokens tokens without a stop (ignore_eos) ends with "length", stop_reason null."""
    sent = exhausting(ctx, stream)
    for c in sent.choices():
        ctx.equal(
            f"choice {c.index}'s (finish_reason, stop_reason) after max_tokens = {MAX_TOKENS}",
            ["length", None],
            [c.finish_reason, c.stop_reason],
            sent.reply,
        )


@both("finish_reason.eos", MAX_TOKENS, "eos", effects=("allowed_token_ids",))
def finish_eos(ctx: Context, stream: bool) -> None:
    """A choice that ends at the model's end-of-sequence token: "stop", stop_reason null."""
    sent = end_of_sequence(ctx, stream)
    c = the_choice(ctx, sent)
    ctx.equal(
        "(finish_reason, stop_reason) when only end tokens are allowed",
        ["stop", None],
        [c.finish_reason, c.stop_reason],
        sent.reply,
    )


@both("stop_string", STOP_MAX_TOKENS + PROBE_BOUND, effects=("stop",))
def stop_string(ctx: Context, stream: bool) -> None:
    """A stop string that fired: "stop", stop_reason the string, and the text never holds it."""
    sent = repeating(ctx, "stop", stream, stop=[PROBE])
    c = the_choice(ctx, sent)
    ctx.equal(
        "(finish_reason, stop_reason) when the stop string fired",
        ["stop", PROBE],
        [c.finish_reason, c.stop_reason],
        sent.reply,
    )
    pieces = [x.get("text") for x in c.chunks] if stream else [c.text]
    ctx.expect(
        PROBE not in c.text and not any(PROBE in (p or "") for p in pieces),
        "the text holds the stop string (include_stop_str_in_output is false)",
        expected=f"no {PROBE!r}",
        received=pieces,
        reply=sent.reply,
    )


@both(
    "stop_string.included", STOP_MAX_TOKENS + PROBE_BOUND, effects=("include_stop_str_in_output",)
)
def stop_string_included(ctx: Context, stream: bool) -> None:
    """With include_stop_str_in_output the text ends with the stop string; stop_reason is the string."""
    sent = repeating(ctx, "stop_included", stream, stop=[PROBE], include_stop_str_in_output=True)
    c = the_choice(ctx, sent)
    ctx.equal(
        "(finish_reason, stop_reason) when the stop string fired",
        ["stop", PROBE],
        [c.finish_reason, c.stop_reason],
        sent.reply,
    )
    ctx.expect(
        c.text.endswith(PROBE),
        "the text does not end with the stop string (include_stop_str_in_output is true)",
        expected=f"... {PROBE!r}",
        received=c.text,
        reply=sent.reply,
    )


@both("stop_token_id", STOP_MAX_TOKENS + PROBE_BOUND, effects=("stop_token_ids",))
def stop_token_id(ctx: Context, stream: bool) -> None:
    """A stop_token_ids id that fired: "stop", stop_reason that id (an integer)."""
    token = probe_token(ctx)
    sent = repeating(ctx, "stop_token_id", stream, stop_token_ids=[token])
    c = the_choice(ctx, sent)
    ctx.expect(
        [c.finish_reason, c.stop_reason] == ["stop", token] and type(c.stop_reason) is int,
        "(finish_reason, stop_reason) differs when a stop token id fired",
        expected=["stop", token],
        received=[c.finish_reason, c.stop_reason],
        reply=sent.reply,
    )


@both("min_tokens", STOP_MAX_TOKENS + PROBE_BOUND, effects=("min_tokens",))
def min_tokens(ctx: Context, stream: bool) -> None:
    """No stop before min_tokens tokens: a stop string that matches every token fires on token min_tokens + 1."""
    sent = repeating(ctx, "min_tokens", stream, stop=[PROBE], min_tokens=MIN_TOKENS)
    c = the_choice(ctx, sent)
    usage = sent.usage()
    written = usage.get("completion_tokens") if isinstance(usage, dict) else None
    ctx.equal(
        f"the tokens written (usage) with min_tokens = {MIN_TOKENS} and a stop string on every token",
        MIN_TOKENS + 1,
        written,
        sent.reply,
    )
    ctx.equal("the finish_reason", "stop", c.finish_reason, sent.reply)
