"""A number GET /v1/models gives is a claim: before it removes a check or sizes one down, behaviour
shows it (issue 53). `shrink` stands where such a check would skip: the skip holds once the claim
is shown, and until then the check is unproven (exit code 3), never a neutral skip; `confirm`
where a check goes on sized down by it.

- num_layers L (and hidden_size H): a capture of layer L - 1 is accepted, its rows H wide, and a
  capture of layer L is refused.
- max_model_len M: a prompt of M - 1 tokens with max_tokens 1 is accepted, one of M refused; a
  claim whose prompt cannot be sent within the body cap cannot be shown at all.

Each claim is shown once a run (ctx.memo), by the requests of the first check that needs it.
"""

from __future__ import annotations

from typing import Any, NoReturn

from conformance.engine.context import Context

SHOWN = "claims.shown"  # ctx.memo key: number -> None (shown) or why it is not
PROMPT_ID = 0
BYTES_PER_ID = 2  # "0," in a prompt of token ids


def not_shown(ctx: Context, number: str) -> str | None:
    """Why the deployment's `number` is not shown by behaviour; None where it is."""
    shown = ctx.memo.setdefault(SHOWN, {})
    if number not in shown:
        shown[number] = _show(ctx, number)
    why: str | None = shown[number]
    return why


def shrink(ctx: Context, number: str, reason: str) -> NoReturn:
    """Skip for `reason` (a check `number` removes or cannot fit) where the deployment has shown
    `number` by behaviour; else unproven, saying why."""
    confirm(ctx, number, reason)
    ctx.skip(reason)


def confirm(ctx: Context, number: str, reason: str) -> None:
    """Go on (a check sized down by `number`, for `reason`) where the deployment has shown
    `number` by behaviour; else unproven, saying why."""
    why = not_shown(ctx, number)
    if why is not None:
        ctx.unproven(
            f"{reason}; but {number} {getattr(ctx.model, number)} is GET /v1/models' claim, not "
            f"shown by behaviour: {why}"
        )


def _show(ctx: Context, number: str) -> str | None:
    if not ctx.given(number):
        return "GET /v1/models does not give it (the spec's stands in)"
    if not ctx.config.full:
        return "showing it generates a token, which the quick profile never asks for"
    return _show_context(ctx) if number == "max_model_len" else _show_layers(ctx)


def _post(ctx: Context, body: dict[str, Any]) -> Any:
    return ctx.client.post(
        ctx.api.completions_path,
        {"model": ctx.config.model, "max_tokens": 1, "temperature": 0, **body},
    )


def _show_layers(ctx: Context) -> str | None:
    layers, hidden = ctx.model.num_layers, ctx.model.hidden_size
    last = _post(ctx, {"prompt": [PROMPT_ID], "output_residual_stream": [layers - 1]})
    if last.status != 200:
        return f"a capture of layer {layers - 1}, the last, was answered {last.status}"
    acts = last.data.get("activations") if isinstance(last.data, dict) else None
    tensor = acts.get("residual_stream") if isinstance(acts, dict) else None
    shape = tensor.get("shape") if isinstance(tensor, dict) else None
    if not isinstance(shape, list) or not shape or shape[-1] != hidden:
        return f"a capture of layer {layers - 1} is not {hidden} wide (its shape: {shape!r:.80})"
    past = _post(ctx, {"prompt": [PROMPT_ID], "output_residual_stream": [layers]})
    if past.status is None or not 400 <= past.status < 500:
        return f"a capture of layer {layers}, past the last, was answered {past.status}"
    return None


def _show_context(ctx: Context) -> str | None:
    length = ctx.max_model_len
    if BYTES_PER_ID * length + 256 > ctx.api.caps["max_body_bytes"]:
        return f"a prompt of {length} token ids does not fit the body cap"
    fits = _post(ctx, {"prompt": [PROMPT_ID] * (length - 1)})
    if fits.status != 200:
        return f"a prompt of {length - 1} tokens and max_tokens 1 was answered {fits.status}"
    past = _post(ctx, {"prompt": [PROMPT_ID] * length})
    if past.status is None or not 400 <= past.status < 500:
        return f"a prompt of {length} tokens and max_tokens 1 was answered {past.status}"
    return None
