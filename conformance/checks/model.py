"""model:* — one model behind every number: what loglikelihood and activation clients read.

An evaluation harness (lm-eval, lighteval) scores a continuation from an echoed prompt's log
probabilities, and an interpretability client reads captures position by position. Both rest on
the numbers being one causal model's: the next token's distribution after a context is the same
asked any way (an echoed prompt, prompt_logprobs, a generation from the context alone), a
prompt's values and captures do not change with what follows it, distinct tokens never hold more
than all the probability, a capture's layers are each what they are asked alone, and `n`
choices are independent samples (with a seed, the children as vLLM seeds them: seed + index).
Two answers are held to each other only as the batch rule allows (helpers/agree.py): each log
probability within x-batch-effects.logprob_nats, a greedy token another only in a near tie.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from conformance.checks.helpers.agree import LOGPROBS, difference
from conformance.checks.helpers.capture import SLACK, decode_capture
from conformance.checks.helpers.common import end_layers
from conformance.engine.config import RunConfig
from conformance.engine.context import Context
from conformance.engine.draws import Draws
from conformance.engine.registry import register
from conformance.wire.client import Reply

TAGS = ("logprobs", "model")
# Contexts as token ids below 1,000 (a token of every vocabulary a served model has), so that no
# request is spent learning them; each check's `tokens` is its worst case, within the full
# profile's ceiling.
CONTEXTS = ([40, 1097, 264, 892, 11, 1070], [791, 13180, 374], [17, 489, 220, 17, 284])
CONTINUATIONS = 3  # distinct one-token continuations whose probabilities may not pass one


def lm_eval_score(logprobs: dict[str, Any], start: int, end: int) -> tuple[float, bool]:
    """lm-eval's loglikelihood of an echoed answer, by the gate's own arithmetic: the sum of
    `token_logprobs[start:end]` (the continuation's) and is_greedy, each of those the largest
    value of its `top_logprobs` row. tests/support/lm_eval.py holds lm-eval's own scores to it."""
    values = logprobs["token_logprobs"][start:end]
    rows = logprobs["top_logprobs"][start:end]
    return sum(values), all(v >= max(row.values()) for v, row in zip(values, rows, strict=True))


def _post(ctx: Context, body: dict[str, Any]) -> Reply:
    reply = ctx.client.post(ctx.api.completions_path, {"model": ctx.config.model, **body})
    ctx.expect_status(reply, 200, fatal=True)
    return reply


def _choice(ctx: Context, reply: Reply, index: int = 0) -> dict[str, Any]:
    choices = reply.data.get("choices") if isinstance(reply.data, dict) else None
    if not isinstance(choices, list) or len(choices) <= index:
        ctx.stop(f"no choice {index} in the answer", reply=reply)
    choice: dict[str, Any] = choices[index]
    return choice


def _ids(ctx: Context, which: int) -> list[int]:
    return list(CONTEXTS[which])


def _slack(ctx: Context) -> tuple[float, float]:
    b = ctx.api.batch_effects
    return float(b["logprob_nats"]), float(b["near_tie_nats"])


def _near(ctx: Context, a: Any, b: Any, nats: float | None = None) -> bool:
    slack = _slack(ctx)[0] if nats is None else nats
    return isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) <= slack


def _first_apart(
    ctx: Context,
    pairs: Iterable[tuple[Any, Any, Any]],
    say: Callable[[Any, Any, Any], str],
    reply: Reply,
) -> None:
    """A finding at the first (where, one value, the other) whose values a batch could not
    leave so far apart, worded by `say`; the rest unread."""
    for where, v, w in pairs:
        if not _near(ctx, v, w):
            ctx.fail(say(where, v, w), reply=reply)
            return


def _greedy_step(ctx: Context, ids: list[int]) -> tuple[int, str, float, dict[str, float], Reply]:
    """The greedy next token after `ids`: its id, text, log probability and row."""
    reply = _post(
        ctx,
        {
            "prompt": ids,
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": LOGPROBS,
            "return_token_ids": True,
        },
    )
    choice = _choice(ctx, reply)
    lp = choice.get("logprobs") or {}
    token_ids = choice.get("token_ids")
    try:
        return (
            int(token_ids[0]),  # type: ignore[index]
            str(lp["tokens"][0]),
            float(lp["token_logprobs"][0]),
            dict(lp["top_logprobs"][0]),
            reply,
        )
    except (TypeError, KeyError, IndexError, ValueError):  # return_token_ids' own premise
        ctx.unproven("the generated token came without its id (return_token_ids) or logprobs")


