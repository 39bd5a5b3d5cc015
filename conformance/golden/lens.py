"""lens.yaml: vllm-lens' fields (captures and steering vectors), their shapes and layers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from conformance.golden.cases import PROMPT, Cases, case, error
from contract.tensors import encode_tensor


class LensCases(Cases):
    """lens.yaml: steering vectors."""

    def lens(self) -> Iterator[dict[str, Any]]:
        m, t = self.model, ["lens", "steering", "validation"]
        rule = self.api.model_rules["steering_vector"]
        b = {"model": m.name, "prompt": PROMPT, "max_tokens": 1}
        pairs = rule["dtype_pairs"]
        hidden = m.hidden_size
        for dtype, original in pairs.items():
            good = _vector(
                np.zeros((2, hidden), dtype=dtype), original, [0, m.num_layers - 1], scale=2.0
            )
            yield case(
                f"steering.ok.{dtype}",
                "a valid vector",
                t,
                {**b, "apply_steering_vectors": [good]},
                200,
                generates=1,
            )
        yield case(
            "steering.ok.positions",
            "a 3-D vector with positions",
            t,
            {
                **b,
                "apply_steering_vectors": [
                    _vector(
                        np.zeros((1, 2, hidden), dtype=np.float16),
                        pairs["float16"],
                        [1],
                        position_indices=[0, 3],
                    )
                ],
            },
            200,
            generates=1,
        )
        yield from self._bad_vectors(b, t)  # the same tags list: the YAML refers to it

    def _bad_vectors(self, b: dict[str, Any], t: list[str]) -> Iterator[dict[str, Any]]:
        """One case per reason the steering_vector rule gives."""
        m = self.model
        rule = self.api.model_rules["steering_vector"]
        pairs = rule["dtype_pairs"]
        hidden = m.hidden_size
        vec = _vector

        def bad(label: str, vector: dict[str, Any], reason: str, **fields: Any) -> dict[str, Any]:
            param = "apply_steering_vectors[0]"
            message = rule["message"].format(
                param=param, reason=rule["reasons"][reason].format(**fields)
            )
            return case(
                f"steering.{label}",
                f"steering vector: {reason}",
                t,
                {**b, "apply_steering_vectors": [vector]},
                400,
                error(rule["code"], message, param, self.api),
            )

        f32 = np.zeros((1, hidden), dtype=np.float32)
        yield bad(
            "hidden",
            vec(np.zeros((1, hidden - 1), dtype=np.float32), pairs["float32"], [0]),
            "hidden",
            got=hidden - 1,
            hidden_size=hidden,
        )
        yield bad(
            "rows",
            vec(np.zeros((2, hidden), dtype=np.float32), pairs["float32"], [0]),
            "rows",
            rows=2,
            layers=1,
        )
        yield bad(
            "layer",
            vec(f32, pairs["float32"], [m.num_layers]),
            "layer",
            layer=m.num_layers,
            num_layers=m.num_layers,
        )
        mismatch = vec(f32, pairs["float32"], [0])
        mismatch["activations"]["original_dtype"] = pairs["int16"]
        yield bad(
            "dtype_pair", mismatch, "dtype_pair", dtype="float32", original_dtype=pairs["int16"]
        )
        not_b64 = vec(f32, pairs["float32"], [0])
        not_b64["activations"]["data"] = "not base64!"
        yield bad("base64", not_b64, "base64")
        not_zstd = vec(f32, pairs["float32"], [0])
        not_zstd["activations"]["data"] = "aGVsbG8gd29ybGQ="
        yield bad("zstd", not_zstd, "zstd")
        short = vec(np.zeros((1, hidden // 2), dtype=np.float32), pairs["float32"], [0])
        short["activations"]["shape"] = [1, hidden]
        yield bad("length", short, "length", got=hidden // 2 * 4, want=hidden * 4)
        nan = vec(np.full((1, hidden), np.nan, dtype=np.float32), pairs["float32"], [0])
        yield bad("finite", nan, "finite")
        bf16_inf = vec(np.full((1, hidden), 0x7F80, dtype=np.int16), pairs["int16"], [0])
        yield bad("finite_bf16", bf16_inf, "finite")
        yield bad(
            "positions_2d", vec(f32, pairs["float32"], [0], position_indices=[0]), "positions_2d"
        )
        yield bad(
            "positions_count",
            vec(
                np.zeros((1, 2, hidden), dtype=np.float32),
                pairs["float32"],
                [0],
                position_indices=[0],
            ),
            "positions_count",
            got=1,
            want=2,
        )


def _vector(values: np.ndarray, original: str, layers: list[int], **extra: Any) -> dict[str, Any]:
    """A steering vector in the wire encoding."""
    return {"activations": encode_tensor(values, original), "layer_indices": layers, **extra}
