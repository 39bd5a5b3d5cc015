"""effects:* — each request field does what the documentation says, seen on a small request.

A deployment can validate a field exactly as openapi.yaml says and then not pass
it on to Inference; every schema still holds. These checks observe each
field's effect (openapi.yaml `x-effect` says what, field by field), so that a
deployment that ignores the field fails its check and no other:

- sampling: at temperature 0, top_k 1, min_p 1 or a top_p the likeliest token
  fills, every sampled token is the likeliest of its `top_logprobs` row (vLLM
  computes both from the same logits) and the text does not depend on `seed`;
  with top_k 2 every token is among its row's two likeliest, and some are not the
  likeliest; at temperature 1 some token is not the likeliest;
- special tokens: with the model's end tokens as the only `allowed_token_ids`,
  `ignore_eos` runs to max_tokens; with its BOS alone, `skip_special_tokens`
  false writes it;
- `bad_words`, `truncate_prompt_tokens`, `add_special_tokens`.

The documentation allows a batch to change a log probability by a little and,
now and then, a token where two are almost equally likely: values are compared
within LOGPROB_SLACK, and two answers that must agree are held to agree.py's
rule (x-batch-effects), each of REPEATS answers, never any one of several tries.
Steering is in steering.py.
"""

from __future__ import annotations

from typing import Any

from conformance.checks.helpers.agree import LOGPROBS, difference
from conformance.checks.helpers.common import memo_post, post, prompt_ids_returned, usage_of
from conformance.checks.helpers.tempered import (
    CRITICAL,
    Step,
    low_statistic,
    row_evidence,
    statistic,
)
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.wire.client import Reply

PROMPT = "The sky is"
GREEDY_TOKENS, SAMPLED_TOKENS, END_TOKENS = 2, 6, 3
SEEDS = (11, 12, 13)
REPEATS = 8  # answers a check of one field compares: a server that drops the field
# on half its requests passes one such check in 2^8
TOP_K = 2  # effects:top_k.sampled's top_k
PREMISE = 2  # its answers without top_k, which must show sampling
LOGPROB_SLACK = 1e-3  # nats: a log probability a batch may move
TOP_P_ONE = 1e-6  # a top_p that the likeliest token always fills
PROBES = ("a", "b")  # strings of one token whose text is itself (any byte-level BPE)
TRUNCATED = [0, 1, 2, 3, 4]
KEEP = 2


def below_likeliest(
    ctx: Context, reply: Reply, choice: dict[str, Any], within: int = 1
) -> list[int]:
    """The positions whose sampled token is not among the `within` likeliest of its row. Each
    row must show at least LOGPROBS tokens: in a row of the sampled token alone, it would
    always be the likeliest, whatever the server sampled."""
    lp = choice.get("logprobs")
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    values = lp.get("token_logprobs") if isinstance(lp, dict) else None
    rows = lp.get("top_logprobs") if isinstance(lp, dict) else None
    if not (
        isinstance(values, list)
        and isinstance(rows, list)
        and isinstance(tokens, list)
        and len(values) == len(rows) == len(tokens)
        and values
    ):
        ctx.stop(
            "no tokens, token_logprobs and top_logprobs of one length", received=lp, reply=reply
        )
    out = []
    for i, (value, row) in enumerate(zip(values, rows, strict=True)):
        if not (
            isinstance(value, (int, float))
            and isinstance(row, dict)
            and all(isinstance(v, (int, float)) for v in row.values())
        ):
            ctx.stop(
                f"token {i}: no log probability or no top_logprobs row",
                received=[value, row],
                reply=reply,
            )
        shown = max(LOGPROBS, within)
        if len(row) < shown:
            ctx.stop(
                f"token {i}'s top_logprobs row shows {len(row)} tokens, fewer than logprobs = {shown} asked: "
                "which tokens are likelier than the sampled one cannot be seen (logprobs:consistent)",
                expected=shown,
                received=row,
                reply=reply,
            )
        kept = sorted(row.values(), reverse=True)[within - 1]
        if value < kept - LOGPROB_SLACK:
            out.append(i)
    return out


