"""drawn:* — the gate's probes drawn from the whole space of requests, per run (engine/draws.py).

The other groups ask a few fixed points: short prompts, small max_tokens, one-character stops.
A server wrong everywhere else would pass them. These checks send requests drawn from the
run's seed (draws.py says how they are sized: a server wrong on a quarter of a range fails at
least 99 runs in 100):

- max_tokens: PROBES prompts cut from the shipped corpus (12 to 320 tokens), each with a
  max_tokens from 17 to 128 and ignore_eos, seeded at a temperature of 0.25 to 2 (those of 0.69
  to 1 with a top_p, those of 1.125 to 1.56 with a top_k): each answer shows exactly max_tokens
  tokens (its logprob rows) and finish_reason "length", and its usage says so;
- default_max_tokens: a prompt of max_model_len less a few token ids and no max_tokens generates
  exactly those few (the documented default, not a server's own);
- stop: a stop string of 2 to 16 characters taken from each probe's own answer, early in it, sent
  with the same request: the answer is the probe's text up to the stop string, finish_reason
  "stop" (half of them streamed);
- temperature, top_p: the probes' rows hold what they sampled to the temperature and the top_p
  (0.3 to 0.95) asked;
- beside_stream: two probes sent again while a longer one is open as a stream: each is its
  answer alone.

The probe checks share one spend (the probes, asked once by whichever runs first).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conformance.checks.helpers.agree import difference
from conformance.checks.helpers.common import open_stream
from conformance.checks.helpers.tempered import (
    Counted,
    cut_share,
    evidence_against,
    likeliest_at_one,
    likeliest_share,
    mass_before,
)
from conformance.engine.config import RunConfig
from conformance.engine.context import Context
from conformance.engine.draws import TEMPERATURES_DRAWN, Draws, Probe
from conformance.engine.registry import register
from conformance.wire.client import Reply, StreamReply

TAGS = ("drawn",)
PROMPT_ID = 0  # a max_model_len prompt of token ids: id 0 is in every vocabulary, short in JSON


@functools.lru_cache(maxsize=8)
def _draws(seed: int) -> Draws:
    return Draws.of(seed)


def probes_of(config: RunConfig) -> tuple[Probe, ...]:
    assert config.seed is not None  # RunConfig draws one
    return _draws(config.seed).probes


def _probe_tokens(config: RunConfig) -> int:
    return sum(p.max_tokens for p in probes_of(config))


def _drawn_tokens(config: RunConfig) -> int:
    """The one spend the probe checks share (whichever runs first asks the probes, which the
    others read again): the probes, their stopped twins, the requests beside a stream."""
    return _probe_tokens(config) + _stop_tokens(config) + _beside_tokens(config)


def rows(ctx: Context) -> int:
    """The logprobs a probe asks for: the spec's maximum (drawn:temperature and drawn:top_p bound
    what the rest of a row holds by the K likeliest)."""
    return int(ctx.api.schema("CompletionRequest")["properties"]["logprobs"]["maximum"])


def probe_body(ctx: Context, probe: Probe) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": ctx.config.model,
        "prompt": probe.prompt,
        "max_tokens": probe.max_tokens,
        "temperature": probe.temperature,
        "ignore_eos": True,
        "logprobs": rows(ctx),
        "seed": probe.seed,
    }
    if probe.top_p is not None:
        body["top_p"] = probe.top_p
    if probe.top_k is not None:
        body["top_k"] = probe.top_k
    return body


def _said(probe: Probe) -> str:
    kind = f"temperature {probe.temperature}"
    kind += "" if probe.top_p is None else f", top_p {probe.top_p}"
    kind += "" if probe.top_k is None else f", top_k {probe.top_k}"
    return f"max_tokens {probe.max_tokens}, {kind}, a prompt of {len(probe.prompt)} characters"


def _one_choice(ctx: Context, reply: Reply) -> dict[str, Any]:
    choices = reply.data.get("choices") if isinstance(reply.data, dict) else None
    if not (isinstance(choices, list) and len(choices) == 1 and isinstance(choices[0], dict)):
        ctx.stop("not exactly one choice for one prompt", received=reply.data, reply=reply)
    choice: dict[str, Any] = choices[0]
    return choice


def answered(ctx: Context, i: int) -> tuple[Reply, dict[str, Any]]:
    """Probe i's answer, asked once per run (the checks below read it)."""
    key = ("drawn", i)
    if key not in ctx.memo:
        probe = ctx.draws.probes[i]
        reply = ctx.client.post(ctx.api.completions_path, probe_body(ctx, probe))
        ctx.expect_status(reply, 200, fatal=True)
        ctx.memo[key] = reply, _one_choice(ctx, reply)
    reply, choice = ctx.memo[key]
    return reply, choice


