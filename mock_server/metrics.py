"""vLLM's metrics for what the mock simulates, by vLLM's names, beside the API's acs_*
(api_server/metrics.py) in the app's registry: the running batch and the waiting queue
(load.py), the KV cache's share in use and the requests the queue limit refused; time to
first token, between tokens (one value a step), per output token (one value a request),
in the queue, prefill, decode, inference and end to end; the prompt and generation
tokens, and the requests finished by reason. The buckets are vLLM 0.32's
(vllm/v1/metrics/loggers.py; conformance/vllm_metrics.json records them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
TPOT_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
LABELS = [
    "model_name",
    "engine",
]  # vLLM's labels on every series: the served model, the engine's index
ENGINE = "0"  # one engine, as vLLM without data parallelism
FINISHED = ("stop", "length", "abort")  # vllm:request_success's finished_reason values the mock has
ADMISSION = (
    "max_num_queued_reqs"  # vllm:admission_rejections' reason for the mock's one queue limit
)


class VllmMetrics:
    """vLLM 0.32's metrics of the mock, by vLLM's names, types, labels and buckets
    (conformance/vllm_metrics.json, recorded from vLLM, holds them; metrics:vllm_families checks
    them), in the app's `registry`. Every series of every served model shows from the start,
    at 0, as vLLM's do."""

    def __init__(self, registry: CollectorRegistry, models: Iterable[str]) -> None:
        gauge: dict[str, Any] = {"registry": registry, "multiprocess_mode": "livesum"}
        self.running = Gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            LABELS,
            **gauge,
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            LABELS,
            **gauge,
        )
        self.kv_cache = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            LABELS,
            **gauge,
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            LABELS,
            registry=registry,
            buckets=TTFT_BUCKETS,
        )
        self.tpot = Histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            LABELS,
            registry=registry,
            buckets=TPOT_BUCKETS,
        )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            LABELS,
            registry=registry,
            buckets=E2E_BUCKETS,
        )
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            LABELS,
            registry=registry,
            buckets=TPOT_BUCKETS,
        )
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            LABELS,
            registry=registry,
            buckets=E2E_BUCKETS,
        )
        self.prefill = Histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            LABELS,
            registry=registry,
            buckets=E2E_BUCKETS,
        )
        self.decode = Histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            LABELS,
            registry=registry,
            buckets=E2E_BUCKETS,
        )
        self.inference = Histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            LABELS,
            registry=registry,
            buckets=E2E_BUCKETS,
        )
        self.admission_rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=registry
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            LABELS,
            registry=registry,
        )
        self.success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ["model_name", "engine", "finished_reason"],
            registry=registry,
        )
        self._models = {name: self._model(name) for name in models}
        self._load = next(iter(self._models.values()), None)

    def _model(self, name: str) -> ModelMetrics:
        """Each of ModelMetrics' fields is the child of the metric of its name, labelled with
        the model and the engine; but success (one child a finished reason) and rejections."""
        own = {"success", "rejections"}
        return ModelMetrics(
            **{
                f: getattr(self, f).labels(name, ENGINE)
                for f in ModelMetrics._fields
                if f not in own
            },
            success={reason: self.success.labels(name, ENGINE, reason) for reason in FINISHED},
            rejections=self.admission_rejections.labels(name, ADMISSION),
        )

    def model(self, name: str) -> ModelMetrics:
        """One model's metrics, their label children looked up once."""
        found = self._models.get(name)
        if found is None:
            found = self._models[name] = self._model(name)
        return found

    def rejected(self) -> None:
        """A request the load model's queue limit refused (counted on the first served model,
        as the load model's gauges: one engine)."""
        if self._load is not None:
            self._load.rejections.inc()

    def load(self, running: int, waiting: int, capacity: int) -> None:
        """The load model's batch and queue (one engine: the first served model's series), and
        the KV cache as the share of the batch's sequence slots in use."""
        if self._load is not None:
            self._load.running.set(running)
            self._load.waiting.set(waiting)
            self._load.kv_cache.set(min(running / capacity, 1.0) if capacity else 0.0)


class ModelMetrics(NamedTuple):
    """One model's label children, looked up once (VllmMetrics._model: each field is the
    child of VllmMetrics' metric of the same name)."""

    ttft: Histogram
    tpot: Histogram
    e2e: Histogram
    itl: Histogram
    queue: Histogram
    prefill: Histogram
    decode: Histogram
    inference: Histogram
    prompt_tokens: Counter
    generation_tokens: Counter
    success: dict[str, Counter]
    running: Gauge
    waiting: Gauge
    kv_cache: Gauge
    rejections: Counter