def agree_all(ctx: Context, what: str, first: dict[str, Any], bodies: list[dict[str, Any]]) -> None:
    """Every body's answer agrees with `first` (a choice) as two answers of one request may
    (agree.py): all of them, so that a server wrong on some of its requests shows."""
    off = []
    for body in bodies:
        reply, choice = post(ctx, body)
        found = difference(ctx.api, first, choice)
        if found is not None:
            off.append((found, reply, choice))
    if off:
        found, reply, choice = off[0]
        ctx.fail(
            f"{what}: {len(off)} of {len(bodies)} answers differ beyond what a batch may change; the first: "
            f"{found}",
            expected=first.get("text"),
            received=choice.get("text"),
            reply=reply,
        )


# -- sampling ----------------------------------------------------------------------------


def _sampled(
    ctx: Context, fields: dict[str, Any], tokens: int = GREEDY_TOKENS, count: int = REPEATS
) -> list[tuple[Reply, dict[str, Any]]]:
    """`count` answers of `fields`, each at a seed of its own."""
    return [
        post(
            ctx,
            {
                "prompt": PROMPT,
                "max_tokens": tokens,
                "logprobs": LOGPROBS,
                "seed": SEEDS[0] + i,
                **fields,
            },
        )
        for i in range(count)
    ]


def _greedy(ctx: Context, fields: dict[str, Any], *, seeded: bool = True) -> None:
    """Every token the likeliest of its row, in each of REPEATS answers at seeds of their own;
    `seeded`: every answer the first's (the seed makes no difference)."""
    answers = _sampled(ctx, fields)
    for reply, choice in answers:
        below = below_likeliest(ctx, reply, choice)
        if not ctx.expect(
            not below,
            f"with {fields} a sampled token is not the likeliest of its top_logprobs row",
            expected="every token the likeliest",
            received={"positions": below, "logprobs": choice.get("logprobs")},
            reply=reply,
        ):
            return
    if seeded:
        first = answers[0][1]
        off = [(difference(ctx.api, first, c), r) for r, c in answers[1:]]
        off = [(found, r) for found, r in off if found is not None]
        if off:
            ctx.fail(
                f"with {fields}, seeds {SEEDS[0]} to {SEEDS[0] + REPEATS - 1}: {len(off)} of "
                f"{REPEATS - 1} answers differ from the first beyond what a batch may change; the first: {off[0][0]}",
                reply=off[0][1],
            )


GREEDY_BOUND = REPEATS * GREEDY_TOKENS


@register(
    "effects:temperature.greedy",
    tags=("sampling",),
    tokens=GREEDY_BOUND,
    effects=("temperature",),
    catches=("half:temperature", "ignored:temperature"),
)
def temperature_greedy(ctx: Context) -> None:
    """Temperature 0 (below the greedy threshold): every token is the likeliest, whatever the seed."""
    _greedy(
        ctx,
        {
            "temperature": ctx.api.schema("CompletionRequest")["properties"]["temperature"][
                "minimum"
            ]
        },
    )


@register(
    "effects:top_k.greedy",
    tags=("sampling",),
    tokens=GREEDY_BOUND,
    effects=("top_k",),
    catches=("ignored:top_k",),
)
def top_k_greedy(ctx: Context) -> None:
    """top_k 1 at temperature 1: every token is the likeliest, whatever the seed."""
    _greedy(ctx, {"top_k": 1, "temperature": 1.0})


@register(
    "effects:top_k.sampled",
    tags=("sampling",),
    tokens=(REPEATS + PREMISE) * SAMPLED_TOKENS,
    effects=("top_k",),
    catches=("wrong:any top_k as 1", "ignored:top_k"),
)
def top_k_sampled(ctx: Context) -> None:
    """top_k TOP_K at temperature 1: every token is among the TOP_K likeliest of its row, and
    some are not the likeliest (top_k is not taken as 1)."""
    fields = {"top_k": TOP_K, "temperature": 1.0, "logprobs": TOP_K}
    below_one = 0
    for reply, choice in _sampled(ctx, fields, SAMPLED_TOKENS):
        outside = below_likeliest(ctx, reply, choice, within=TOP_K)
        if not ctx.expect(
            not outside,
            f"with top_k {TOP_K} a sampled token is not among the {TOP_K} likeliest of "
            "its top_logprobs row",
            expected=f"every token among the {TOP_K} likeliest",
            received={"positions": outside, "logprobs": choice.get("logprobs")},
            reply=reply,
        ):
            return
        below_one += len(below_likeliest(ctx, reply, choice))
    if below_one:
        return
    # the premise: without top_k the same requests sample (else temperature is what is wrong)
    if not any(
        below_likeliest(ctx, r, c)
        for r, c in _sampled(ctx, {"temperature": 1.0}, SAMPLED_TOKENS, PREMISE)
    ):
        ctx.unproven(
            f"at temperature 1 every token of {PREMISE} seeded texts is the likeliest without top_k too "
            "(effects:temperature.sampling): whether top_k is taken as 1 cannot show"
        )
    ctx.fail(
        f"with top_k {TOP_K} at temperature 1, every token of {REPEATS} seeded texts was the likeliest, "
        "and without top_k they were not: top_k was taken as 1",
        expected="some token less likely than the likeliest",
        received=0,
        reply=reply,
    )