def _shown(choice: dict[str, Any]) -> int | None:
    lp = choice.get("logprobs")
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    return len(tokens) if isinstance(tokens, list) else None


def _length_finding(probe: Probe, reply: Reply, choice: dict[str, Any]) -> str | None:
    """Why an answer of ignore_eos and max_tokens is not exactly max_tokens long, or None."""
    want = probe.max_tokens
    shown = _shown(choice)
    usage = reply.data.get("usage") if isinstance(reply.data, dict) else None
    claim = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if shown != want:
        return f"its logprob rows show {shown} tokens"
    if choice.get("finish_reason") != "length":
        return f"finish_reason {choice.get('finish_reason')!r}, not 'length'"
    if claim != want:
        return f"usage.completion_tokens is {claim!r}"
    return None


@register(
    "drawn:max_tokens",
    tags=TAGS,
    tokens=_drawn_tokens,
    shares="drawn",
    effects=("max_tokens", "ignore_eos"),
    catches=("wrong:logprobs capped at 5", "wrong:long prompts unbounded", "wrong:cut at 16"),
)
def max_tokens(ctx: Context) -> None:
    """Each drawn probe (a corpus prompt, max_tokens 17 to 128, ignore_eos, seeded)
    shows exactly max_tokens tokens, finish_reason "length", and usage saying so: every probe,
    no any-of-N."""
    off = []
    for i, probe in enumerate(ctx.draws.probes):
        reply, choice = answered(ctx, i)
        why = _length_finding(probe, reply, choice)
        if why is not None:
            off.append((probe, why, reply))
    if off:
        probe, why, reply = off[0]
        ctx.fail(
            f"{len(off)} of {len(ctx.draws.probes)} drawn probes with ignore_eos are not "
            f"max_tokens long; the first ({_said(probe)}): {why}",
            expected=probe.max_tokens,
            reply=reply,
        )


def _default_prompt(ctx: Context) -> int:
    return ctx.max_model_len - ctx.draws.default_room


@register(
    "drawn:default_max_tokens",
    tags=TAGS,
    tokens=lambda config: _draws(config.seed or 0).default_room,
    effects=("max_tokens",),
    catches=("wrong:default max_tokens 16",),
)
def default_max_tokens(ctx: Context) -> None:
    """A prompt of max_model_len less a drawn few token ids (17 to 40), ignore_eos and no
    max_tokens: the documented default (max_model_len less the prompt) generates exactly those
    few, finish_reason "length"."""
    room = ctx.draws.default_room
    length = _default_prompt(ctx)
    ctx.need_given("max_model_len", f"a prompt of {length} token ids")
    if 2 * length + 256 > ctx.api.caps["max_body_bytes"]:
        ctx.skip(f"a prompt of {length} token ids does not fit the body cap")
    body = {
        "model": ctx.config.model,
        "prompt": [PROMPT_ID] * length,
        "ignore_eos": True,
        "logprobs": 1,
    }
    reply = ctx.client.post(ctx.api.completions_path, body)
    ctx.expect_status(reply, 200, fatal=True)
    choice = _one_choice(ctx, reply)
    shown, reason = _shown(choice), choice.get("finish_reason")
    ctx.expect(
        (shown, reason) == (room, "length"),
        f"a prompt of {length} token ids (max_model_len {ctx.max_model_len}) without max_tokens "
        f"generated {shown} tokens, finish_reason {reason!r}: the default max_tokens is "
        f"max_model_len less the prompt, {room}",
        expected=room,
        received=shown,
        reply=reply,
    )


