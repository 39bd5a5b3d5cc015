"""lens:* — vllm-lens: activations decode to the declared shape; bad steering vectors get 400.

The golden cases cover each way a vector can be bad; these add what they
cannot: activations read back and decoded, and a bad vector that is not the
first of its list.
"""

from __future__ import annotations

import math
import re
from typing import Any

from conformance.checks.helpers.common import end_layers, open_stream
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.engine.shapes import schema_errors
from conformance.spec.bodies import steering_body
from conformance.wire import tensors
from contract import Spec

PROMPT = [0, 1, 2, 3, 4]
MAX_TOKENS = 2


def storage_dtype(api: Spec, model_dtype: str) -> tuple[str, str]:
    """(dtype on the wire, original_dtype) for the model's dtype, from the spec's dtype pairs."""
    pairs = api.model_rules["steering_vector"]["dtype_pairs"]
    original = f"torch.{model_dtype}"
    return next((wire, orig) for wire, orig in pairs.items() if orig == original)


def zero_vector(hidden: int, layers: list[int]) -> dict[str, Any]:
    shape = [len(layers), hidden]
    return {
        "activations": tensors.encode_float32([0.0] * math.prod(shape), shape),
        "layer_indices": layers,
    }


def _check_activations(ctx: Context, acts: Any, generated: int, reply: Any) -> None:
    """layers as asked; shape [layers, prompt + generated - 1, hidden]; data decodes to that many bytes."""
    if not ctx.expect(isinstance(acts, dict), "no activations in the response", reply=reply):
        return
    errors = schema_errors(acts, ctx.api.schema("Activations"))
    if not ctx.expect(
        not errors, "the activations do not match their schema", received=errors, reply=reply
    ):
        return
    ctx.equal(
        "activations.layers (the requested layers, ascending)",
        end_layers(ctx),
        acts["layers"],
        reply,
    )
    tensor = acts["residual_stream"]
    shape = [len(end_layers(ctx)), len(PROMPT) + generated - 1, ctx.model.hidden_size]
    ctx.equal("the residual stream's shape", shape, tensor["shape"], reply)
    wire, original = storage_dtype(ctx.api, ctx.model.dtype)
    ctx.equal(
        "the residual stream's dtypes",
        [wire, original],
        [tensor["dtype"], tensor["original_dtype"]],
        reply,
    )
    try:
        want = tensors.declared_bytes(tensor, ctx.api.caps["capture_elements"])
        size, raw = tensors.content(tensor, ctx.api.caps["capture_elements"])
    except tensors.TensorError as exc:
        ctx.fail(
            "the residual stream's data does not decode (base64 of one zstd frame)",
            received=str(exc),
            reply=reply,
        )
        return
    ctx.equal("the zstd frame's content size", want, size, reply)
    ctx.equal("the decoded byte count", want, len(raw), reply)


def _generated(usage: Any) -> int:
    return usage.get("completion_tokens", MAX_TOKENS) if isinstance(usage, dict) else MAX_TOKENS


@register(
    "lens:activations_shape",
    tags=("activations",),
    tokens=MAX_TOKENS,
    effects=("output_residual_stream",),
)
def activations_shape(ctx: Context) -> None:
    """output_residual_stream returns activations that decode to [layers, positions, hidden];
    layers asked in descending order come back ascending (the Activations schema says so)."""
    body = {
        "model": ctx.config.model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "output_residual_stream": end_layers(ctx)[::-1],
    }
    reply = ctx.client.post(ctx.api.completions_path, body)
    ctx.expect_status(reply, 200, fatal=True)
    data = reply.data if isinstance(reply.data, dict) else {}
    _check_activations(ctx, data.get("activations"), _generated(data.get("usage")), reply)


@register("lens:activations_stream", tags=("activations", "streaming"), tokens=MAX_TOKENS)
def activations_stream(ctx: Context) -> None:
    """In a stream the activations come in their own chunk after the usage chunk, before [DONE]."""
    body = {
        "model": ctx.config.model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "output_residual_stream": end_layers(ctx),
        "stream_options": {"include_usage": True},
    }
    reply = open_stream(ctx, body)
    order = " ".join(e.kind for e in reply.parsed.events)
    ctx.expect(
        bool(re.fullmatch(r"(content )+usage activations done", order)),
        "events out of order",
        expected="content... usage activations done",
        received=order,
        reply=reply,
    )
    acts = [e.payload for e in reply.parsed.events if e.kind == "activations"]
    usage = next((e.payload.get("usage") for e in reply.parsed.events if e.kind == "usage"), None)
    if acts:
        _check_activations(ctx, acts[0].get("activations"), _generated(usage), reply)


@register("lens:steering_accepted", tags=("steering",), tokens=MAX_TOKENS)
def steering_accepted(ctx: Context) -> None:
    """A valid vector over the first and last layer is accepted."""
    body = {
        "model": ctx.config.model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "apply_steering_vectors": [zero_vector(ctx.model.hidden_size, end_layers(ctx))],
    }
    reply = ctx.client.post(ctx.api.completions_path, body)
    ctx.expect_status(reply, 200)


@register("lens:bad_vector.second", tags=("steering",), worst=MAX_TOKENS)
def bad_second_vector(ctx: Context) -> None:
    """A wrong hidden size in the second vector: 400 naming apply_steering_vectors[1]."""
    hidden = ctx.model.hidden_size
    bad = zero_vector(hidden - 1, [0])
    body = {
        "model": ctx.config.model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "apply_steering_vectors": [zero_vector(hidden, [0]), bad],
    }
    reply = ctx.client.post(ctx.api.completions_path, body)
    param = "apply_steering_vectors[1]"
    ctx.expect_error(
        reply, steering_body(ctx.api, "hidden", param, got=hidden - 1, hidden_size=hidden)
    )


@register("lens:layer_out_of_range", tags=("activations",), worst=MAX_TOKENS)
def layer_out_of_range(ctx: Context) -> None:
    """output_residual_stream naming the layer count itself: 400 (x-model-rules layer_in_range)."""
    rule = ctx.api.model_rules["layer_in_range"]
    layers = ctx.model.num_layers
    body = {
        "model": ctx.config.model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "output_residual_stream": [layers],
    }
    reply = ctx.client.post(ctx.api.completions_path, body)
    from conformance.spec.bodies import error_body

    param = rule["params"][0]
    ctx.expect_error(
        reply,
        error_body(
            ctx.api,
            rule["code"],
            rule["message"].format(layer=layers, param=param, num_layers=layers),
            param,
        ),
    )
