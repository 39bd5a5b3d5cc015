"""vLLM's metrics for what the mock simulates, by vLLM's names, beside the API's acs_*
(api_server/metrics.py) in the app's registry: the running batch and the waiting queue
(load.py), time to first token, time per output token, end-to-end latency, and the
prompt and generation tokens. The buckets are vLLM 0.32's (vllm/v1/metrics/buckets.py).
"""
from __future__ import annotations

from typing import NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
               240.0, 480.0, 960.0, 1920.0, 7680.0)
MODEL = ["model_name"]   # vLLM's label: the served model's name


class VllmMetrics:
    """vLLM's metrics of the mock, in the app's `registry` (api_server/metrics.py's new_registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             registry=registry, multiprocess_mode="livesum")
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             registry=registry, multiprocess_mode="livesum")
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              MODEL, registry=registry, buckets=TTFT_BUCKETS)
        self.tpot = Histogram("vllm:time_per_output_token_seconds",
                              "Histogram of time per output token in seconds (one value per request).",
                              MODEL, registry=registry, buckets=TPOT_BUCKETS)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             MODEL, registry=registry, buckets=E2E_BUCKETS)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", MODEL,
                                     registry=registry)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", MODEL,
                                         registry=registry)
        self._models: dict[str, ModelMetrics] = {}

    def model(self, name: str) -> ModelMetrics:
        """One model's metrics, their label children looked up once."""
        found = self._models.get(name)
        if found is None:
            found = self._models[name] = ModelMetrics(
                self.ttft.labels(name), self.tpot.labels(name), self.e2e.labels(name),
                self.prompt_tokens.labels(name), self.generation_tokens.labels(name))
        return found


class ModelMetrics(NamedTuple):
    ttft: Histogram
    tpot: Histogram
    e2e: Histogram
    prompt_tokens: Counter
    generation_tokens: Counter