# top_p and min_p: the rows alone, which is all their effect needs to show.


@register(
    "effects:top_p.greedy",
    tags=("sampling",),
    tokens=GREEDY_BOUND,
    effects=("top_p",),
    catches=("ignored:top_p",),
)
def top_p_greedy(ctx: Context) -> None:
    """A top_p the likeliest token fills alone, at temperature 1: every token is the likeliest."""
    _greedy(ctx, {"top_p": TOP_P_ONE, "temperature": 1.0}, seeded=False)


@register(
    "effects:min_p.greedy",
    tags=("sampling",),
    tokens=GREEDY_BOUND,
    effects=("min_p",),
    catches=("ignored:min_p",),
)
def min_p_greedy(ctx: Context) -> None:
    """min_p at its maximum (1) at temperature 1: only the likeliest token is left."""
    _greedy(
        ctx,
        {
            "min_p": ctx.api.schema("CompletionRequest")["properties"]["min_p"]["maximum"],
            "temperature": 1.0,
        },
        seeded=False,
    )


@register(
    "effects:temperature.sampling",
    tags=("sampling",),
    tokens=len(SEEDS) * 2 * SAMPLED_TOKENS,
    effects=("temperature",),
)
def temperature_sampling(ctx: Context) -> None:
    """At temperature 1 the tokens are sampled: some token of three seeded texts is not the likeliest."""
    for seed in SEEDS:
        reply, choice = post(
            ctx,
            {
                "prompt": PROMPT,
                "max_tokens": 2 * SAMPLED_TOKENS,
                "logprobs": LOGPROBS,
                "temperature": 1.0,
                "seed": seed,
            },
        )
        if below_likeliest(ctx, reply, choice):
            return
    ctx.fail(
        f"at temperature 1, every token of {len(SEEDS)} seeded texts was the likeliest (greedy sampling)",
        expected="a sampled token less likely than the likeliest",
        received=choice.get("logprobs"),
        reply=reply,
    )


TEMPERED_K = 5  # effects:temperature.scale's top_k: the row shown is all it samples from
TEMPERED_TOKENS = 8  # of each of its answers
TEMPERED_ANSWERS = (
    26  # at most, both temperatures together (the full profile's ceiling holds them):
)
# each takes answers until its tokens can show a wrong temperature
TEMPERED_HOPELESS = (
    4  # answers after which rows that would not show it in all those left end its turn
)
WRONG_TEMPERATURE = 1.0  # what a server that clamps or ignores temperature samples at
COLD_TEMPERATURE = 0.25  # tried first: far enough below 1 to show in fewer tokens than the maximum


def _tempered_steps(
    ctx: Context, asked: float, answers: int
) -> tuple[list[Step], Reply, float, int]:
    """Seeded answers at `asked` until, had the server sampled at WRONG_TEMPERATURE, the
    statistic would exceed CRITICAL about 39 times in 40, at most `answers` of them: (their
    steps, the last reply, the statistic it would at least give, the answers taken)."""
    fields = {
        "prompt": PROMPT,
        "max_tokens": TEMPERED_TOKENS,
        "top_k": TEMPERED_K,
        "logprobs": TEMPERED_K,
        "temperature": asked,
    }
    steps: list[Step] = []
    power = mean = variance = 0.0
    for i in range(answers):
        reply, choice = post(ctx, {**fields, "seed": SEEDS[0] + i})
        outside = below_likeliest(ctx, reply, choice, within=TEMPERED_K)
        if outside:  # top_k's own check (effects:top_k.sampled) says so: no finding here
            ctx.unproven(
                f"with top_k {TEMPERED_K} a sampled token is not among the {TEMPERED_K} likeliest of its row "
                f"(effects:top_k.sampled): what it was sampled from cannot be seen (positions {outside})"
            )
        lp = choice["logprobs"]
        for token, row in zip(lp["tokens"], lp["top_logprobs"]):
            if token in row:
                steps.append((row[token], list(row.values())))
                gained, spread = row_evidence(steps[-1][1], asked, WRONG_TEMPERATURE)
                mean, variance = mean + gained, variance + spread
        power = low_statistic(mean, variance)
        if power >= CRITICAL or (
            i + 1 >= TEMPERED_HOPELESS
            and 2 * low_statistic(mean, variance, answers / (i + 1)) < CRITICAL
        ):
            break
    return steps, reply, power, i + 1