STOP_TOKENS = 24  # the most a stopped twin's max_tokens may be
MARGIN = 4  # tokens a stopped twin may run past its stop string's last one (within STOP_TOKENS and
# the probe's max_tokens: a server that ignores the stop writes the whole stop string all the same)


def _stop_tokens(config: RunConfig) -> int:
    """The stopped twins, each of max_tokens at most STOP_TOKENS: a server that ignores the stop
    runs each to it."""
    return sum(min(p.max_tokens, STOP_TOKENS) for p in probes_of(config))


def stop_tokens(
    choice: dict[str, Any], end: int, special: Callable[[str], bool] = lambda _: False
) -> int | None:
    """How many of a choice's tokens (its logprob rows) reach the text's first `end` characters,
    or None where the rows do not join to its text (a token of part of a character). A special
    token (an end token generated under ignore_eos) counts as a token with no text, as
    skip_special_tokens leaves it out of the text."""
    lp = choice.get("logprobs")
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return None
    shown = ["" if special(t) else t for t in tokens]
    if "".join(shown) != choice.get("text"):
        return None
    length = 0
    for i, token in enumerate(shown):
        length += len(token)
        if length >= end:
            return i + 1
    return None


def stop_string(text: str, probe: Probe) -> str | None:
    """The stop string probe takes from its answer's text: stop_chars characters from stop_at
    (moved to the first character that is not a space), or None where the text is too short."""
    start = probe.stop_at
    while start < len(text) and text[start].isspace():
        start += 1
    piece = text[start : start + probe.stop_chars]
    return piece if len(piece) == probe.stop_chars and piece.strip() else None


def _text(reply: Reply) -> tuple[str, Any]:
    """The one choice's text and finish_reason, from a Completion or a stream's chunks."""
    if not isinstance(reply, StreamReply):
        choice = reply.data["choices"][0] if isinstance(reply.data, dict) else {}
        return str(choice.get("text") or ""), choice.get("finish_reason")
    text, reason = "", None
    for event in reply.parsed.events:
        for c in event.payload.get("choices", []) if event.kind == "content" else ():
            text += c.get("text") or ""
            reason = c.get("finish_reason") or reason
    return text, reason


