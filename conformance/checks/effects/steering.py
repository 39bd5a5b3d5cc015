"""effects:steering.* — a steering vector does what vllm-lens does with it.

vllm-lens adds `scale` x the vector (rescaled to the residual's L2 norm with
`norm_match`) to the output of each layer in `layer_indices`, at every position
(a vector of shape [layers, hidden]) or at its `position_indices` ([layers,
positions, hidden]). So, on a greedy continuation (temperature 0 and top_k 1):

- a strong vector at the middle layer changes it, the same way every time;
- a vector of zeros, or any vector at scale 0, leaves it as it is without steering;

and on the residual stream of the prompt (output_residual_stream, one token): at
the steered layer it is the unsteered stream plus exactly that addition (the
layer's own output does not depend on what is added to it), one layer below it
is unchanged; so the layer, the scale, norm_match and position_indices each show.
That it is added at no layer above shows by replaying a steered stream: with a vector
at layer L, what layer L+1 put out is set again by adding, at L+1 alone, that output
less the unsteered one; every layer above then reads what it read before, so at L+2
the two streams agree, and a vector also added above L makes them differ by itself.

A batch may change a value by a little, so vectors are compared within a share
of their norms (SLACK); answers that must agree are held to agree.py's rule, each of
REPEATS of them; a check that steering leaves a text alone first sees that the strong
vector changes it (else it could not fail: skipped, saying so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from conformance.checks.effects.sampling import (
    END_TOKENS,
    REPEATS,
    agree_all,
    allowed_tokens_honoured,
)
from conformance.checks.helpers.agree import LOGPROBS, difference
from conformance.checks.helpers.capture import SLACK, decode_capture
from conformance.checks.helpers.claims import shrink
from conformance.checks.helpers.common import memo_post, post
from conformance.checks.helpers.steer import Vector, direction, layer, norm, strong, vector
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.wire import tensors
from conformance.wire.client import Reply

PROMPT = [0, 1, 2, 3, 4]  # token ids: shorter than a KV block, so no prompt is ever cached
TOKENS = 2  # of a greedy continuation
DECODE = 2  # tokens generated in effects:steering.decoding
SCALE = 4.0  # the scale effects:steering.layer_and_scale sends (the others leave it out:
# one field's effect per check)
POSITION = 2  # the prompt position position_indices names
NORM_SMALL = 2**-8  # a norm_match vector's norm, as a share of the stream's (it must not matter)


# -- the greedy continuation ----------------------------------------------------------


def greedy(ctx: Context, vectors: list[Vector] | None) -> dict[str, Any]:
    steering = {"apply_steering_vectors": vectors} if vectors else {}
    return {
        "prompt": PROMPT,
        "max_tokens": TOKENS,
        "temperature": 0,
        "top_k": 1,
        "logprobs": LOGPROBS,
        **steering,
    }


def _answer(ctx: Context, key: str, vectors: list[Vector] | None) -> tuple[Reply, dict[str, Any]]:
    reply, choice = memo_post(ctx, key, greedy(ctx, vectors))
    return reply, choice


def steering_shows(ctx: Context) -> None:
    """The premise of a check that steering leaves a text alone: the strong vector changes
    it (else the check could not fail, and says so instead of passing)."""
    _, plain = _answer(ctx, "steering.plain", None)
    _, steered = _answer(ctx, "steering.strong", strong(ctx))
    if difference(ctx.api, plain, steered) is None:
        ctx.unproven(
            "a strong steering vector leaves the greedy continuation as it is without it "
            "(effects:steering.changes): that a vector leaves it alone shows nothing here"
        )


def agrees_with_plain(ctx: Context, what: str, vectors: list[Vector]) -> None:
    """Each of REPEATS steered answers is the unsteered one (as a batch may leave it)."""
    steering_shows(ctx)
    _, plain = _answer(ctx, "steering.plain", None)
    agree_all(
        ctx, f"{what} changed the greedy continuation", plain, [greedy(ctx, vectors)] * REPEATS
    )


AGREE_BOUND = (REPEATS + 2) * TOKENS


@register(
    "effects:steering.changes",
    tags=("steering",),
    tokens=(REPEATS + 1) * TOKENS,
    effects=("apply_steering_vectors",),
    catches=("half:apply_steering_vectors", "ignored:apply_steering_vectors"),
)
def changes(ctx: Context) -> None:
    """A strong vector (+-64) at the middle layer changes the greedy continuation, in each of
    REPEATS answers."""
    _, plain = _answer(ctx, "steering.plain", None)
    same = 0
    for i in range(REPEATS):
        reply, steered = (
            _answer(ctx, "steering.strong", strong(ctx))
            if i == 0
            else post(ctx, greedy(ctx, strong(ctx)))
        )
        same += difference(ctx.api, plain, steered) is None
    ctx.expect(
        not same,
        f"a strong steering vector left the greedy continuation as it is without it in {same} of "
        f"{REPEATS} answers",
        expected=f"not {plain.get('text')!r}",
        received=steered.get("text"),
        reply=reply,
    )


@register(
    "effects:steering.repeatable",
    tags=("steering",),
    tokens=AGREE_BOUND,
    effects=("apply_steering_vectors",),
    catches=("half:apply_steering_vectors",),
)
def repeatable(ctx: Context) -> None:
    """The same vector again gives the same greedy continuation, in each of REPEATS answers."""
    _, plain = _answer(ctx, "steering.plain", None)
    answers = [_answer(ctx, "steering.strong", strong(ctx))]
    answers += [post(ctx, greedy(ctx, strong(ctx))) for _ in range(REPEATS - 1)]
    steered = [choice for _, choice in answers if difference(ctx.api, plain, choice) is not None]
    if not steered:
        ctx.unproven(
            f"a strong steering vector left the greedy continuation as it is without it in {REPEATS} answers "
            "(effects:steering.changes): whether it repeats shows nothing here"
        )
    off = [
        (found, reply, choice)
        for reply, choice in answers
        if (found := difference(ctx.api, steered[0], choice)) is not None
    ]
    if off:
        found, reply, choice = off[0]
        ctx.fail(
            f"the same steering vector gave other greedy continuations: {len(off)} of {REPEATS} answers differ "
            f"beyond what a batch may change; the first: {found}",
            expected=steered[0].get("text"),
            received=choice.get("text"),
            reply=reply,
        )


@register(
    "effects:steering.zero",
    tags=("steering",),
    tokens=AGREE_BOUND,
    effects=("apply_steering_vectors",),
)
def zero(ctx: Context) -> None:
    """A vector of zeros leaves the greedy continuation as it is without steering."""
    agrees_with_plain(ctx, "a vector of zeros", [vector(ctx, [0.0] * ctx.model.hidden_size)])


@register(
    "effects:steering.scale_zero",
    tags=("steering",),
    tokens=AGREE_BOUND,
    effects=("apply_steering_vectors.scale",),
    catches=("half:apply_steering_vectors.scale", "ignored:apply_steering_vectors.scale"),
)
def scale_zero(ctx: Context) -> None:
    """The strong vector at scale 0 leaves the greedy continuation as it is without steering."""
    agrees_with_plain(ctx, "the strong vector at scale 0", [strong(ctx)[0] | {"scale": 0.0}])


# -- the residual stream at the steered layer -------------------------------------------


def capture_body(
    ctx: Context, prompt: list[int], vectors: list[Vector] | None = None, **fields: Any
) -> dict[str, Any]:
    """A capture of `prompt`'s residual stream one layer below the middle one and at it (one
    token, unless `fields` say otherwise)."""
    steering = {"apply_steering_vectors": vectors} if vectors else {}
    return {
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "top_k": 1,
        "output_residual_stream": [layer(ctx) - 1, layer(ctx)],
        **steering,
        **fields,
    }


def capture(
    ctx: Context, vectors: list[Vector] | None, **fields: Any
) -> tuple[Reply, list[list[list[float]]]]:
    reply, _ = post(ctx, capture_body(ctx, PROMPT, vectors, **fields))
    return reply, decode_capture(ctx, reply)


def plain_capture(ctx: Context, **fields: Any) -> list[list[list[float]]]:
    key = f"steering.capture.{sorted(fields.items())}"
    if key not in ctx.memo:
        ctx.memo[key] = capture(ctx, None, **fields)[1]
    stream: list[list[list[float]]] = ctx.memo[key]
    return stream


def expect_added(
    ctx: Context,
    what: str,
    vectors: list[Vector],
    added: Sequence[list[float] | None],
    **fields: Any,
) -> None:
    """In each of REPEATS steered captures, at the steered layer each position is the unsteered
    stream plus `added` (None: nothing); one layer below, nothing is added anywhere."""
    plain = plain_capture(ctx, **fields)
    for _ in range(REPEATS):
        reply, steered = capture(ctx, vectors, **fields)
        if not _added(ctx, what, plain, steered, added, reply):
            return


def _added(
    ctx: Context,
    what: str,
    plain: list[list[list[float]]],
    steered: list[list[list[float]]],
    added: Sequence[list[float] | None],
    reply: Reply,
) -> bool:
    ok = True
    for k, name in (
        (0, f"layer {layer(ctx) - 1} (below the steered one)"),
        (1, f"layer {layer(ctx)}"),
    ):
        if len(steered[k]) != len(plain[k]) or len(plain[k]) != len(added):
            ctx.stop(
                "the steered capture has other positions than the unsteered one",
                expected=len(added),
                received=[len(plain[k]), len(steered[k])],
                reply=reply,
            )
        for p, (before, after) in enumerate(zip(plain[k], steered[k], strict=True)):
            push = added[p] if k == 1 else None
            want = push if push is not None else [0.0] * len(before)
            got = [b - a for a, b in zip(before, after, strict=True)]
            error = norm([g - w for g, w in zip(got, want, strict=True)])
            bound = SLACK * (norm(before) + norm(want))
            ok &= ctx.expect(
                error <= bound,
                f"{what}: at {name}, position {p}, the steered stream less the "
                f"unsteered one is not {'the addition' if any(want) else 'zero'}",
                expected={"norm": round(norm(want), 4), "within": round(bound, 4)},
                received={"norm": round(norm(got), 4), "off_by": round(error, 4)},
                reply=reply,
            )
    return ok


CAPTURE_BOUND = 1 + REPEATS


@register(
    "effects:steering.layer_and_scale",
    tags=("steering", "activations"),
    tokens=CAPTURE_BOUND,
    effects=("apply_steering_vectors.layer_indices", "apply_steering_vectors.scale"),
    catches=(
        "wrong:scale x 2",
        "wrong:layer + 1",
        "wrong:layer - 1",
        "ignored:apply_steering_vectors",
        "ignored:apply_steering_vectors.scale",
    ),
)
def layer_and_scale(ctx: Context) -> None:
    """At the steered layer the stream gains scale x the vector at every prompt position; one
    layer below it gains nothing."""
    u = direction(ctx.model.hidden_size)
    expect_added(
        ctx,
        f"a +-1 vector at scale {SCALE}",
        [vector(ctx, u, scale=SCALE)],
        [[SCALE * x for x in u]] * len(PROMPT),
    )


def typical_norm(rows: list[list[float]]) -> float:
    """The median norm of a layer's rows: the stream's own size there."""
    return sorted(map(norm, rows))[len(rows) // 2]


@register(
    "effects:steering.norm_match",
    tags=("steering", "activations"),
    tokens=CAPTURE_BOUND,
    effects=("apply_steering_vectors.norm_match",),
    catches=(
        "wrong:layer + 1",
        "wrong:layer - 1",
        "ignored:apply_steering_vectors",
        "ignored:apply_steering_vectors.norm_match",
    ),
)
def norm_match(ctx: Context) -> None:
    """With norm_match the vector is rescaled to the stream's norm at each position: a vector
    of a tiny norm adds the stream's norm in its direction."""
    plain = plain_capture(ctx)[1]
    u = direction(ctx.model.hidden_size)
    # a power of two far below the stream's norm: without norm_match it would add next to nothing
    size = norm(u)
    small = 2.0 ** math.floor(math.log2(max(typical_norm(plain), 1e-30) * NORM_SMALL / size))
    unit = [x / size for x in u]
    added = [[k * x for x in unit] for k in map(norm, plain)]
    expect_added(
        ctx,
        f"a vector of norm {size * small:.3g} with norm_match",
        [vector(ctx, [small * x for x in u], norm_match=True)],
        added,
    )


