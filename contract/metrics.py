"""x-metrics: what a deployment's /metrics must hold of vLLM's families, and the series vLLM
builds its token-count buckets from. Data only; the families' types, labels and fixed buckets
are a recorded vLLM scrape's (conformance/spec/vllm_metrics.json)."""

from __future__ import annotations

from typing import Any, NamedTuple


class MetricsContract(NamedTuple):
    required: tuple[str, ...]  # families every deployment exports
    optional: dict[str, tuple[str, ...]]  # vLLM version -> the other families it exports
    token_buckets: frozenset[str]  # families whose buckets are one_two_five(max_model_len)
    block_size: int  # the mock's KV cache: tokens a block
    num_gpu_blocks: int  # ... and blocks in all
    mock_leaves_out: dict[str, str]  # family -> why the mock cannot mean it

    @classmethod
    def from_raw(cls, raw: dict[str, Any]) -> MetricsContract:
        kv = raw["mock_kv_cache"]
        return cls(
            tuple(raw["required"]),
            {str(v): tuple(names) for v, names in raw["optional"].items()},
            frozenset(raw["token_buckets"]),
            int(kv["block_size"]),
            int(kv["num_gpu_blocks"]),
            dict(raw["mock_leaves_out"]),
        )

    @staticmethod
    def one_two_five(cap: int) -> list[float]:
        """1, 2, 5, 10, 20, 50, ... up to `cap`: a token-count family's buckets, as vLLM builds
        them from max_model_len (vllm/v1/metrics/buckets.py, build_1_2_5_buckets)."""
        out: list[float] = []
        scale = 1
        while True:
            for m in (1, 2, 5):
                if m * scale > cap:
                    return out
                out.append(float(m * scale))
            scale *= 10