@register(
    "model:next_token.three_ways",
    tags=TAGS,
    tokens=3,
    effects=("echo", "prompt_logprobs"),
    catches=("wrong:prompt_logprobs one early", "wrong:echo one late"),
)
def three_ways(ctx: Context) -> None:
    """The next token's distribution after a context asked three ways agrees: the token generated
    from the context alone (its row), the echoed prompt of the context and that token (its last
    row, and every earlier one), and the same prompt's prompt_logprobs: the same log
    probability for the same token at the same position. (That the generated token is the
    likeliest at temperature 0 is effects:temperature.greedy's to say.)"""
    slack = _slack(ctx)[0]
    text = f"after {list(CONTEXTS[0])}"
    ids = _ids(ctx, 0)
    token, shown, value, row, generated = _greedy_step(ctx, ids)
    prompt = [*ids, token]
    echo = _post(
        ctx,
        {
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": LOGPROBS,
        },
    )
    lp = _choice(ctx, echo).get("logprobs") or {}
    at = len(ids)
    try:
        echoed = (lp["tokens"][at], lp["token_logprobs"][at], dict(lp["top_logprobs"][at]))
    except (TypeError, KeyError, IndexError, ValueError):
        ctx.fail(f"{text}: the echoed prompt has no row at position {at}", reply=echo)
        return
    ctx.expect(
        echoed[0] == shown and _near(ctx, echoed[1], value),
        f"{text}: the echoed row of the generated token {shown!r} says {echoed[0]!r} at "
        f"{echoed[1]}, the generation {value} (within {slack})",
        expected=[shown, value],
        received=list(echoed[:2]),
        reply=echo,
    )
    plp = _post(
        ctx,
        {"prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": LOGPROBS},
    )
    entries = _choice(ctx, plp).get("prompt_logprobs")
    entry = entries[at] if isinstance(entries, list) and len(entries) > at else None
    mine = entry.get(str(token)) if isinstance(entry, dict) else None
    ctx.expect(
        isinstance(mine, dict) and _near(ctx, mine.get("logprob"), value),
        f"{text}: prompt_logprobs' entry {at} gives the generated token {shown!r} "
        f"{mine.get('logprob') if isinstance(mine, dict) else None}, the generation {value}",
        received=entry,
        reply=plp,
    )
    echoed_values = lp.get("token_logprobs") or []

    def entry_value(i: int) -> Any:
        entry_i = entries[i] if isinstance(entries, list) and len(entries) > i else None
        asked = entry_i.get(str(prompt[i])) if isinstance(entry_i, dict) else None
        return asked.get("logprob") if isinstance(asked, dict) else None

    _first_apart(
        ctx,
        (
            (i, entry_value(i), echoed_values[i] if len(echoed_values) > i else None)
            for i in range(1, at + 1)
        ),
        lambda i, v, w: (
            f"{text}: prompt token {i} (id {prompt[i]}) has log probability "
            f"{v} in prompt_logprobs and {w} echoed"
        ),
        plp,
    )
    for name, values in (("generation", row), ("echo", echoed[2])):
        for t, v in values.items():
            if t in echoed[2] and not _near(ctx, echoed[2][t], v):
                ctx.fail(
                    f"{text}: the {name} row and the echoed row give {t!r} {v} and {echoed[2][t]}",
                    reply=generated,
                )


def _rows(entries: Any) -> list[dict[str, Any]] | None:
    """prompt_logprobs' entries as token id -> log probability (None first)."""
    if not isinstance(entries, list) or not entries or entries[0] is not None:
        return None
    rows = []
    for entry in entries[1:]:
        if not isinstance(entry, dict):
            return None
        rows.append({k: v.get("logprob") for k, v in entry.items() if isinstance(v, dict)})
    return rows


