"""Response bytes of seeded requests, pinned: a speed-up of the engine or of the
serialization must not change one byte (id and created masked).

tests/data/mock_bytes.json was recorded before the per-request cost work; regenerate
it (only for an intended change of output) with `python -m tests.mock.test_bytes`.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from contract import encode_tensor, spec
from mock_server import MockConfig, create_app
from tests.support.mock import AUTH

GOLDEN = Path(__file__).parents[1] / "data" / "mock_bytes.json"
MODEL = spec().models[spec().default_model]
VOLATILE = re.compile(rb'"id":"cmpl-[0-9a-f]+"|"created":[0-9]+')


def _steer() -> list[dict[str, Any]]:
    values = np.full((1, MODEL.hidden_size), 0.5, dtype=np.float32)
    return [
        {"activations": encode_tensor(values, "torch.float32"), "layer_indices": [3], "scale": 2.0}
    ]


def cases() -> list[dict[str, Any]]:
    base: list[dict[str, Any]] = [
        {"max_tokens": 16, "temperature": 0},
        {"max_tokens": 16, "seed": 1},
        {"max_tokens": 40, "seed": 2, "ignore_eos": True},
        {"max_tokens": 24, "seed": 3, "logprobs": 3},
        {"max_tokens": 24, "temperature": 0, "logprobs": 5, "echo": True},
        {"max_tokens": 12, "seed": 4, "echo": True},
        {"max_tokens": 30, "seed": 5, "stop": [" the", "."], "ignore_eos": True},
        {
            "max_tokens": 30,
            "seed": 6,
            "stop": ".",
            "include_stop_str_in_output": True,
            "ignore_eos": True,
        },
        {"max_tokens": 12, "seed": 7, "n": 3, "temperature": 0.9},
        {"max_tokens": 12, "seed": 8, "n": 2, "logprobs": 2, "return_token_ids": True},
        {"max_tokens": 10, "seed": 9, "prompt": ["The sky is", "Once upon a time"], "n": 2},
        {
            "max_tokens": 10,
            "seed": 10,
            "prompt": [[MODEL.bos_token_id, 791, 13180, 374]],
            "echo": True,
            "logprobs": 1,
        },
        {"max_tokens": 8, "seed": 11, "prompt_logprobs": 2, "return_token_ids": True},
        {
            "max_tokens": 8,
            "seed": 12,
            "min_tokens": 6,
            "stop_token_ids": [13],
            "skip_special_tokens": False,
        },
        {"max_tokens": 20, "seed": 13, "bad_words": ["the", "of"], "ignore_eos": True},
        {
            "max_tokens": 20,
            "seed": 14,
            "allowed_token_ids": [791, 13180, 374, 13],
            "ignore_eos": True,
        },
        {"max_tokens": 6, "seed": 15, "output_residual_stream": [1, 3]},
        {"max_tokens": 6, "temperature": 0, "apply_steering_vectors": _steer()},
        {"max_tokens": 200, "seed": 16, "ignore_eos": True, "logprobs": 0},
        {"max_tokens": 16, "top_k": 1, "seed": 17, "presence_penalty": 0.5},
    ]
    out = []
    for fields in base:
        out.append({"model": MODEL.name, "prompt": "The sky is", **fields})
    for fields in base[:10] + base[13:17]:
        out.append(
            {
                "model": MODEL.name,
                "prompt": "The sky is",
                **fields,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
    out.append(
        {
            "model": MODEL.name,
            "prompt": "Hi",
            "max_tokens": 9,
            "seed": 1,
            "n": 2,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    )
    out.append({"model": MODEL.name, "prompt": "Hi", "max_tokens": 9, "seed": 1, "stream": True})
    return out


def response_bytes(client: FlaskClient, body: dict[str, Any]) -> str:
    r = client.post("/v1/completions", json=body, headers=AUTH)
    data = VOLATILE.sub(b"", r.get_data())
    return f"{r.status_code} " + data.decode()


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def client() -> FlaskClient:
    return create_app(MockConfig()).test_client()


@pytest.mark.parametrize("i", range(len(cases())))
def test_response_bytes_are_unchanged(client: FlaskClient, i: int) -> None:
    expected = json.loads(GOLDEN.read_text())[i]
    got = response_bytes(client, cases()[i])
    assert len(got) == expected["length"] and digest(got) == expected["sha256"], got[:2000]


if __name__ == "__main__":
    c = create_app(MockConfig()).test_client()
    rows = []
    for body in cases():
        text = response_bytes(c, body)
        assert text.startswith("200 "), text[:500]
        rows.append({"length": len(text), "sha256": digest(text)})
        if len(sys.argv) > 1:  # a directory: the full bodies too, to compare by eye
            Path(sys.argv[1], f"{len(rows) - 1:02d}.txt").write_text(text)
    GOLDEN.write_text(json.dumps(rows, indent=0) + "\n")
    print(f"wrote {len(rows)} cases", file=sys.stderr)