@register(
    "drawn:stop",
    tags=TAGS,
    tokens=_drawn_tokens,
    shares="drawn",
    effects=("stop",),
    catches=("wrong:long prompts unbounded", "wrong:long stops dropped"),
)
def stop(ctx: Context) -> None:
    """Each probe sent again with a stop string of its answer (2 to 16 characters, early in it):
    the answer is the text before the stop string's first place, finish_reason "stop"; half of
    them streamed. Each is sent with max_tokens MARGIN past the stop string's last token, so a
    server that ignores it writes the stop string. A probe whose answer went another way before
    the stop string (a near tie, or a seed not kept: other checks' findings) proves nothing here
    and is counted, as is one whose stop string ends past STOP_TOKENS."""
    off, other_ways, tried = [], 0, 0
    for i, probe in enumerate(ctx.draws.probes):
        _, source = answered(ctx, i)
        text = str(source.get("text") or "")
        piece = stop_string(text, probe)
        if piece is None:
            continue
        before = text[: text.find(piece)]
        reach = stop_tokens(source, len(before) + len(piece), ctx.is_special)
        most = min(probe.max_tokens, STOP_TOKENS)
        if reach is None or reach > most:
            continue
        body = {**probe_body(ctx, probe), "stop": [piece], "max_tokens": min(reach + MARGIN, most)}
        del body["logprobs"]
        tried += 1
        if probe.stream_stop:
            reply: Reply = open_stream(ctx, body)
        else:
            reply = ctx.client.post(ctx.api.completions_path, body)
            ctx.expect_status(reply, 200, fatal=True)
            _one_choice(ctx, reply)
        got, reason = _text(reply)
        if piece in got:
            off.append((probe, piece, f"the stop string is in its text {got[:200]!r}", reply))
        elif got == before and reason != "stop":
            off.append((probe, piece, f"finish_reason {reason!r}, not 'stop'", reply))
        elif got != before:
            if before.startswith(got) or got.startswith(before):
                off.append(
                    (probe, piece, f"the text {got!r}, where {before!r} was before it", reply)
                )
            else:
                other_ways += 1
    if off:
        probe, piece, why, reply = off[0]
        way = "streamed" if probe.stream_stop else "without stream"
        ctx.fail(
            f"{len(off)} of {tried} drawn stop strings did not stop their answer; the first, "
            f"{piece!r} ({_said(probe)}, {way}): {why}",
            reply=reply,
        )
    if not tried:
        ctx.unproven(
            f"no probe's answer held a stop string within {STOP_TOKENS} tokens whose rows join "
            "to its text"
        )
    if other_ways == tried:
        ctx.unproven(
            f"each of {tried} answers went another way than its probe's before the stop string "
            "(determinism:seed and effects:temperature.greedy hold a request to its answer)"
        )
    left = len(ctx.draws.probes) - tried
    if other_ways or left:
        ctx.note(
            f"{other_ways} of {tried} stopped answers went another way before the stop string; "
            f"{left} probes sent no stop (their stop string ends past {STOP_TOKENS} tokens)"
        )


HELD = 48  # tokens at least of the stream held open: it outlives the two shortest probes


# -- temperature and top_p, read from the seeded probes' rows (no request of their own) ------

CHANCE = 1e-4  # a finding of drawn:temperature by chance: once in 10,000 runs, each side


def _rows_of(ctx: Context, choice: dict[str, Any], k: int) -> list[tuple[list[float], float]]:
    """Each step's K likeliest logprobs (descending) and the sampled token's, where its row shows
    K distinct tokens (two tokens of one text share a key, and the row says less)."""
    lp = choice.get("logprobs")
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    found = lp.get("top_logprobs") if isinstance(lp, dict) else None
    if not (isinstance(values, list) and isinstance(found, list)):
        return []
    out = []
    for value, row in zip(values, found, strict=False):
        if not (isinstance(value, (int, float)) and isinstance(row, dict) and len(row) >= k):
            continue
        numbers = [v for v in row.values() if isinstance(v, (int, float))]
        if len(numbers) == len(row):
            out.append((sorted(numbers, reverse=True)[:k], float(value)))
    return out


def _seeded(ctx: Context) -> list[tuple[Probe, list[tuple[list[float], float]]]]:
    return [
        (probe, _rows_of(ctx, answered(ctx, i)[1], rows(ctx)))
        for i, probe in enumerate(ctx.draws.probes)
    ]