@register(
    "model:causal.prompt",
    tags=TAGS,
    tokens=2,
    effects=("prompt_logprobs", "echo", "output_residual_stream"),
    catches=("wrong:capture sees later tokens",),
)
def causal_prompt(ctx: Context) -> None:
    """A prompt's values do not change with what follows it (a causal model reads each position
    from its prefix alone): prompt_logprobs, the echoed logprobs and the residual stream of its
    positions are the same as a prefix and with more tokens after it."""
    ids = _ids(ctx, 0)
    longer = [*ids, *_ids(ctx, 1)]
    answers = []
    for prompt in (ids, longer):
        body = {
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": LOGPROBS,
            "prompt_logprobs": LOGPROBS,
            "output_residual_stream": end_layers(ctx),
        }
        reply = _post(ctx, body)
        answers.append(
            (reply, _choice(ctx, reply), decode_capture(ctx, reply, len(end_layers(ctx))))
        )
    (short_reply, short, short_stream), (long_reply, long, long_stream) = answers
    n = len(ids)
    a, b = _rows(short.get("prompt_logprobs")), _rows(long.get("prompt_logprobs"))
    # The logprobs of positions 1 .. n - 2: the last prompt position's row is where an
    # off-by-one shows (three_ways' to find); the captures are compared at every position.
    if ctx.expect(a is not None and b is not None, "no prompt_logprobs", reply=long_reply):
        _first_apart(
            ctx,
            (((i, t), v, b[i].get(t)) for i in range(n - 2) for t, v in a[i].items()),  # type: ignore[index]
            lambda at, v, w: (
                f"prompt_logprobs' entry {at[0] + 1} (token id {at[1]}) is {v} as a "
                f"prompt of {n} tokens and {w} with {len(longer) - n} more after it"
            ),
            long_reply,
        )
    la, lb = short.get("logprobs") or {}, long.get("logprobs") or {}
    short_values, long_values = la.get("token_logprobs") or [], lb.get("token_logprobs") or []
    _first_apart(
        ctx,
        (
            (i, short_values[i] if i < len(short_values) else None, long_values[i])
            if i < len(long_values)
            else (i, None, None)
            for i in range(1, n - 1)
        ),
        lambda i, v, w: (
            f"the echoed log probability of position {i} is {v} as a prompt of {n} "
            f"tokens and {w} with more after it"
        ),
        long_reply,
    )
    for k, layer in enumerate(end_layers(ctx)):
        for p in range(n):
            x, y = short_stream[k][p], long_stream[k][p]
            error = math.dist(x, y)
            if error > SLACK * math.hypot(*x):
                ctx.fail(
                    f"the residual stream of layer {layer} at position {p} differs with more "
                    f"tokens after the prompt (by {error:.4g}, norm {math.hypot(*x):.4g})",
                    reply=long_reply,
                )
                break


@register(
    "model:probability.total",
    tags=TAGS,
    tokens=CONTINUATIONS,
    effects=("echo", "logprobs"),
    catches=("wrong:continuations the likeliest",),
)
def probability_total(ctx: Context) -> None:
    """The likeliest one-token continuations of a context (its prompt_logprobs' last entry), each
    scored as lm-eval scores one (its own request's echoed log probability), never hold more than
    all the probability; nor does any row's top_logprobs."""
    prompt = _ids(ctx, 0)
    ids = prompt[:-1]  # the context; its likeliest continuations are its last entry's tokens
    plp = _post(
        ctx,
        {"prompt": prompt, "max_tokens": 1, "temperature": 0, "prompt_logprobs": CONTINUATIONS},
    )
    seen = _choice(ctx, plp).get("prompt_logprobs") or []
    last = seen[-1] if seen and isinstance(seen[-1], dict) else {}
    ranked = sorted(
        (v.get("rank", 0), int(t))
        for t, v in last.items()
        if t.isdigit() and isinstance(v, dict) and isinstance(v.get("rank"), int)
    )
    candidates = [t for _, t in ranked][:CONTINUATIONS]
    if len(candidates) < 2:
        ctx.unproven("too few token ids in prompt_logprobs' last entry to score as continuations")
    reply = _post(
        ctx,
        {
            "prompt": [[*ids, t] for t in candidates],
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": 1,  # lm-eval's request
        },
    )
    choices = reply.data.get("choices") if isinstance(reply.data, dict) else None
    total = 0.0
    for i, choice in enumerate(choices or []):
        values = (choice.get("logprobs") or {}).get("token_logprobs") or []
        v = values[len(ids)] if len(values) > len(ids) else None
        if not isinstance(v, (int, float)):
            ctx.fail(f"continuation {i}: no echoed log probability at {len(ids)}", reply=reply)
            return
        total += math.exp(v)
    bound = math.exp(_slack(ctx)[0])
    ctx.expect(
        total <= bound,
        f"{len(candidates)} distinct continuations of one context hold {total:.4f} of the "
        f"probability (at most 1, {bound:.4f} with the batch's slack)",
        received=total,
        reply=reply,
    )
    for i, choice in enumerate(choices or []):
        rows = (choice.get("logprobs") or {}).get("top_logprobs") or []
        for row in rows:
            if isinstance(row, dict) and sum(math.exp(v) for v in row.values()) > bound:
                ctx.fail(
                    f"continuation {i}: a row's top_logprobs hold more than all the probability",
                    received=row,
                    reply=reply,
                )
                return


