"""vLLM's metrics for what the mock simulates, by vLLM's names, beside the API's acs_*
(api_server/metrics.py) in the app's registry: every family of vLLM 0.32's that a mock can
mean (x-metrics in openapi.yaml lists them; the README says which it leaves out and why),
with vLLM's types, labels and buckets (vllm/v1/metrics/loggers.py and buckets.py; the
token-count histograms' buckets from max_model_len, as vLLM builds them). metered.py records
them per engine step; load.py and kv_cache.py keep the gauges.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from contract import MetricsContract, ModelInfo
from mock_server.hook.kv_cache import KvCache

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
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
LABELS = ["model_name", "engine"]  # vLLM's labels on every series: the served model, the engine
ENGINE = "0"  # one engine, as vLLM without data parallelism
FINISHED = ("stop", "length", "abort")  # vllm:request_success's finished_reason values the mock has
ADMISSION = "max_num_queued_reqs"  # vllm:admission_rejections' reason for the mock's queue limit
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")  # CacheHitSource
WAITING_REASONS = ("capacity", "deferred")
SLEEP_STATES = {"awake": 1, "weights_offloaded": 0, "discard_all": 0}  # the mock never sleeps


class VllmMetrics:
    """vLLM 0.32's metrics of the mock, by vLLM's names, types, labels and buckets
    (conformance/vllm_metrics.json, recorded from vLLM, holds them; metrics:vllm_families checks
    them), in the app's `registry`, for the served `models`. Every series of every served model
    shows from the start, at 0, as vLLM's do."""

    def __init__(
        self, registry: CollectorRegistry, models: Iterable[ModelInfo], kv: MetricsContract
    ) -> None:
        models = list(models)
        self.kv = kv
        gauge: dict[str, Any] = {"registry": registry, "multiprocess_mode": "livesum"}
        # set once and never moved: the most recent write of any worker (as vLLM marks them)
        fixed: dict[str, Any] = {"registry": registry, "multiprocess_mode": "mostrecent"}
        tokens = kv.one_two_five(max((m.max_model_len for m in models), default=1))

        def histogram(name: str, doc: str, buckets: Iterable[float]) -> Histogram:
            return Histogram(name, doc, LABELS, registry=registry, buckets=tuple(buckets))

        def counter(name: str, doc: str, labels: list[str] = LABELS) -> Counter:
            return Counter(name, doc, labels, registry=registry)

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
        self.waiting_by_reason = Gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA budget, "
            "KV transfer, blocked status). Sum of all reasons equals vllm:num_requests_waiting.",
            [*LABELS, "reason"],
            **gauge,
        )
        self.kv_cache = Gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            LABELS,
            **gauge,
        )
        self.sleep_state = Gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is "
            "awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
            [*LABELS, "sleep_state"],
            **fixed,
        )
        self.cache_config = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            ["block_size", "cache_dtype", "enable_prefix_caching", "num_gpu_blocks", "engine"],
            **fixed,
        )
        self.cache_config.labels(
            str(kv.block_size), "auto", "True", str(kv.num_gpu_blocks), ENGINE
        ).set(1)
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            TPOT_BUCKETS,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TPOT_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            E2E_BUCKETS,
        )
        self.queue = histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            E2E_BUCKETS,
        )
        self.prefill = histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            E2E_BUCKETS,
        )
        self.decode = histogram(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            E2E_BUCKETS,
        )
        self.inference = histogram(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            E2E_BUCKETS,
        )
        self.request_prompt = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.max_generation = histogram(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS
        )
        self.params_max_tokens = histogram(
            "vllm:request_params_max_tokens",
            "Histogram of the max_tokens request parameter.",
            tokens,
        )
        self.kv_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )
        self.request_preemptions = histogram(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            PREEMPTION_BUCKETS,
        )
        self.iteration = histogram(
            "vllm:iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_BUCKETS,
        )
        self.admission_rejections = counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ["model_name", "reason"],
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_by_source = counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [*LABELS, "source"],
        )
        self.prompt_cached = counter(
            "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        self.cached_by_source = counter(
            "vllm:prompt_tokens_cached_by_source",
            "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), "
            "host (offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
            "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
            "vllm:external_prefix_cache_hits.",
            [*LABELS, "source"],
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.success = counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*LABELS, "finished_reason"],
        )
        self._models = {m.name: self._model(m.name) for m in models}
        self._load = next(iter(self._models.values()), None)

    def _model(self, name: str) -> ModelMetrics:
        """Each of ModelMetrics' fields is the child of the metric of its name, labelled with
        the model and the engine; those with a label more are dicts of their children."""
        own = {
            "success",
            "rejections",
            "prompt_by_source",
            "cached_by_source",
            "waiting_by_reason",
            "kv",
        }
        series = {
            f: getattr(self, f).labels(name, ENGINE) for f in ModelMetrics._fields if f not in own
        }
        for state, value in SLEEP_STATES.items():
            self.sleep_state.labels(name, ENGINE, state).set(value)
        return ModelMetrics(
            **series,
            success={r: self.success.labels(name, ENGINE, r) for r in FINISHED},
            rejections=self.admission_rejections.labels(name, ADMISSION),
            prompt_by_source={
                s: self.prompt_by_source.labels(name, ENGINE, s) for s in PROMPT_SOURCES
            },
            cached_by_source={
                s: self.cached_by_source.labels(name, ENGINE, s) for s in CACHE_SOURCES
            },
            waiting_by_reason={
                r: self.waiting_by_reason.labels(name, ENGINE, r) for r in WAITING_REASONS
            },
            kv=KvCache(self.kv.block_size, self.kv.num_gpu_blocks),
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
            self._load.waiting_by_reason["capacity"].set(waiting)
            self._load.kv_cache.set(min(running / capacity, 1.0) if capacity else 0.0)


class ModelMetrics(NamedTuple):
    """One model's label children, looked up once (VllmMetrics._model: each field is the
    child of VllmMetrics' metric of the same name)."""

    ttft: Histogram
    itl: Histogram
    tpot: Histogram
    e2e: Histogram
    queue: Histogram
    prefill: Histogram
    decode: Histogram
    inference: Histogram
    request_prompt: Histogram
    request_generation: Histogram
    max_generation: Histogram
    params_n: Histogram
    params_max_tokens: Histogram
    kv_computed: Histogram
    request_preemptions: Histogram
    iteration: Histogram
    prompt_tokens: Counter
    prompt_cached: Counter
    prefix_queries: Counter
    prefix_hits: Counter
    preemptions: Counter
    generation_tokens: Counter
    running: Gauge
    waiting: Gauge
    kv_cache: Gauge
    success: dict[str, Counter]
    rejections: Counter
    prompt_by_source: dict[str, Counter]
    cached_by_source: dict[str, Counter]
    waiting_by_reason: dict[str, Gauge]
    kv: KvCache  # the model's KV cache in this worker process (each model its own engine)
