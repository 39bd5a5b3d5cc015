"""The gate's one reading and writing of the API's wire tensors (captures, steering vectors):
base64 of one zstd frame of little-endian values, with a shape and a dtype.

The gate keeps its own, apart from the core's (contract/tensors.py): a server built on
the core would otherwise be judged by the decoder it shares, and a fault in it would
read back as right. Every decode is bounded by what the shape declares."""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from array import array
from typing import Any

import zstandard


class TensorError(ValueError):
    """A tensor that does not decode as its fields say."""


def frame(values: bytes) -> bytes:
    """One zstd frame of `values`, its content size declared."""
    return zstandard.ZstdCompressor(write_content_size=True).compress(values)


def wire(
    data: bytes, shape: list[int], dtype: str = "float32", original: str = "torch.float32"
) -> dict[str, Any]:
    """A tensor as the API sends it, over `data` (a zstd frame, or any bytes a check sends)."""
    return {
        "data": base64.b64encode(data).decode(),
        "dtype": dtype,
        "original_dtype": original,
        "shape": shape,
        "compression": "zstd",
    }


def encode_float32(values: list[float], shape: list[int]) -> dict[str, Any]:
    return wire(frame(struct.pack(f"<{len(values)}f", *values)), shape)


_DTYPE = re.compile(r"(?:b?float|u?int)(8|16|32|64)")


def itemsize(dtype: str) -> int:
    bits = _DTYPE.fullmatch(dtype) if isinstance(dtype, str) else None
    if bits is None:
        raise TensorError("the dtype is not a number type with its bit width (float32, int16, ...)")
    return int(bits.group(1)) // 8


def declared_bytes(tensor: dict[str, Any], most_values: int) -> int:
    """The bytes the tensor's shape and dtype declare, once the shape is counts that declare at
    most `most_values` values (the caller's bound: the server's shape is a claim, and the
    frame is decompressed up to what it declares)."""
    shape = tensor["shape"]
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise TensorError("the shape is not a list of whole numbers, each at least 0")
    if math.prod(shape) > most_values:
        raise TensorError(f"the shape declares more than {most_values} values")
    return math.prod(shape) * itemsize(tensor["dtype"])


def content(tensor: dict[str, Any], most_values: int) -> tuple[int | None, bytes]:
    """(the frame's declared content size, its bytes); nothing is decompressed past what the
    shape declares (a frame that declares more is refused before it is), and no shape is
    believed past `most_values` values."""
    try:
        want = declared_bytes(tensor, most_values)
        data = base64.b64decode(tensor["data"], validate=True)
        size = zstandard.frame_content_size(data)
        if size > want:
            raise TensorError(f"the frame declares {size} bytes, the shape and dtype {want}")
        raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=max(want, 1))
    except (TypeError, KeyError, binascii.Error, zstandard.ZstdError) as exc:
        raise TensorError(repr(exc)) from None
    except ValueError as exc:  # TensorError too
        raise TensorError(str(exc)) from None
    return (size if size >= 0 else None), raw


def values(tensor: dict[str, Any], most_values: int) -> tuple[list[int], list[float]]:
    """The tensor's shape and its values, in order (as many as decode: the caller holds
    them to the shape); a shape past `most_values` values is refused undecoded."""
    try:
        raw = content(tensor, most_values)[1]
        return list(tensor["shape"]), floats(raw, tensor["dtype"])
    except (TypeError, KeyError, ValueError) as exc:
        raise TensorError(str(exc)) from None


def floats(raw: bytes, dtype: str) -> list[float]:
    if dtype == "int16":  # bf16 bits: the high half of a float32
        bits = array("H")
        bits.frombytes(raw)
        wide = array("I", (b << 16 for b in bits))
        out = array("f")
        out.frombytes(wide.tobytes())
        return out.tolist()
    code = {"float16": "e", "float32": "f"}.get(dtype)
    if code is None:
        raise TensorError(f"no float dtype {dtype!r}")
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(code)}{code}", raw))