@register(
    "model:capture.layers",
    tags=("activations", "model"),
    tokens=2,
    catches=("wrong:layers reversed",),
)
def capture_layers(ctx: Context) -> None:
    """A capture of two layers holds them ascending, each the same as asked alone (a layer's
    rows are its own: neither reversed nor another layer's)."""
    ids = _ids(ctx, 0)
    low, high = 0, ctx.model.num_layers - 1
    if low == high:  # a claim that takes the check's subject away: not proven, never a pass
        ctx.unproven("GET /v1/models says the model has 1 layer: no two layers to capture together")

    def stream(layers: list[int]) -> tuple[Reply, list[list[list[float]]]]:
        reply = _post(
            ctx,
            {"prompt": ids, "max_tokens": 1, "temperature": 0, "output_residual_stream": layers},
        )
        return reply, decode_capture(ctx, reply, len(layers))

    both_reply, both = stream([high, low])
    ctx.equal(
        "activations.layers", [low, high], (both_reply.data.get("activations") or {}).get("layers")
    )
    for k, layer in ((1, high),):  # (a layer alone: the other's rows are then the rest)
        reply, alone = stream([layer])
        for p, (x, y) in enumerate(zip(alone[0], both[k], strict=False)):
            if math.dist(x, y) > SLACK * math.hypot(*x):
                ctx.fail(
                    f"layer {layer}'s rows asked with another layer differ from it asked alone "
                    f"(position {p})",
                    reply=both_reply,
                )
                break


# Two samples of a few tokens from neighbouring seeds can be the same text (the mock's likeliest
# token has half the mass: 2 children of 2 tokens let a server that copies one sample pass 14 of
# 120 drawn seeds); each child of 4 tokens, both of them, must coincide for a copy to pass.
STEPS = 2  # each child's tokens, held to the sample of its own seed


def _children_tokens(config: RunConfig) -> int:
    """Each drawn n's children, and each child but the first alone (engine/draws.py: one n of
    2-3, one of 4-8, one of 9-16)."""
    assert config.seed is not None  # RunConfig draws one
    return sum((2 * n - 1) * STEPS for n in Draws.of(config.seed).n)


@register(
    "model:n.children",
    tags=TAGS,
    tokens=_children_tokens,
    effects=("n", "seed"),
    catches=("wrong:constant seed", "wrong:choices copied", "wrong:n of 4 or more copied"),
)
def n_children(ctx: Context) -> None:
    """With a seed, choice j of `n` is the sample of seed + j (vLLM's parallel sampling seeds its
    children so): independent samples, not one copied; held to each other by the batch rule. At
    each of the run's drawn n (one of 2-3, one of 4-8, one of 9-16), every child."""
    body = {
        "prompt": _ids(ctx, 1),
        "max_tokens": STEPS,
        "temperature": 1.0,
        "logprobs": LOGPROBS,
        "ignore_eos": True,
    }
    seed = ctx.draws.seed
    for n in ctx.draws.n:
        together = _post(ctx, {**body, "n": n, "seed": seed})
        for j in range(1, n):  # (choice 0 is seed's own: a copy of it shows in the others)
            alone = _post(ctx, {**body, "n": 1, "seed": seed + j})
            why = difference(ctx.api, _choice(ctx, alone), _choice(ctx, together, j))
            ctx.expect(
                why is None,
                f"choice {j} of n={n} with seed {seed} is not the sample of seed {seed + j}: {why}",
                reply=together,
            )


STEPS_SCORED = 2