@register(
    "effects:steering.position_indices",
    tags=("steering", "activations"),
    tokens=CAPTURE_BOUND,
    effects=("apply_steering_vectors.position_indices",),
    catches=(
        "wrong:layer + 1",
        "wrong:layer - 1",
        "ignored:apply_steering_vectors",
        "ignored:apply_steering_vectors.position_indices",
    ),
)
def position_indices(ctx: Context) -> None:
    """A vector for one position (position_indices) is added there and nowhere else."""
    u = direction(ctx.model.hidden_size)
    added: list[list[float] | None] = [None] * len(PROMPT)
    added[POSITION] = u
    expect_added(
        ctx,
        f"a +-1 vector at position_indices [{POSITION}]",
        [vector(ctx, u, position_indices=[POSITION])],
        added,
    )


def _replayed_layers(ctx: Context) -> int:
    """L of effects:steering.layers_above: the middle layer, or lower where L+2 would be past the top."""
    below_top = ctx.model.num_layers - 3
    if below_top < 0:
        shrink(
            ctx,
            "num_layers",
            f"the model has {ctx.model.num_layers} layers: no two layers above a steered one",
        )
    return min(ctx.model.num_layers // 2, below_top)


@register(
    "effects:steering.layers_above",
    tags=("steering", "activations"),
    tokens=2 + REPEATS,
    effects=("apply_steering_vectors.layer_indices",),
    catches=("wrong:every layer above",),
)
def layers_above(ctx: Context) -> None:
    """A vector at layer L is added there and at no layer above: its stream at L+1, given again
    at L+1 alone as an addition to the unsteered stream, leaves the same stream at L+2."""
    at = _replayed_layers(ctx)
    above = [at + 1, at + 2]
    plain = plain_capture(ctx, output_residual_stream=above)
    u = direction(ctx.model.hidden_size)
    size = typical_norm(plain[0]) / norm(u)  # about the stream's own norm
    first = {
        "activations": tensors.encode_float32([size * x for x in u], [1, ctx.model.hidden_size]),
        "layer_indices": [at],
    }
    reply, steered = capture(ctx, [first], output_residual_stream=above)
    if len(steered[0]) != len(plain[0]):
        ctx.stop(
            "the steered capture has other positions than the unsteered one",
            expected=len(plain[0]),
            received=len(steered[0]),
            reply=reply,
        )
    rows = [
        [b - a for a, b in zip(before, after, strict=True)]
        for before, after in zip(plain[0], steered[0])
    ]
    if max(map(norm, rows)) <= SLACK * size * norm(u):
        ctx.unproven(
            f"a vector at layer {at} left the stream at layer {at + 1} as it is without it "
            "(effects:steering.layer_and_scale): that it is added at no layer above shows nothing here"
        )
    again = {
        "activations": tensors.encode_float32(
            [x for row in rows for x in row], [1, len(rows), ctx.model.hidden_size]
        ),
        "layer_indices": [at + 1],
        "position_indices": list(range(len(rows))),
    }
    for _ in range(REPEATS):
        reply, replayed = capture(ctx, [again], output_residual_stream=above)
        for p, (want, got) in enumerate(zip(steered[1], replayed[1], strict=True)):
            error = norm([g - w for g, w in zip(got, want, strict=True)])
            bound = SLACK * norm(want)
            if not ctx.expect(
                error <= bound,
                f"a vector at layer {at}: its stream at layer {at + 1} given again there "
                f"leaves another stream at layer {at + 2} (position {p}): the vector was also added "
                f"above layer {at}",
                expected={"off_by_within": round(bound, 4)},
                received={"off_by": round(error, 4)},
                reply=reply,
            ):
                return


@register(
    "effects:steering.decoding",
    tags=("steering", "activations"),
    tokens=DECODE * CAPTURE_BOUND + END_TOKENS,
    effects=("apply_steering_vectors",),
    catches=(
        "wrong:layer + 1",
        "wrong:layer - 1",
        "wrong:prompt only",
        "ignored:apply_steering_vectors",
    ),
)
def decoding(ctx: Context) -> None:
    """Steering goes on while decoding: with one token allowed (so the steered and unsteered
    texts are the same tokens), the stream at the steered layer gains the vector at every
    position, the generated tokens' as the prompt's."""
    u = direction(ctx.model.hidden_size)
    allowed_tokens_honoured(
        ctx
    )  # else the two texts differ, and so do their streams, steering or not
    positions = (
        len(PROMPT) + DECODE - 1
    )  # every generated token but the last goes through the model
    expect_added(
        ctx,
        f"a +-1 vector, {DECODE} tokens generated",
        [vector(ctx, u)],
        [u] * positions,
        max_tokens=DECODE,
        allowed_token_ids=[PROMPT[-1]],
    )
