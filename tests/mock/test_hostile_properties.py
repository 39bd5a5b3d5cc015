"""Property-based hostile input (hypothesis): strings with lone surrogates and control
characters, huge and tiny numbers, deep nesting, random steering-vector headers and
frames. Through the core, nothing but an ApiError is ever raised; over HTTP against a
running mock, nothing but a 2xx or a 4xx in the error shape comes back. Example
counts are fixed and the runs derandomized, so CI time and outcomes are stable.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract import ApiError, encode_tensor, parse_json, spec
from tests.support.contract import CONTRACT
from tests.support.mock import AUTH

MODEL = spec().default_model
HIDDEN = spec().models[MODEL].hidden_size
FIELDS = sorted(spec().schema("CompletionRequest")["properties"])
CORE = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
OVER_HTTP = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)

# -- strategies ------------------------------------------------------------------------
surrogate = st.integers(0xD800, 0xDFFF).map(chr)
control = st.integers(0, 0x1F).map(chr) | st.sampled_from(
    ["\x7f", "\u2028", "\u2029", "\ufeff", "\ufffe"]
)
hostile_text = st.lists(st.characters() | surrogate | control, max_size=20).map("".join)
text = st.text(max_size=20) | hostile_text | st.sampled_from([MODEL, "", " ", "\\ud800"])
numbers = (
    st.integers(-(2**70), 2**70)
    | st.floats()
    | st.sampled_from([0, 1, -1, 2**63, -(2**63) - 1, 1e308, 5e-324, -0.0])
)
scalars = st.none() | st.booleans() | numbers | text
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """A frame: random bytes, or a real one mutated (header bytes flipped, cut, extended)."""
    kind = draw(st.sampled_from(["random", "flipped", "cut", "extended", "good"]))
    good = base64.b64decode(
        encode_tensor(np.zeros((1, HIDDEN), np.float32), "torch.float32")["data"]
    )
    if kind == "random":
        return draw(st.binary(max_size=64))
    if kind == "flipped":
        at = draw(st.integers(0, min(len(good), 18) - 1))
        return good[:at] + bytes([draw(st.integers(0, 255))]) + good[at + 1 :]
    if kind == "cut":
        return good[: draw(st.integers(0, len(good)))]
    if kind == "extended":
        return good + draw(st.binary(min_size=1, max_size=32))
    return good


@st.composite
def steering(draw: st.DrawFn) -> list[Any]:
    shape = draw(
        st.lists(st.integers(1, 2**40) | st.just(HIDDEN) | st.just(1), min_size=2, max_size=3)
    )
    data = base64.b64encode(draw(frames())).decode()
    acts = {
        "data": draw(st.just(data) | text),
        "dtype": draw(st.sampled_from(["float32", "float16", "int16"]) | text),
        "original_dtype": draw(
            st.sampled_from(["torch.float32", "torch.float16", "torch.bfloat16"])
        ),
        "shape": shape,
        "compression": "zstd",
    }
    vector: dict[str, Any] = {
        "activations": acts,
        "layer_indices": draw(st.lists(st.integers(0, 40), min_size=1, max_size=3, unique=True)),
    }
    if draw(st.booleans()):
        vector["position_indices"] = draw(st.lists(st.integers(0, 2**20), max_size=4))
    return [vector] * draw(st.integers(1, 3))


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """A request body as bytes: often close to valid, with hostile parts."""
    body: dict[str, Any] = {
        "model": draw(st.just(MODEL) | text),
        "prompt": draw(st.just("The sky") | text | values),
        "max_tokens": 1,
    }
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=3)):
        body[name] = draw(values)
    if draw(st.booleans()):
        body["apply_steering_vectors"] = draw(steering())
    if draw(st.booleans()):
        body[draw(text)] = draw(values)
    body["max_tokens"] = 1
    raw = json.dumps(body, ensure_ascii=draw(st.booleans()))  # NaN and Infinity as literals
    encoded = raw.encode("utf-8", "surrogatepass")  # raw ED A0 80 when not escaped
    depth = draw(st.sampled_from([0, 0, 0, 50, 5000, 100_000]))
    if depth:
        nested = b"[" * depth + b"]" * depth
        encoded = encoded[:-1] + b',"stop":' + nested + b"}"
    return encoded


# -- the core ----------------------------------------------------------------------------
def _core(raw: bytes) -> None:
    try:
        CONTRACT.validate_completion(parse_json(raw))
    except ApiError as error:
        out = json.dumps(CONTRACT.errors.body(error, "req_x"), ensure_ascii=False).encode(
            "utf-8"
        )  # encodable, always
        assert len(out) < 4096, out[:300]  # and small: no echo


@CORE
@given(bodies())
def test_the_core_raises_only_api_errors(raw: bytes) -> None:
    _core(raw)


@CORE
@given(steering())
def test_random_steering_vectors_raise_only_api_errors(vectors: list[Any]) -> None:
    _core(
        json.dumps(
            {"model": MODEL, "prompt": "a", "max_tokens": 1, "apply_steering_vectors": vectors}
        ).encode()
    )


@CORE
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_api_errors(raw: bytes) -> None:
    _core(raw)


def test_a_frame_declaring_far_more_than_it_holds_is_refused_without_allocating() -> None:
    """The frame parameters are read before anything is decoded (no MemoryError)."""
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"\0" * 16)
    fhd = frame[4]
    lying = frame[:4] + bytes([(fhd & 0x3F) | 0xE0]) + (1 << 40).to_bytes(8, "little") + frame[6:]
    acts = {
        "data": base64.b64encode(lying).decode(),
        "dtype": "float32",
        "original_dtype": "torch.float32",
        "shape": [1, HIDDEN],
        "compression": "zstd",
    }
    with pytest.raises(ApiError):
        CONTRACT.validate_completion(
            {
                "model": MODEL,
                "prompt": "a",
                "max_tokens": 1,
                "apply_steering_vectors": [{"activations": acts, "layer_indices": [0]}],
            }
        )


# -- over HTTP -----------------------------------------------------------------------------
ERROR_KEYS = {"message", "type", "param", "code"}


@OVER_HTTP
@given(bodies())
def test_the_mock_answers_hostile_bodies_with_2xx_or_the_error_shape(
    mock_url: str, raw: bytes
) -> None:
    response = httpx.post(
        mock_url + "/v1/completions",
        content=raw,
        timeout=60,
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert response.status_code < 500, response.text[:300]
    if response.status_code >= 400:
        data = response.json()
        assert set(data) == {"error", "request_id"} and set(data["error"]) == ERROR_KEYS
        assert data["request_id"] == response.headers["x-request-id"]
        assert len(response.content) < 4096