@register(
    "effects:temperature.scale",
    tags=("sampling",),
    tokens=TEMPERED_ANSWERS * TEMPERED_TOKENS,
    effects=("temperature",),
    catches=("wrong:temperature clamped to 1", "ignored:temperature"),
)
def temperature_scale(ctx: Context) -> None:
    """At temperature COLD_TEMPERATURE (0.25) and at its maximum, with top_k 5, the sampled tokens fit the asked
    temperature (tempered.py): a server that clamps it, or samples at 1 whatever is asked, fails."""
    highest = ctx.api.schema("CompletionRequest")["properties"]["temperature"]["maximum"]
    too_even = []
    left = TEMPERED_ANSWERS
    for asked in (COLD_TEMPERATURE, highest):
        # the cold turn leaves at least one answer to the hot one
        steps, reply, power, taken = _tempered_steps(ctx, asked, left - (asked == COLD_TEMPERATURE))
        left -= taken
        if power < CRITICAL:  # this temperature cannot show here; the other may
            too_even.append(f"at {asked}, {len(steps)} tokens, as low as {power:.1f}")
            continue
        found, best = statistic(steps, asked)
        if not ctx.expect(
            found <= CRITICAL,
            f"at temperature {asked} with top_k {TEMPERED_K}, {len(steps)} sampled "
            f"tokens fit temperature {best:.2f} better than the asked one (likelihood-ratio "
            f"statistic {found:.1f}, above {CRITICAL}: once in 10,000 by chance)",
            expected=asked,
            received=round(best, 2),
            reply=reply,
        ):
            return
    if len(too_even) == 2:
        ctx.unproven(
            f"the rows of the sampled tokens are too even for temperature to show: had the server sampled at "
            f"{WRONG_TEMPERATURE}, the statistic could be ({'; '.join(too_even)}), not above {CRITICAL}"
        )


# -- end tokens ------------------------------------------------------------------------


def allowed_tokens_honoured(ctx: Context) -> None:
    """The premise of the checks that allow only some tokens: with only the end tokens allowed,
    a choice ends on its first token (semantics:finish_reason.eos's rule). A server that
    ignores allowed_token_ids writes what it likes, and a check of another field read
    through it would blame that field."""
    reply, choice = memo_post(
        ctx,
        "effects.end_tokens",
        {
            "prompt": PROMPT,
            "max_tokens": END_TOKENS,
            "allowed_token_ids": list(ctx.model.eos_token_ids),
        },
    )
    usage = usage_of(ctx, reply)
    if usage.get("completion_tokens") != 1 or choice.get("finish_reason") != "stop":
        ctx.unproven(
            f"with only the end tokens allowed, a choice wrote {usage.get('completion_tokens')} tokens and "
            f"finished with {choice.get('finish_reason')!r}, not 1 and 'stop': allowed_token_ids is not "
            "applied here (semantics:finish_reason.eos), and this check reads its field through it"
        )


@register(
    "effects:ignore_eos",
    tokens=END_TOKENS + END_TOKENS,
    effects=("ignore_eos",),
    catches=("ignored:ignore_eos",),
)
def ignore_eos(ctx: Context) -> None:
    """ignore_eos with only end tokens allowed: the choice writes max_tokens tokens (usage),
    not ending on its first token (as it does without it: allowed_tokens_honoured)."""
    allowed_tokens_honoured(ctx)
    reply, _ = post(
        ctx,
        {
            "prompt": PROMPT,
            "max_tokens": END_TOKENS,
            "ignore_eos": True,
            "allowed_token_ids": list(ctx.model.eos_token_ids),
        },
    )
    usage = usage_of(ctx, reply)
    ctx.equal(
        f"the tokens written (usage) with ignore_eos and only end tokens allowed, max_tokens = {END_TOKENS}",
        END_TOKENS,
        usage.get("completion_tokens"),
        reply,
    )


