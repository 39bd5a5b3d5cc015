"""The mock's vLLM metrics as vLLM records them (issue 65): every family a mock can mean, each
child's inter-token latencies exactly, the counters moving as a stream's tokens leave, the
running and KV gauges without the load model, and a prefix cache that shares prompts' blocks."""

from __future__ import annotations

import threading
import time

import httpx
from prometheus_client import generate_latest

from api_server.app import METRICS_PATH
from api_server.metrics import new_registry
from conformance.spec.metrics import families, load
from contract import Contract, spec
from gallery.engines import Stepped
from mock_server import MockConfig, create_app
from mock_server.hook.metered import Metered, RequestClock
from mock_server.hook.metrics import VllmMetrics
from tests.support.metrics import value
from tests.support.mock import AUTH, completion_body
from tests.support.wsgi import serve

API = spec()
MODEL = API.default_model
SERIES = {"model_name": MODEL, "engine": "0"}
KV = API.metrics
COMPLETIONS = API.completions_path


def scripted(lengths: list[int], stream: bool) -> str:
    registry = new_registry()
    metrics = VllmMetrics(registry, [API.models[MODEL]], KV)
    req = Contract(API).validate_completion(
        {"model": MODEL, "prompt": "The sky is", "n": len(lengths), "max_tokens": 30}
    )
    engine = Metered(Stepped(lengths), metrics, MODEL, RequestClock(timed=True))
    events = engine.stream(req, "r", 60.0) if stream else engine.generate(req, "r")
    for _ in events:
        pass
    return generate_latest(registry).decode()


def test_each_child_has_an_inter_token_latency_for_each_token_after_its_first() -> None:
    """n 4 with choices of 20, 23, 2 and 13 tokens: 54 gaps, not 4 x 22 (issue 65)."""
    lengths = [20, 23, 2, 13]
    for stream in (True, False):
        text = scripted(lengths, stream)
        assert value(text, "vllm:inter_token_latency_seconds_count", **SERIES) == sum(
            k - 1 for k in lengths
        )
        assert value(text, "vllm:time_to_first_token_seconds_count", **SERIES) == len(lengths)
        assert value(text, "vllm:generation_tokens_total", **SERIES) == sum(lengths)
        # one a child: its own length; one a parent: n and its longest child
        assert value(text, "vllm:request_generation_tokens_count", **SERIES) == len(lengths)
        assert value(text, "vllm:request_generation_tokens_sum", **SERIES) == sum(lengths)
        assert value(text, "vllm:request_params_n_sum", **SERIES) == len(lengths)
        assert value(text, "vllm:request_params_n_count", **SERIES) == 1
        assert value(text, "vllm:request_max_num_generation_tokens_sum", **SERIES) == max(lengths)
        assert value(text, "vllm:request_success_total", finished_reason="stop", **SERIES) == 4


def test_every_family_a_mock_can_mean_is_vllms_from_the_start() -> None:
    """Each family x-metrics names, less those the mock leaves out (and says why), with vLLM's
    type, labels and buckets (the token counts' up to the model's max_model_len), before any
    request."""
    with httpx.Client(
        transport=httpx.WSGITransport(app=create_app(MockConfig())), base_url="http://m"
    ) as c:
        got = families(c.get(METRICS_PATH).text)
    want = {n: f for n, f in load()["families"].items() if n not in KV.mock_leaves_out}
    assert set(got) == set(want)
    for name, family in want.items():
        if name in KV.token_buckets:
            family = {**family, "buckets": KV.one_two_five(API.models[MODEL].max_model_len)}
        if family["labels"] is None:  # an _info family: its labels are its configuration
            family = {**family, "labels": got[name]["labels"]}
        assert got[name] == family, name


def scrape(url: str) -> str:
    return httpx.get(url + METRICS_PATH, timeout=30).text


