"""vllm-lens steering vectors: decode and check each one against the model.

A bad vector must be a 400 here, never an exception later: in vLLM a wrong
hidden size breaks the other requests of the same batch.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from contract.errors import Message, RuleViolation, rule_error
from contract.spec import ModelInfo, Spec

_BF16_EXPONENT = 0x7F80  # all exponent bits set: inf or NaN


@dataclass(frozen=True)
class SteeringVector:
    values: np.ndarray  # storage dtype (int16 holds bf16 bits), the declared shape
    original_dtype: str
    layer_indices: tuple[int, ...]
    scale: float
    norm_match: bool
    position_indices: tuple[int, ...] | None
    wire: dict[str, Any]  # the object as the client sent it, for Inference


def decode_vectors(
    vectors: list[dict[str, Any]], model: ModelInfo, api: Spec
) -> list[SteeringVector]:
    """Every vector decoded; their decoded bytes in all stay under x-caps.steering_decoded_bytes,
    checked from the shapes before anything is decompressed."""
    decoded, out = 0, []
    for i, v in enumerate(vectors):
        vector = decode_vector(v, model, api, f"apply_steering_vectors[{i}]", decoded)
        decoded += vector.values.nbytes
        out.append(vector)
    return out


def decode_vector(
    obj: dict[str, Any], model: ModelInfo, api: Spec, param: str, decoded_before: int = 0
) -> SteeringVector:
    """One vector, against `spec`'s steering_vector rule and caps; `decoded_before` is what
    the request's earlier vectors decoded to."""
    rule = api.model_rules["steering_vector"]

    def bad(reason: str, **fields: Any) -> RuleViolation:
        return rule_error(
            rule, param, param=param, reason=Message(text=rule["reasons"][reason], fields=fields)
        )

    _check_shape(obj, model, rule, bad)
    acts = obj["activations"]
    dtype, original, shape = acts["dtype"], acts["original_dtype"], acts["shape"]
    # The sizes, from the shape alone, against the cap: nothing is decoded yet.
    total = decoded_before + _decoded_size(shape, dtype)
    cap = api.caps["steering_decoded_bytes"]
    if total > cap:
        raise bad("decoded_cap", cap=cap, total=total)
    layers = obj["layer_indices"]
    positions = obj.get("position_indices")
    defaults = api.defaults("SteeringVector")  # a field left out or null
    scale = obj.get("scale")
    scale = defaults["scale"] if scale is None else scale
    if not math.isfinite(scale):
        raise bad("scale")
    values = _decode_values(acts["data"], dtype, shape, bad)
    norm_match = obj.get("norm_match")
    return SteeringVector(
        values,
        original,
        tuple(layers),
        float(scale),
        defaults["norm_match"] if norm_match is None else norm_match,
        tuple(positions) if positions is not None else None,
        obj,
    )


def _check_shape(
    obj: dict[str, Any], model: ModelInfo, rule: dict[str, Any], bad: Callable[..., RuleViolation]
) -> None:
    """Layers, dtype pair, rows, hidden size and positions, before any data is decoded."""
    acts = obj["activations"]
    dtype, original, shape = acts["dtype"], acts["original_dtype"], acts["shape"]
    layers = obj["layer_indices"]
    for layer in layers:
        if layer >= model.num_layers:
            raise bad("layer", layer=layer, num_layers=model.num_layers)
    if rule["dtype_pairs"][dtype] != original:
        raise bad("dtype_pair", dtype=dtype, original_dtype=original)
    if shape[0] != len(layers):
        raise bad("rows", rows=shape[0], layers=len(layers))
    if shape[-1] != model.hidden_size:
        raise bad("hidden", got=shape[-1], hidden_size=model.hidden_size)
    positions = obj.get("position_indices")
    if positions is not None:
        if len(shape) != 3:
            raise bad("positions_2d")
        if len(positions) != shape[1]:
            raise bad("positions_count", got=len(positions), want=shape[1])
    if len(shape) == 3 and shape[1] > model.max_model_len:
        raise bad("positions", got=shape[1], max_model_len=model.max_model_len)


def _decoded_size(shape: list[int], dtype: str) -> int:
    """The bytes a vector decodes to, from its declared shape and dtype alone."""
    return math.prod(shape) * np.dtype(dtype).itemsize


def _decode_values(
    data: str, dtype: str, shape: list[int], bad: Callable[..., RuleViolation]
) -> np.ndarray:
    """base64 -> one zstd frame of exactly the shape's bytes -> finite values."""
    want = _decoded_size(shape, dtype)
    try:
        frame = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise bad("base64") from None
    try:
        size = zstandard.get_frame_parameters(frame).content_size
    except zstandard.ZstdError:
        raise bad("zstd") from None
    if size == zstandard.CONTENTSIZE_UNKNOWN:
        raise bad("zstd")
    if size != want:
        raise bad("length", got=size, want=want)
    try:
        # One-shot into a buffer of the declared size (checked above): a frame that inflates
        # past it, or short of it, fails here; anything after the one frame is refused.
        raw = zstandard.ZstdDecompressor().decompress(
            frame, max_output_size=want, allow_extra_data=False
        )
    except zstandard.ZstdError:
        raise bad("zstd") from None
    if len(raw) != want:
        raise bad("length", got=len(raw), want=want)
    values = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
    if dtype == "int16":
        finite = not np.any((values.view(np.uint16) & _BF16_EXPONENT) == _BF16_EXPONENT)
    else:
        finite = bool(np.isfinite(values).all())
    if not finite:
        raise bad("finite")
    return values


def encode_tensor(values: np.ndarray, original_dtype: str) -> dict[str, Any]:
    """vllm-lens's wire form of a tensor (the inverse of the decoding above)."""
    little = values.astype(values.dtype.newbyteorder("<"), copy=False)
    frame = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(little.tobytes())
    return {
        "data": base64.b64encode(frame).decode("ascii"),
        "dtype": str(values.dtype),
        "original_dtype": original_dtype,
        "shape": list(values.shape),
        "compression": "zstd",
    }