@register(
    "effects:skip_special_tokens",
    tokens=3 * END_TOKENS,
    effects=("skip_special_tokens",),
    catches=("ignored:skip_special_tokens",),
)
def skip_special_tokens(ctx: Context) -> None:
    """With only the BOS token allowed (a special token that ends nothing), it is left out of
    the text by default and written (x-models special_tokens) with skip_special_tokens false."""
    allowed_tokens_honoured(ctx)
    bos = ctx.model.bos_token_id
    text = ctx.api.special_tokens(ctx.config.model)[bos]
    for skip, want in ((None, ""), (False, text * END_TOKENS)):
        reply, choice = post(
            ctx,
            {
                "prompt": PROMPT,
                "max_tokens": END_TOKENS,
                "allowed_token_ids": [bos],
                **({} if skip is None else {"skip_special_tokens": skip}),
            },
        )
        ctx.equal(
            f"the text of {END_TOKENS} BOS tokens with skip_special_tokens "
            f"{'true (the default)' if skip is None else 'false'}",
            want,
            choice.get("text"),
            reply,
        )


# -- the vocabulary and the prompt -------------------------------------------------------


def token_of(ctx: Context, text: str) -> tuple[int, list[int]]:
    """(the id of `text`'s one token, the prompt ids of `text`) as the server tokenizes it."""
    reply, choice = memo_post(
        ctx,
        f"effects.tokens.{text}",
        {
            "prompt": text,
            "max_tokens": 1,
            "allowed_token_ids": list(ctx.model.eos_token_ids),
            "return_token_ids": True,
        },
    )
    ids = prompt_ids_returned(ctx, text, choice.get("prompt_token_ids"))
    return ids[-1], ids


@register(
    "effects:bad_words",
    tokens=len(PROBES) * (END_TOKENS + 1),
    effects=("bad_words",),
    catches=("ignored:bad_words",),
)
def bad_words(ctx: Context) -> None:
    """Two one-token words allowed, one of them a bad word: every token is the other one."""
    ids = sorted(token_of(ctx, word)[0] for word in PROBES)
    for bad, good in (PROBES, PROBES[::-1]):
        reply, choice = post(
            ctx,
            {
                "prompt": PROMPT,
                "max_tokens": END_TOKENS,
                "temperature": 0,
                "allowed_token_ids": ids,
                "bad_words": [bad],
            },
        )
        ctx.equal(
            f"the text with the tokens of {list(PROBES)} allowed and bad_words [{bad!r}]",
            good * END_TOKENS,
            choice.get("text"),
            reply,
        )


@register(
    "effects:truncate_prompt_tokens",
    tokens=1,
    effects=("truncate_prompt_tokens",),
    catches=("ignored:truncate_prompt_tokens",),
)
def truncate_prompt_tokens(ctx: Context) -> None:
    """truncate_prompt_tokens k keeps the prompt's last k token ids (prompt_token_ids and usage)."""
    reply, choice = post(
        ctx,
        {
            "prompt": TRUNCATED,
            "truncate_prompt_tokens": KEEP,
            "max_tokens": 1,
            "allowed_token_ids": list(ctx.model.eos_token_ids),
            "return_token_ids": True,
        },
    )
    usage = usage_of(ctx, reply)
    ctx.equal(
        f"(prompt_token_ids, usage.prompt_tokens) of {TRUNCATED} with truncate_prompt_tokens = {KEEP}",
        [TRUNCATED[-KEEP:], KEEP],
        [choice.get("prompt_token_ids"), usage.get("prompt_tokens")],
        reply,
    )


@register(
    "effects:add_special_tokens",
    tokens=2,
    effects=("add_special_tokens",),
    catches=("ignored:add_special_tokens",),
)
def add_special_tokens(ctx: Context) -> None:
    """A string prompt starts with the BOS id by default, and without it with add_special_tokens false."""
    bos = ctx.model.bos_token_id
    token, ids = token_of(ctx, PROBES[0])
    ctx.equal(
        f"the prompt_token_ids of {PROBES[0]!r} (add_special_tokens true, the default)",
        [bos, token],
        ids,
    )
    reply, choice = post(
        ctx,
        {
            "prompt": PROBES[0],
            "add_special_tokens": False,
            "max_tokens": 1,
            "allowed_token_ids": list(ctx.model.eos_token_ids),
            "return_token_ids": True,
        },
    )
    ctx.equal(
        f"the prompt_token_ids of {PROBES[0]!r} with add_special_tokens false",
        [token],
        choice.get("prompt_token_ids"),
        reply,
    )
