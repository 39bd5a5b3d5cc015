"""Bad input is an ApiError, never another exception: seeded random bodies through the core."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from contract import ApiError, encode_tensor, spec
from tests.support.contract import CONTRACT

ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2.0,
    1.5,
    -0.5,
    1e300,
    -1e300,
    2**64,
    2**63,
    "",
    "2",
    "x",
    "-5",
    "99999999999999999999",
    [],
    [1],
    [1.0],
    [[1]],
    [[]],
    ["a"],
    [1, "a"],
    {},
    {"a": 1},
    [0.0, 1],
    [-1],
    [[1.0], [2]],
    {"include_usage": True},
    {"include_usage": None},
    [{}],
]


def _vectors() -> list[Any]:
    model = spec().models[spec().default_model]
    vec = {
        "activations": encode_tensor(np.zeros((1, model.hidden_size), np.float32), "torch.float32"),
        "layer_indices": [0],
    }
    acts = vec["activations"]
    return [
        [vec],
        [{**vec, "layer_indices": [1.0]}],
        [{**vec, "scale": None, "norm_match": None}],
        [{**vec, "activations": {**acts, "shape": [1.0, float(model.hidden_size)]}}],
        [{**vec, "activations": {**acts, "shape": [1, 0]}}],
        [{**vec, "activations": {**acts, "shape": [0, model.hidden_size]}}],
        [{**vec, "activations": {**acts, "original_dtype": None}}],
        [{**vec, "extra": 1}],
    ]


def test_random_bodies_raise_only_api_errors() -> None:
    props = list(spec().schema("CompletionRequest")["properties"])
    vocab = spec().models[spec().default_model].vocab_size
    values = ODD_VALUES + [[vocab - 1], [vocab]]
    vectors = _vectors()
    rng = random.Random(20261130)
    outcomes: dict[str, int] = {}
    for _ in range(4000):
        body: dict[str, Any] = {
            "model": spec().default_model,
            "prompt": rng.choice(["The sky is", [1, 2], [[1], [2]], ["a", "b"]]),
        }
        for _ in range(rng.randint(0, 4)):
            key = rng.choice(props)
            steer = key == "apply_steering_vectors" and rng.random() < 0.5
            body[key] = rng.choice(vectors) if steer else rng.choice(values)
        try:
            CONTRACT.validate_completion(body)
            outcome = "ok"
        except ApiError as exc:
            outcome = exc.code
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # The fuzz reaches both sides: some bodies pass, most are refused.
    assert outcomes.get("ok", 0) > 0 and outcomes.get("invalid_request", 0) > 1000
