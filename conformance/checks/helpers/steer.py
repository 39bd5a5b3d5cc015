"""Steering vectors the checks send (effects:steering.*, isolation:*): at the model's middle
layer, in a fixed direction; registers no check."""

from __future__ import annotations

import math
from typing import Any

from conformance.checks.helpers.claims import shrink
from conformance.engine.context import Context
from conformance.wire import tensors

STRONG = 64.0  # a strong vector's values: its norm, 64 x sqrt(hidden), is far above the stream's


Vector = dict[str, Any]


def layer(ctx: Context) -> int:
    """The middle layer, which has one below it."""
    middle = ctx.model.num_layers // 2
    if middle < 1:
        shrink(
            ctx,
            "num_layers",
            f"the model has {ctx.model.num_layers} layer: no layer below the steered one",
        )
    return middle


def direction(hidden: int) -> list[float]:
    """+-1 in a fixed pattern: no special direction of any model."""
    return [1.0 if math.sin(i + 1) >= 0 else -1.0 for i in range(hidden)]


def vector(ctx: Context, values: list[float], **fields: Any) -> Vector:
    """A vector at the middle layer: [1, hidden], or [1, positions, hidden] with position_indices."""
    shape = (
        [1, len(values) // ctx.model.hidden_size, ctx.model.hidden_size]
        if "position_indices" in fields
        else [1, ctx.model.hidden_size]
    )
    return {
        "activations": tensors.encode_float32(values, shape),
        "layer_indices": [layer(ctx)],
        **fields,
    }


def strong(ctx: Context) -> list[Vector]:
    return [vector(ctx, [STRONG * x for x in direction(ctx.model.hidden_size)])]


def norm(v: list[float]) -> float:
    return math.hypot(*v)
