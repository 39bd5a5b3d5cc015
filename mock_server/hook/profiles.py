"""Named load profiles: a model on a GPU, as the load model (load.py) plays it.

Each profile is a set of the mock's settings (MockConfig's fields) that `--load-profile`
puts under the options and MOCK_* variables (either overrides any of them), and the
source of each number. The timing follows llm-d's inference-sim's `per-token` latency
calculator: TTFT = time in the queue + prefill overhead + prompt tokens x prefill time
per token; a decode step = inter-token latency x a factor that grows linearly from 1
(one running sequence) to time-factor-under-load (full_load_seqs running: the batch
inference-sim's factor was measured at, which a smaller --max-num-seqs does not change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# vLLM 0.32's defaults for a GPU of >= 70 GiB that is not an A100 (H100, H200):
# vllm/engine/arg_utils.py, EngineArgs._set_default_args: default_max_num_seqs 1024.
VLLM_H100_MAX_NUM_SEQS = 1024
# llm-d inference-sim's docs, "Suggested Default Profiles", profile 1 "8B-class model on
# H100, balanced load" (manifests/latency-profiles/8b-h100-balanced-per-token.yaml):
# prefill-overhead 30ms, prefill-time-per-token 250us, inter-token-latency 12ms (std-dev
# 2ms), time-factor-under-load 2.0. Its caveat: order-of-magnitude estimates.
SIM_8B_H100 = {
    "ttft_ms": 30.0,
    "prefill_ms_per_token": 0.25,
    "tpot_ms": 12.0,
    "time_factor_under_load": 2.0,
    "jitter": round(2 / 12, 3),
}
# Decode of an 8B model is bound by memory bandwidth: an H200 reads HBM3e at 4.8 TB/s,
# an H100 SXM HBM3 at 3.35 TB/s (NVIDIA's H200 and H100 datasheets), so a decode step
# takes 3.35/4.8 of the H100's. Prefill is bound by compute, the same on both (989 dense
# BF16 TFLOPS in both datasheets), so it stays.
H200_DECODE_SCALE = 3.35 / 4.8


@dataclass(frozen=True)
class Profile:
    name: str
    what: str
    settings: dict[str, Any] = field(default_factory=dict)
    sources: str = ""


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in [
        Profile(
            "llama-8b-h100",
            "Llama 3.1 8B (BF16) on one H100 SXM, vLLM's defaults",
            {
                **SIM_8B_H100,
                "max_num_seqs": VLLM_H100_MAX_NUM_SEQS,
                "full_load_seqs": VLLM_H100_MAX_NUM_SEQS,
            },
            "inference-sim's 8B-on-H100 per-token profile; vLLM 0.32's max_num_seqs for H100/H200",
        ),
        Profile(
            "llama-8b-h200",
            "Llama 3.1 8B (BF16) on one H200, vLLM's defaults",
            {
                **SIM_8B_H100,
                "tpot_ms": round(SIM_8B_H100["tpot_ms"] * H200_DECODE_SCALE, 2),
                "max_num_seqs": VLLM_H100_MAX_NUM_SEQS,
                "full_load_seqs": VLLM_H100_MAX_NUM_SEQS,
            },
            "llama-8b-h100 with its decode step scaled by HBM bandwidth (H100 3.35 TB/s, H200 4.8 TB/s)",
        ),
    ]
}