@register(
    "drawn:temperature",
    tags=TAGS,
    tokens=_drawn_tokens,
    shares="drawn",
    effects=("temperature",),
    catches=(
        "wrong:temperature clamped to 1",
        "wrong:temperature 1 without top_k",
        "ignored:temperature",
    ),
)
def temperature(ctx: Context) -> None:
    """The probes (temperatures of 0.25 to 2; a top_k from 1.125 to 1.5625, where the rows show
    all it samples from) sample the likeliest token as often as their temperatures allow, as the
    rows bound it (helpers/tempered.py: each row's K likeliest
    say how much mass the rest holds): below 1 another token at most so often (a top_p only
    makes it rarer), above 1 the likeliest at most so often. Held by a test martingale against sampling at 1
    (helpers/tempered.py, `evidence_against`): each probe's own, and all steps together, the
    mean past 10,000 by chance once in 10,000 runs at most. A server that samples at 1 whatever
    is asked where the gate sets no top_k fails, and one that does so for a quarter of the
    temperatures. Skipped where the rows are too even for a temperature of 1 to fail it."""
    nats = float(ctx.api.batch_effects["logprob_nats"])
    probes: list[tuple[Probe, list[Counted]]] = []
    for probe, rows_seen in _seeded(ctx):
        if probe.temperature == 1:
            continue
        steps = []
        for top, value in rows_seen:
            if top[1] >= top[0] - 2 * nats:
                continue  # a near tie: which is the likeliest cannot show
            if probe.top_k is not None:  # the rows show all it samples from: the share exactly
                least, most = cut_share(top[: probe.top_k], probe.temperature, nats)
            else:
                least, most = likeliest_share(top, probe.temperature, nats)
            hit = value >= top[0] - nats
            # what is counted: below 1, another token than the likeliest (a top_p only makes it
            # rarer: the bound holds); above 1 (no top_p), the likeliest
            if probe.temperature < 1:
                steps.append(Counted(not hit, 1 - least, 1 - likeliest_at_one(top, probe.top_p)))
            else:
                steps.append(Counted(hit, most, likeliest_at_one(top, None, probe.top_k)))
        probes.append((probe, steps))
    if not probes:
        ctx.skip("no probe at a temperature other than 1")
    # each probe, each quarter of the temperatures drawn (a server wrong on one of them), all
    groups = [steps for _, steps in probes]
    low, high = TEMPERATURES_DRAWN
    for q in range(4):
        a, b = low + q * (high - low) / 4, low + (q + 1) * (high - low) / 4
        groups.append([s for p, steps in probes if a <= p.temperature < b for s in steps])
    groups.append([s for _, steps in probes for s in steps])
    found = [evidence_against(steps) for steps in groups]
    shown = any(e.shown(len(groups) / CHANCE) for e in found)
    best = max(range(len(found)), key=lambda i: found[i].log_value)
    mean = sum(math.exp(min(e.log_value, 700)) for e in found) / len(found)
    what = _said(probes[best][0]) if best < len(probes) else "a quarter of them or all"
    steps = groups[best]
    ctx.expect(
        mean < 1 / CHANCE,
        f"the probes sampled the likeliest token more or less often than their temperatures "
        f"allow (as at temperature 1, or another): the evidence against them is {mean:.3g} (a "
        f"mean of {len(found)} test martingales; past {1 / CHANCE:.0f} by chance once in "
        f"{1 / CHANCE:.0f} runs at most), "
        f"most in {what}: {sum(s.counted for s in steps)} of {len(steps)} steps counted where "
        f"the temperature allows {sum(s.bound for s in steps):.0f} at most on average and "
        f"temperature 1 gives {sum(s.at_one for s in steps):.0f}",
        expected=f"evidence under {1 / CHANCE:.0f}",
        received=f"{mean:.3g}",
    )
    if not shown:
        ctx.skip(
            "the probes' rows are too even for a temperature of 1 to show beside the "
            "temperatures asked"
        )


@register(
    "drawn:top_p",
    tags=TAGS,
    tokens=_drawn_tokens,
    shares="drawn",
    effects=("top_p",),
    catches=("wrong:top_p dropped in [0.01, 1)", "ignored:top_p"),
)
def top_p(ctx: Context) -> None:
    """Each token of a probe with a top_p (0.3 to 0.95, at a temperature up to 1) is
    within the nucleus: the tokens likelier than it hold less than top_p of the mass at that
    temperature, as its row bounds it from below (helpers/tempered.py). Every token, no
    statistics: a server that drops top_p samples past it. Skipped where no row could show a
    token past it."""
    nats = float(ctx.api.batch_effects["logprob_nats"])
    past, seen, could = [], 0, False
    for probe, steps in _seeded(ctx):
        if probe.top_p is None:
            continue
        for j, (top, value) in enumerate(steps):
            seen += 1
            could |= mass_before(top, -math.inf, probe.temperature, nats) >= probe.top_p
            before = mass_before(top, value, probe.temperature, nats)
            if before >= probe.top_p:
                past.append((probe, j, before))
    if past:
        probe, j, before = past[0]
        ctx.fail(
            f"{len(past)} of {seen} tokens sampled with a top_p are past it; the first, token {j} "
            f"({_said(probe)}): the tokens likelier than it hold {before:.3f} of the mass at "
            f"that temperature at least, so top_p {probe.top_p} cuts it",
            expected=f"top_p {probe.top_p}",
        )
    if not could:
        ctx.skip("no seeded probe's row could show a token past its top_p: the rows are too even")


