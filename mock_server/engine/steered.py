"""What steering vectors do in the fake engine, by vllm-lens's arithmetic.

vllm-lens adds `scale` x the vector (rescaled to the residual's L2 norm with
`norm_match`) to the output of each layer it names, at every position (a 2-D
vector) or at the positions it lists (3-D). So a vector of zeros, or any vector
at scale 0, adds nothing and the continuation is the one without steering.

The fake engine's residual stream (activations.py) carries the additions forward to
every later layer, and its distributions (model.py) feel them through their strength, the
added norm over the residual's norm, felt by every position from the first it reaches on:
a position's distribution is the one its key mixed with the vector's direction gives (the
direction and layers decide which, not the magnitude) with chance 1 - exp(-strength), on a
uniform of the direction and the position alone, so a stronger push moves every position a
weaker one does, and more. Prompt rows and generated tokens read the same positions.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import numpy as np

from contract import ModelInfo
from contract.tensors import SteeringVector
from mock_server.engine.activations import float32_values, nominal_norm
from mock_server.engine.model import mix

EPS = 1e-6  # vllm-lens's norm_match: steering * (|residual| / (|steering| + eps))


def _rows(v: SteeringVector, k: int, positions: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions it reaches below `positions`, their rows [len, hidden]) for layer entry k."""
    values = float32_values(v.values)[k]
    if values.ndim == 1:
        return np.arange(positions), np.broadcast_to(values, (positions, values.shape[-1]))
    at = np.asarray(v.position_indices if v.position_indices is not None else range(len(values)))
    keep = at < positions
    return at[keep], values[keep]


def additions(steering: list[SteeringVector], layer: int, residual: np.ndarray) -> np.ndarray:
    """What the vectors add at `layer` to `residual` ([positions, hidden] float32)."""
    out = np.zeros_like(residual)
    for v in steering:
        if layer not in v.layer_indices or v.scale == 0:
            continue
        at, rows = _rows(v, v.layer_indices.index(layer), len(residual))
        if v.norm_match:
            norms = np.linalg.norm(residual[at], axis=-1, keepdims=True)
            rows = rows * (norms / (np.linalg.norm(rows, axis=-1, keepdims=True) + EPS))
        out[at] += rows * np.float32(v.scale)
    return out


def _strengths(steering: list[SteeringVector], model: ModelInfo, positions: int) -> np.ndarray:
    """Per position, the added norm over the residual's (norm_match: |scale|)."""
    out = np.zeros(positions)
    for v in steering:
        for k, layer in enumerate(v.layer_indices):
            at, rows = _rows(v, k, positions)
            if v.norm_match:
                push = np.where(np.linalg.norm(rows, axis=-1) > 0, abs(v.scale), 0.0)
            else:
                push = np.linalg.norm(rows, axis=-1) * abs(v.scale) / nominal_norm(model, layer)
            np.add.at(out, at, push)
    return out


def _direction(steering: list[SteeringVector]) -> bytes:
    """What decides the replacing tokens: each vector's direction and layers, not its size."""
    h = hashlib.sha256()
    for v in steering:
        values = float32_values(v.values)
        peak = float(np.abs(values).max())
        h.update((values / peak if peak else values).astype(np.float32).tobytes())
        h.update(
            repr(
                (v.layer_indices, v.position_indices, v.norm_match, math.copysign(1, v.scale))
            ).encode()
        )
    return h.digest()


Steer = Callable[[int, int], int]  # (position, its key) -> the key its distribution has


def steerer(steering: list[SteeringVector], model: ModelInfo, positions: int) -> Steer | None:
    """What steering does to each of `positions` positions; None when it adds nothing."""
    if not steering:
        return None
    strength = _strengths(steering, model, positions)
    if not strength.any():
        return None
    felt = np.maximum.accumulate(strength)  # a position sees every position before it
    chance = 1 - np.exp(-felt)
    direction = _direction(steering)
    moved = (
        np.random.Generator(np.random.PCG64(int.from_bytes(direction, "little"))).random(
            len(chance)
        )
        < chance
    )
    turn = int.from_bytes(direction[:8], "little")

    def steer(position: int, key: int) -> int:
        return mix(key, turn) if moved[position] else key

    return steer
