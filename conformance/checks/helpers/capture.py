"""A captured residual stream read back: the wire tensor decoded and held to its shape, as
[layer][position][hidden] floats (the effects, isolation and model groups read captures so)."""

from __future__ import annotations

import math
from typing import Any

from conformance.engine.context import Context
from conformance.wire import tensors
from conformance.wire.client import Reply

SLACK = 0.03  # a batch may move a stream by this share of its norm (and bf16 rounds)


def tensor_values(ctx: Context, tensor: Any, reply: Reply) -> tuple[list[int], list[float]]:
    """A tensor in the wire encoding (activations, a vector): its shape and its values, or the check stops."""
    try:
        shape, values = tensors.values(tensor, ctx.api.caps["capture_elements"])
    except tensors.TensorError as exc:
        ctx.stop("no residual stream that decodes", received=str(exc), reply=reply)
    if len(values) != math.prod(shape):
        ctx.stop("the residual stream's values do not fill its shape", received=shape, reply=reply)
    return shape, values


def decode_capture(ctx: Context, reply: Reply, layers: int = 2) -> list[list[list[float]]]:
    """The captured residual stream of `layers` layers as [layer][position][hidden] floats."""
    acts = reply.data.get("activations") if isinstance(reply.data, dict) else None
    tensor = acts.get("residual_stream") if isinstance(acts, dict) else None
    shape, values = tensor_values(ctx, tensor, reply)
    if len(shape) != 3 or shape[0] != layers or shape[-1] != ctx.model.hidden_size:
        ctx.stop(
            f"the residual stream is not [{layers} layers, positions, hidden]",
            received=shape,
            reply=reply,
        )
    hidden, positions = shape[2], shape[1]
    return [
        [
            values[(k * positions + p) * hidden : (k * positions + p + 1) * hidden]
            for p in range(positions)
        ]
        for k in range(shape[0])
    ]