def _beside(config: RunConfig) -> tuple[int, int, int]:
    """(the held probe: the shortest of HELD tokens or more; the two probes sent beside it: the
    shortest others)."""
    probes = probes_of(config)
    held = min(
        range(len(probes)),
        key=lambda i: (probes[i].max_tokens < HELD, probes[i].max_tokens),
    )
    first, second = sorted(
        (i for i in range(len(probes)) if i != held), key=lambda i: probes[i].max_tokens
    )[:2]
    return held, first, second


def _beside_tokens(config: RunConfig) -> int:
    probes = probes_of(config)
    return sum(probes[i].max_tokens for i in _beside(config))


@register(
    "drawn:beside_stream",
    tags=("drawn", "isolation"),
    tokens=_drawn_tokens,
    shares="drawn",
    effects=("seed", "max_tokens"),
    catches=("wrong:logprobs capped at 5",),
)
def beside_stream(ctx: Context) -> None:
    """A probe held open as a stream while the two shortest others are sent beside it, together
    as its first event comes: each is its answer alone (the same tokens, or a near tie a batch
    may turn: agree.py). Where the stream's last event came before the last of them was sent,
    nothing may have been in flight beside them: not proven, never a pass."""
    held, *others = _beside(ctx.config)
    alone = {i: answered(ctx, i) for i in others}
    first, last = threading.Event(), [0.0]

    def on_event(k: int) -> None:
        last[0] = time.monotonic()
        first.set()

    body = {**probe_body(ctx, ctx.draws.probes[held]), "stream": True}
    sent: list[float] = []

    def post(i: int) -> Reply:
        sent.append(time.monotonic())
        return ctx.client.post(ctx.api.completions_path, probe_body(ctx, ctx.draws.probes[i]))

    with ThreadPoolExecutor(1 + len(others)) as pool:
        streaming = pool.submit(
            ctx.client.stream, ctx.api.completions_path, body, on_event=on_event
        )
        while not first.wait(0.05) and not streaming.done():
            pass
        # all at once, as the stream's first event comes: each is sent while it is in flight
        replies = [(i, pool.submit(post, i)) for i in others]
        beside = []
        for i, future in replies:
            reply = future.result()
            ctx.expect_status(reply, 200, fatal=True)
            beside.append((i, reply, _one_choice(ctx, reply)))
        stream_reply = streaming.result()
    ctx.expect_status(stream_reply, 200, fatal=True)
    # the stream itself is held to its answer alone by stream:text_equals_non_stream and
    # logprobs:stream: here it is what is in flight
    wrong = 0
    for i, reply, choice in beside:
        probe = ctx.draws.probes[i]
        why = _length_finding(probe, reply, choice) or difference(ctx.api, alone[i][1], choice)
        wrong += why is not None
        ctx.expect(
            why is None,
            f"a drawn probe ({_said(probe)}) sent while a stream was open is not its answer "
            f"alone: {why}",
            reply=reply,
        )
    if not wrong and last[0] <= max(sent):
        ctx.unproven(
            f"the stream of {ctx.draws.probes[held].max_tokens} tokens ended "
            f"{(max(sent) - last[0]) * 1000:.0f} ms before the last request beside it was sent: "
            "they may have run alone"
        )
