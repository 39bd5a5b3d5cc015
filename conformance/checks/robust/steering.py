"""robust:steering.* — steering vectors as compression bombs: a frame that declares 1 TiB,
vectors that decode past x-caps.steering_decoded_bytes, frames with more or less than they declare."""

from __future__ import annotations

import struct
from typing import Any

from conformance.checks.robust.raw import minimal, post, refused, robust
from conformance.engine.context import Context
from conformance.spec.bodies import steering_body
from conformance.wire import tensors


def _zeros(size: int) -> bytes:
    return tensors.frame(bytes(size))


def _steer(ctx: Context, *vectors: dict[str, Any]) -> dict[str, Any]:
    return minimal(
        ctx, apply_steering_vectors=[{"activations": v, "layer_indices": [0]} for v in vectors]
    )


def _declaring(frame: bytes, size: int) -> bytes:
    """The frame with its header's content size rewritten to `size`, in the 8-byte field
    (RFC 8878 3.1.1.1: descriptor, window descriptor unless single-segment, dictionary id, size)."""
    fhd = frame[4]
    single = fhd & 0x20
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    old = (1 if single else 0, 2, 4, 8)[fhd >> 6]
    return (
        frame[:4]
        + bytes([(fhd & 0x3F) | 0xC0])
        + frame[5:at]
        + struct.pack("<Q", size)
        + frame[at + old :]
    )


@robust("robust:steering.positions")
def steering_positions(ctx: Context) -> None:
    """A 200-byte frame declaring 1 TiB (shape [1, 67108864, hidden], sizes agreeing): 400 before anything is decoded."""  # noqa: E501  (the check's one-line description)
    hidden, positions = ctx.model.hidden_size, 67108864
    frame = _declaring(_zeros(4 * hidden), positions * hidden * 4)
    param = "apply_steering_vectors[0]"
    refused(
        ctx,
        post(ctx, _steer(ctx, tensors.wire(frame, [1, positions, hidden]))),
        "1 TiB declared",
        steering_body(ctx.api, "positions", param, got=positions, max_model_len=ctx.max_model_len),
    )


@robust("robust:steering.decoded_cap")
def steering_decoded_cap(ctx: Context) -> None:
    """Vectors of zeros that decode past x-caps.steering_decoded_bytes in all: 400 on the one that passes it."""
    hidden, cap = ctx.model.hidden_size, ctx.api.caps["steering_decoded_bytes"]
    positions = max(1, min(ctx.max_model_len, cap // (hidden * 4)))
    size = positions * hidden * 4
    count = cap // size + 1
    frame = _zeros(size)
    vectors = [tensors.wire(frame, [1, positions, hidden])] * count
    param = f"apply_steering_vectors[{count - 1}]"
    refused(
        ctx,
        post(ctx, _steer(ctx, *vectors)),
        f"{count} vectors of {size} bytes",
        steering_body(ctx.api, "decoded_cap", param, cap=cap, total=count * size),
    )


@robust("robust:steering.frames")
def steering_frames(ctx: Context) -> None:
    """One zstd frame and nothing after it, inflating to exactly its declared size: trailing bytes, a
    second frame, and a header that lies (the data inflates past it, or short of it) get 400."""
    hidden = ctx.model.hidden_size
    want = hidden * 4
    good = _zeros(want)
    cases = {
        "trailing bytes": good + b"junk",
        "a second frame": good + good,
        "inflating past its size": _declaring(_zeros(want + 4096), want),
        "inflating short of its size": _declaring(_zeros(want // 2), want),
    }
    param = "apply_steering_vectors[0]"
    for name, frame in cases.items():
        refused(
            ctx,
            post(ctx, _steer(ctx, tensors.wire(frame, [1, hidden]))),
            name,
            steering_body(ctx.api, "zstd", param),
        )
