"""Deterministic residual-stream captures in vllm-lens's wire encoding.

A real capture of 8,192 Layers x tokens at hidden 4,096 is 64 MiB of bf16; the
mock must build it in well under a second. So each layer has a small seeded
table of rows, and a position's row is picked by its token id and position:
one numpy gather, no per-element Python. The values depend only on the model,
the layer, the token and the position, so the same request captures the same
tensor on every call and after a restart.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from contract import ModelInfo, encode_tensor

ROWS_PER_LAYER = 16


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bit patterns as int16 (round to nearest even)."""
    bits = values.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).view(np.int16)


def _spread(layer: Any) -> Any:
    """The standard deviation of a layer's values: it grows with depth."""
    return 0.05 + 0.02 * layer


def nominal_norm(model: ModelInfo, layer: int) -> float:
    """The L2 norm a position's row has at `layer`, about (what steering's strength is measured by)."""
    return float(_spread(layer)) * model.hidden_size**0.5


# Keyed by what shapes the table, so that a deployment's other layers or hidden size
# (the same hf_id) gets its own.
_TABLES: dict[tuple[str, int, int, str], np.ndarray] = {}


def _table(model: ModelInfo, storage: str) -> np.ndarray:
    key = (model.hf_id, model.num_layers, model.hidden_size, storage)
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES.setdefault(key, _build_table(model, np.dtype(storage)))
    return table


def _build_table(model: ModelInfo, storage: np.dtype) -> np.ndarray:
    """[num_layers, ROWS_PER_LAYER, hidden] in the wire dtype; the norm grows with depth."""
    seed = int.from_bytes(hashlib.sha256(f"residual:{model.hf_id}".encode()).digest()[:8], "little")
    rng = np.random.Generator(np.random.PCG64(seed))
    values = rng.standard_normal(
        (model.num_layers, ROWS_PER_LAYER, model.hidden_size), dtype=np.float32
    )
    values *= _spread(np.arange(model.num_layers, dtype=np.float32))[:, None, None]
    return _bf16_bits(values) if storage == np.int16 else values.astype(storage)


def warm(model: ModelInfo, wire: tuple[str, str]) -> None:
    """Build the model's table now (at start), not in the first request."""
    _table(model, wire[0])


# (layer, the residual stream there [positions, hidden] float32) -> what steering adds there
Addition = Callable[[int, np.ndarray], np.ndarray]


def _rows(model: ModelInfo, storage: str, layers: list[int], token_ids: list[int]) -> np.ndarray:
    table = _table(model, storage)
    tokens = np.asarray(token_ids, dtype=np.int64)
    positions = np.arange(len(tokens), dtype=np.int64)
    layer_ids = np.asarray(layers, dtype=np.int64)
    rows = (
        tokens[None, :] * 2654435761 + positions[None, :] * 40503 + layer_ids[:, None] * 97
    ) % ROWS_PER_LAYER
    return table[layer_ids[:, None], rows]


def capture(
    model: ModelInfo,
    wire: tuple[str, str],
    layers: list[int],
    token_ids: list[int],
    steered: tuple[list[int], Addition] | None = None,
) -> dict:
    """The encoded residual stream of `token_ids` (every prompt token and every
    generated token but the last) at `layers`: shape [len(layers), positions, hidden].
    `wire` is the model's (dtype on the wire, original_dtype): Spec.wire_dtypes; bf16
    travels as int16. `steered`: the layers steering adds to and what it adds; an
    addition stays in the residual stream of every later layer."""
    values = _rows(model, wire[0], layers, token_ids)
    if steered is not None:
        values = _steer(model, wire[0], layers, token_ids, values, *steered)
    return encode_tensor(values, wire[1])


def float32_values(values: np.ndarray) -> np.ndarray:
    """Values in their storage dtype (int16 holds bf16 bits) as float32."""
    if values.dtype == np.int16:  # bf16 bits
        return (values.astype(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return values.astype(np.float32)


def _steer(
    model: ModelInfo,
    storage: str,
    layers: list[int],
    token_ids: list[int],
    values: np.ndarray,
    steered_layers: list[int],
    add: Addition,
) -> np.ndarray:
    carried = np.zeros((len(token_ids), model.hidden_size), dtype=np.float32)
    added: list[tuple[int, np.ndarray]] = []  # (layer, what the stream carries from it on)
    for layer in sorted(set(steered_layers)):
        residual = float32_values(_rows(model, storage, [layer], token_ids)[0]) + carried
        carried = carried + add(layer, residual)
        added.append((layer, carried))
    out = float32_values(values)
    for i, layer in enumerate(layers):
        below = [c for at, c in added if at <= layer]
        if below:
            out[i] += below[-1]
    return _bf16_bits(out) if values.dtype == np.int16 else out.astype(values.dtype)
