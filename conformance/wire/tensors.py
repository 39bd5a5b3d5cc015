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


def itemsize(dtype: str) -> int:
    bits = re.search(r"\d+", dtype)
    if bits is None:
        raise TensorError(f"no bit width in dtype {dtype!r}")
    return int(bits.group()) // 8


def declared_bytes(tensor: dict[str, Any]) -> int:
    """The bytes the tensor's shape and dtype declare."""
    return math.prod(int(n) for n in tensor["shape"]) * itemsize(tensor["dtype"])


def content(tensor: dict[str, Any]) -> tuple[int | None, bytes]:
    """(the frame's declared content size, its bytes); nothing is decompressed past what the
    shape declares (a frame that declares more is refused before it is)."""
    try:
        want = declared_bytes(tensor)
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


def values(tensor: dict[str, Any]) -> tuple[list[int], list[float]]:
    """The tensor's shape and its values, in order (as many as decode: the caller holds
    them to the shape)."""
    try:
        shape = [int(n) for n in tensor["shape"]]
        return shape, floats(content(tensor)[1], tensor["dtype"])
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