def test_the_counters_and_the_gauges_move_while_a_stream_goes() -> None:
    """At each scrape during a paced stream of n 2, the generation tokens are what its client has
    received (the next step, 250 ms away, not yet begun), the first tokens are timed, the
    inter-token count is the steps so far, and without the load model the running sequences
    and the KV cache's share show it (issue 65: all stood still until the end)."""
    n, tokens = 2, 6
    body = completion_body(max_tokens=tokens, ignore_eos=True, min_tokens=tokens, n=n, stream=True)
    prompt = Contract(API).validate_completion(body).prompt_token_counts[0]
    blocks = n * -(-(prompt + 1) // KV.block_size)  # (at most: the siblings share full blocks)
    with serve(create_app(MockConfig(tpot_ms=250))) as url:
        seen: list[tuple[int, str]] = []
        with httpx.stream("POST", url + COMPLETIONS, json=body, headers=AUTH, timeout=60) as r:
            received = 0
            for line in r.iter_lines():
                if line.startswith("data: {") and '"text"' in line:
                    received += 1
                    if received % n == 0 and received < n * tokens:  # a whole step in
                        seen.append((received, scrape(url)))
        after = scrape(url)
    assert len(seen) == tokens - 1
    for got, text in seen:
        assert value(text, "vllm:generation_tokens_total", **SERIES) == got
        assert value(text, "vllm:time_to_first_token_seconds_count", **SERIES) == n
        assert value(text, "vllm:inter_token_latency_seconds_count", **SERIES) == got - n
        assert value(text, "vllm:num_requests_running", **SERIES) == n
        share = value(text, "vllm:kv_cache_usage_perc", **SERIES)
        assert 0 < share <= blocks / KV.num_gpu_blocks
        assert value(text, "vllm:request_success_total", finished_reason="length", **SERIES) == 0
    assert value(after, "vllm:generation_tokens_total", **SERIES) == n * tokens
    assert value(after, "vllm:num_requests_running", **SERIES) == 0
    assert value(after, "vllm:kv_cache_usage_perc", **SERIES) == 0
    assert value(after, "vllm:request_success_total", finished_reason="length", **SERIES) == n


def test_prompts_that_share_a_prefix_share_its_cached_blocks() -> None:
    """vLLM's prefix cache: full blocks of a prompt seen before are hits, the last token always
    computed; n siblings find the first one's blocks; another prompt finds none."""
    contract = Contract(API)
    long = {"prompt": list(range(1, 3 * KV.block_size + 5)), "max_tokens": 1}
    length = len(long["prompt"])
    with httpx.Client(
        transport=httpx.WSGITransport(app=create_app(MockConfig())),
        base_url="http://m",
        headers=AUTH,
    ) as c:
        for body in (long, long, {**long, "n": 2}, {"prompt": [9] * 20, "max_tokens": 1}):
            assert c.post(COMPLETIONS, json=completion_body(**body)).status_code == 200
        text = c.get(METRICS_PATH).text
    hit = (length - 1) // KV.block_size * KV.block_size
    assert contract.validate_completion(completion_body(**long)).prompt_token_counts == [length]
    # the first misses; the second hits; the third's two children hit; the short one misses
    assert value(text, "vllm:prefix_cache_queries_total", **SERIES) == 4 * length + 20
    assert value(text, "vllm:prefix_cache_hits_total", **SERIES) == 3 * hit
    assert value(text, "vllm:prompt_tokens_cached_total", **SERIES) == 3 * hit
    assert (
        value(text, "vllm:prompt_tokens_by_source_total", source="local_cache_hit", **SERIES)
        == 3 * hit
    )
    assert (
        value(text, "vllm:prompt_tokens_by_source_total", source="local_compute", **SERIES)
        == 4 * length + 20 - 3 * hit
    )
    assert value(text, "vllm:prompt_tokens_total", **SERIES) == 4 * length + 20
    assert value(text, "vllm:request_prefill_kv_computed_tokens_sum", **SERIES) == (
        4 * length + 20 - 3 * hit
    )


def test_the_load_models_gauges_stay_its_own() -> None:
    """With the load model, running and waiting are its batch and queue, as before."""
    with serve(create_app(MockConfig(tpot_ms=100, max_num_seqs=1))) as url:
        body = completion_body(max_tokens=8, ignore_eos=True, min_tokens=8)

        def post() -> None:
            httpx.post(url + COMPLETIONS, json=body, headers=AUTH, timeout=60)

        threads = [threading.Thread(target=post) for _ in range(2)]
        for t in threads:
            t.start()
        text = ""
        for _ in range(50):
            text = scrape(url)
            if value(text, "vllm:num_requests_waiting", **SERIES) == 1:
                break
            time.sleep(0.02)
        for t in threads:
            t.join()
    assert value(text, "vllm:num_requests_running", **SERIES) == 1
    assert value(text, "vllm:num_requests_waiting_by_reason", reason="capacity", **SERIES) == 1
    assert value(text, "vllm:kv_cache_usage_perc", **SERIES) == 1.0  # one of one slot