def _likeliest(row: Any, tie: float) -> str | None:
    """A top_logprobs row's likeliest token, where every other is more than `tie` below it."""
    if not isinstance(row, dict) or not row:
        return None
    values = [v for v in row.values() if isinstance(v, (int, float))]
    if len(values) != len(row):
        return None
    best = max(values)
    keys = [k for k, v in row.items() if v >= best - tie]
    return keys[0] if len(keys) == 1 else None


@register(
    "model:lm_eval.loglikelihood",
    tags=TAGS,
    tokens=STEPS_SCORED + 1,
    effects=("echo", "logprobs"),
    catches=("wrong:echo one late", "wrong:generated rows shifted"),
)
def lm_eval_loglikelihood(ctx: Context) -> None:
    """lm-eval's loglikelihood request (echo, max_tokens 1, logprobs 1, temperature 0) over a
    context and a sampled continuation of it: each continuation token's echoed log probability is
    the one its generation gave (so their sum, lm-eval's score, is too), and lm-eval's is_greedy
    (each token the likeliest of its echoed row) is what the generation's rows say."""
    ids = _ids(ctx, 2)
    gen = _post(
        ctx,
        {
            "prompt": ids,
            "max_tokens": STEPS_SCORED,
            "temperature": 1.0,
            "seed": ctx.draws.seed,
            "logprobs": 1,
            "ignore_eos": True,
            "return_token_ids": True,
        },
    )
    choice = _choice(ctx, gen)
    lp_gen = choice.get("logprobs") or {}
    tokens, values = choice.get("token_ids"), lp_gen.get("token_logprobs")
    generated_rows = lp_gen.get("top_logprobs")
    if not (
        isinstance(tokens, list)
        and isinstance(values, list)
        and isinstance(generated_rows, list)
        and len(tokens) == len(values) == len(generated_rows)
    ):  # shape:token_ids and the logprobs checks say what is wrong with them
        ctx.unproven("a generation whose token_ids and logprobs do not match one to one")
    scored = _post(
        ctx,
        {
            "prompt": [*ids, *tokens],
            "max_tokens": 1,
            "temperature": 0,
            "echo": True,
            "logprobs": 1,
        },
    )
    lp = _choice(ctx, scored).get("logprobs") or {}
    n = len(ids)
    got = (lp.get("token_logprobs") or [])[n : n + len(tokens)]
    rows = (lp.get("top_logprobs") or [])[n : n + len(tokens)]
    names = (lp.get("tokens") or [])[n : n + len(tokens)]
    if len(got) != len(tokens) or not all(isinstance(v, (int, float)) for v in got):
        ctx.fail("the echoed continuation has no log probabilities", reply=scored)
        return
    slack, tie = _slack(ctx)
    _first_apart(
        ctx,
        zip(range(len(got)), got, values, strict=False),
        lambda i, v, w: (
            f"lm-eval's echoed log probability of continuation token {i} "
            f"({names[i]!r}) is {v}, its generation's {w}: their sums, lm-eval's score, are "
            f"{sum(got):.4f} and {sum(values):.4f}"
        ),
        scored,
    )
    for i, (name, row, generated_row, v) in enumerate(
        zip(names, rows, generated_rows, got, strict=False)
    ):
        echoed_best = max(row.values(), default=None) if isinstance(row, dict) else None
        generated_best = (
            max(generated_row.values(), default=None) if isinstance(generated_row, dict) else None
        )
        if echoed_best is None or generated_best is None:
            ctx.fail(f"continuation token {i} has no row to take is_greedy from", reply=scored)
            return
        greedy_echoed = v >= echoed_best - tie
        greedy_generated = values[i] >= generated_best - tie
        # the likeliest token of each row, where no other is within a tie of it: rows of another
        # position (shifted) name another token, though their values may agree
        tops = (_likeliest(row, tie), _likeliest(generated_row, tie))
        ctx.expect(
            None in tops or tops[0] == tops[1],
            f"continuation token {i}'s likeliest token is {tops[0]!r} echoed and {tops[1]!r} in "
            "its generation's row: the rows are not of one position",
            received={"echoed": row, "generated": generated_row},
            reply=scored,
        )
        ctx.expect(
            greedy_echoed == greedy_generated,
            f"lm-eval's is_greedy at continuation token {i} ({name!r}) is {greedy_echoed}, "
            f"the generation's row says {greedy_generated}",
            received={"echoed": row, "generated": generated_row},
            reply=scored,
        )
