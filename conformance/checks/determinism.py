"""determinism:* — a seed reproduces its answer, and other seeds give other answers."""

from __future__ import annotations

import json

from conformance.checks.helpers.answers import agree_with, agreeing_body, seeded_body, texts
from conformance.engine.context import Context
from conformance.engine.registry import register

SEED_REPEATS = 16  # answers of one seeded request held to the first; a server that drops the
# seed on a quarter of its requests passes all with odds 0.75^16 = 1%
SEED_TOKENS = 4
# Two other temperatures (the run's, engine.draws), each with OTHER_REPEATS answers held to their
# first: a server that honours the seed at temperature 1 only (where a gate would look) fails at
# each (its answers there are sampled anew; 4 tokens at 0.7 coincide three times over far below
# 1 run in 100).
OTHER_TEMPERATURES, OTHER_REPEATS = 2, 4


@register(
    "determinism:seed",
    tags=("determinism",),
    tokens=(SEED_REPEATS + OTHER_TEMPERATURES * OTHER_REPEATS) * SEED_TOKENS,
    effects=("seed",),
)
def seed_reproduces(ctx: Context) -> None:
    """The same request with the same seed, sent again and again at temperature 1 (and at other
    temperatures), gets the same tokens each time, or a near tie a batch may turn (agree.py):
    every answer, no any-of-N."""
    body = {**agreeing_body(ctx), "n": 1, "max_tokens": SEED_TOKENS}
    runs = [(body["temperature"], SEED_REPEATS)]
    runs += [(t, OTHER_REPEATS) for t in ctx.draws.temperatures]
    for temperature, repeats in runs:
        replies = []
        for _ in range(repeats):
            reply = ctx.client.post(ctx.api.completions_path, {**body, "temperature": temperature})
            ctx.expect_status(reply, 200, fatal=True)
            replies.append(reply)
        agree_with(ctx, f"the same seed at temperature {temperature}", replies[0], replies[1:])


@register(
    "determinism:seed.differs",
    tags=("determinism",),
    tokens=5 * 8,
    effects=("seed",),
    catches=("wrong:constant seed",),
)
def seed_differs(ctx: Context) -> None:
    """Other seeds, other texts: of three seeds at temperature 1, not all give the same texts
    (a server that samples every request with one seed, whatever it asks, gives them)."""
    seen = []
    others = ctx.draws.other_seeds
    for seed in others:
        reply = ctx.client.post(
            ctx.api.completions_path, {**seeded_body(ctx), "n": 1, "seed": seed}
        )
        ctx.expect_status(reply, 200, fatal=True)
        seen.append(texts(reply))
    reply = ctx.client.post(ctx.api.completions_path, {**seeded_body(ctx), "n": 1})
    ctx.expect_status(reply, 200, fatal=True)
    seen.append(texts(reply))
    if len({json.dumps(t, sort_keys=True) for t in seen}) > 1:
        return
    unseeded = []  # the premise: without a seed, temperature 1 gives other texts
    for _ in range(2):
        body = {k: v for k, v in seeded_body(ctx).items() if k != "seed"}
        r = ctx.client.post(ctx.api.completions_path, {**body, "n": 1})
        ctx.expect_status(r, 200, fatal=True)
        unseeded.append(texts(r))
    if unseeded[0] == unseeded[1] == seen[0]:
        ctx.unproven(
            "at temperature 1 every text is the same, seed or none (effects:temperature.sampling): "
            "whether the seed asked for is used cannot show"
        )
    ctx.expect(
        False,
        f"seeds {others[0]}, {others[1]} and {seeded_body(ctx)['seed']} at temperature 1 gave the "
        "same texts: the seed asked for is not the one sampled with",
        expected="other texts for other seeds",
        received=seen[0],
        reply=reply,
    )
