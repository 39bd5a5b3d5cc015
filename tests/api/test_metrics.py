"""GET /metrics on both servers: the API layer's acs_* and, in the mock, vLLM's names for
what it simulates; with several workers, one scrape sums them all."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from api_server.app import METRICS_PATH
from contract import InsufficientQuota, spec
from mock_server import MockConfig, create_app
from tests.support.contract import CONTRACT
from tests.support.metrics import samples, value
from tests.support.mock import AUTH, MockProcess, completion_body
from tests.support.vllm_stream import BODY, SKY, api, streamed

COMPLETIONS = spec().completions_path
MODEL = spec().default_model
VLLM_NAMES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:time_to_first_token_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:inter_token_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:admission_rejections_total",
)
SERIES = {"model_name": MODEL, "engine": "0"}  # vLLM's labels on every series


def mock_client(**settings: object) -> httpx.Client:
    app = create_app(MockConfig(**settings))  # type: ignore[arg-type]
    return httpx.Client(
        transport=httpx.WSGITransport(app=app), base_url="http://mock.test", headers=AUTH
    )


def test_the_reference_counts_responses_by_route_status_and_code() -> None:
    with api(streamed(SKY)) as c:
        assert c.post(COMPLETIONS, json=BODY).status_code == 200
        assert (
            c.post(COMPLETIONS, json=BODY, headers={"Authorization": "Bearer wrong"}).status_code
            == 401
        )
        assert c.get("/nowhere").status_code == 404
        scrape = c.get(METRICS_PATH, headers={})  # no key needed
    assert scrape.status_code == 200 and scrape.headers["content-type"].startswith("text/plain")
    text = scrape.text
    assert value(text, "acs_requests_total", route=COMPLETIONS, status="200", code="") == 1
    assert (
        value(text, "acs_requests_total", route=COMPLETIONS, status="401", code="invalid_api_key")
        == 1
    )
    assert value(text, "acs_requests_total", route="none", status="404", code="not_found") == 1
    assert value(text, "acs_generated_tokens_total") == 2  # SKY: two completion tokens
    assert "vllm:" not in text  # the mock's alone


def test_open_streams_rise_and_fall() -> None:
    with mock_client() as c:
        with c.stream("POST", COMPLETIONS, json=completion_body(stream=True)) as r:
            during = c.get(METRICS_PATH).text
            r.read()
        after = c.get(METRICS_PATH).text
    assert (value(during, "acs_open_streams"), value(after, "acs_open_streams")) == (1, 0)


def test_budget_spent_and_refused() -> None:
    with mock_client(budget_tokens=30) as c:
        ok = c.post(
            COMPLETIONS, json=completion_body(max_tokens=8, ignore_eos=True, min_tokens=8)
        ).json()
        refused = c.post(COMPLETIONS, json=completion_body(max_tokens=8, prompt="x " * 40))
        text = c.get(METRICS_PATH).text
    assert refused.status_code == 429 and refused.json()["error"]["code"] == InsufficientQuota.code
    assert value(text, "acs_budget_spent_tokens_total") == ok["usage"]["total_tokens"]
    assert value(text, "acs_budget_refused_total") == 1


def test_the_mock_reports_vllms_names() -> None:
    with mock_client(tpot_ms=1) as c:
        body = c.post(
            COMPLETIONS, json=completion_body(max_tokens=6, ignore_eos=True, min_tokens=6)
        ).json()
        c.post(
            COMPLETIONS,
            json=completion_body(max_tokens=6, ignore_eos=True, min_tokens=6, stream=True),
        )
        text = c.get(METRICS_PATH).text
    for name in VLLM_NAMES:
        assert f"\n{name}" in text, name
    usage = body["usage"]
    assert value(text, "vllm:prompt_tokens_total", **SERIES) == 2 * usage["prompt_tokens"]
    assert value(text, "vllm:generation_tokens_total", **SERIES) == 12
    assert value(text, "vllm:time_to_first_token_seconds_count", **SERIES) == 2
    assert value(text, "vllm:e2e_request_latency_seconds_count", **SERIES) == 2
    assert value(text, "vllm:request_time_per_output_token_seconds_count", **SERIES) >= 1
    assert (
        value(text, "vllm:inter_token_latency_seconds_count", **SERIES) == 2 * 5
    )  # a step after each first
    assert value(text, "vllm:request_queue_time_seconds_count", **SERIES) == 2
    assert value(text, "vllm:request_success_total", finished_reason="length", **SERIES) == 2
    assert value(text, "acs_requests_total", route=COMPLETIONS, status="200", code="") == 2


def test_without_stream_the_first_token_is_timed_as_vllm_times_it() -> None:
    """vLLM times the first token in the engine, stream or not (issue 32: the mock's TTFT was
    the whole request and its time per output token 0 without stream). Bounds that noise
    cannot break: sleeps only grow."""
    ttft_s, tpot_s, tokens = 0.1, 0.1, 5
    with mock_client(ttft_ms=ttft_s * 1000, tpot_ms=tpot_s * 1000) as c:
        c.post(
            COMPLETIONS, json=completion_body(max_tokens=tokens, ignore_eos=True, min_tokens=tokens)
        )
        text = c.get(METRICS_PATH).text
    ttft = value(text, "vllm:time_to_first_token_seconds_sum", **SERIES)
    tpot = value(text, "vllm:request_time_per_output_token_seconds_sum", **SERIES)
    e2e = value(text, "vllm:e2e_request_latency_seconds_sum", **SERIES)
    assert ttft >= ttft_s and tpot >= tpot_s and e2e >= ttft_s + (tokens - 1) * tpot_s
    assert ttft < e2e / 2  # the first token, not the whole request


def test_each_phase_and_each_step_is_timed_as_vllm_times_it() -> None:
    """vllm/v1/metrics/stats.py: queue = scheduled - queued, prefill = first token - scheduled,
    decode = last - first token, inference = last token - scheduled, and one inter-token
    latency a step after the first. Two requests against a batch of one: the second, sent once
    the first's stream has begun, waits the rest of the first's run in the queue. Lower bounds
    only: sleeps only grow, and the second may reach the mock late on a loaded machine (half the
    first's decode is allowed for that)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    ttft_s, tpot_s, tokens, first_tokens = 0.05, 0.04, 4, 12
    body = completion_body(max_tokens=tokens, ignore_eos=True, min_tokens=tokens)
    longer = {**body, "max_tokens": first_tokens, "min_tokens": first_tokens, "stream": True}
    begun = threading.Event()
    with mock_client(ttft_ms=ttft_s * 1000, tpot_ms=tpot_s * 1000, max_num_seqs=1) as c:

        def first() -> int:
            with c.stream("POST", COMPLETIONS, json=longer) as r:
                for _ in r.iter_raw():
                    begun.set()
                return r.status_code

        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(first)
            assert begun.wait(30)
            second = pool.submit(c.post, COMPLETIONS, json=body)
            assert running.result() == second.result().status_code == 200
        text = c.get(METRICS_PATH).text

    def got(name: str) -> tuple[float, float]:
        return (
            value(text, f"vllm:{name}_count", **SERIES),
            value(text, f"vllm:{name}_sum", **SERIES),
        )

    steps = (first_tokens - 1) + (tokens - 1)
    runs_s = 2 * ttft_s + steps * tpot_s
    assert got("inter_token_latency_seconds")[0] == steps  # a step each, stream or not
    # A step's wait is kept to one schedule from the request's start (latency.Schedule): a first
    # token seen late leaves less of the next wait, so each request may be short by one step
    # (CI, 2026-12-07: 0.548 s where 14 steps of 40 ms are 0.56).
    assert got("inter_token_latency_seconds")[1] >= (steps - 2) * tpot_s
    assert got("request_queue_time_seconds")[0] == 2
    # the second waited the rest of the first's decode, at least half of it
    assert got("request_queue_time_seconds")[1] >= (first_tokens - 1) * tpot_s / 2
    assert got("request_prefill_time_seconds")[1] >= 2 * ttft_s
    assert got("request_decode_time_seconds")[1] >= (steps - 2) * tpot_s  # (as above)
    assert got("request_inference_time_seconds")[1] >= runs_s
    decode, prefill, inference = (
        got(f"request_{n}_time_seconds")[1] for n in ("decode", "prefill", "inference")
    )
    assert abs(inference - (prefill + decode)) < 1e-6  # inference is prefill then decode
    e2e = got("e2e_request_latency_seconds")[1]
    assert e2e >= inference + got("request_queue_time_seconds")[1] - 1e-6


def test_every_vllm_series_shows_from_the_start_at_0() -> None:
    """As vLLM's: a dashboard or a router sees each series before the first request."""
    with mock_client() as c:
        text = c.get(METRICS_PATH).text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:request_queue_time_seconds_count",
        "vllm:request_prefill_time_seconds_count",
        "vllm:request_decode_time_seconds_count",
        "vllm:request_inference_time_seconds_count",
    ):
        assert (name, frozenset(SERIES.items())) in samples(text), name
    for reason in ("stop", "length", "abort"):
        assert (
            "vllm:request_success_total",
            frozenset({**SERIES, "finished_reason": reason}.items()),
        ) in samples(text)


def test_without_log_stats_the_mock_reports_no_vllm_names() -> None:
    """vLLM's --disable-log-stats: no vllm:* metrics, the API's own acs_* as before."""
    with mock_client(disable_log_stats=True, max_num_seqs=2) as c:
        assert c.post(COMPLETIONS, json=completion_body(max_tokens=3)).status_code == 200
        with c.stream("POST", COMPLETIONS, json=completion_body(stream=True)) as r:
            r.read()
        text = c.get(METRICS_PATH).text
    assert "vllm:" not in text
    assert value(text, "acs_requests_total", route=COMPLETIONS, status="200", code="") == 2


def test_one_scrape_sums_every_worker() -> None:
    """Whichever worker answers the scrape, every worker's counts are in it at once (each
    writes its values where prometheus_client's multiprocess mode reads them)."""
    server = MockProcess("--workers", "2").start()
    try:
        n = 12
        for _ in range(n):  # a new connection each, so that both workers answer some
            assert (
                httpx.post(
                    server.url + COMPLETIONS,
                    json=completion_body(stream=True),
                    headers=AUTH,
                    timeout=60,
                ).status_code
                == 200
            )
        scrapes = [httpx.get(server.url + METRICS_PATH, timeout=60).text for _ in range(4)]
    finally:
        server.close()
    for text in scrapes:  # whichever worker answered the scrape
        assert value(text, "acs_requests_total", route=COMPLETIONS, status="200", code="") == n
        assert value(text, "vllm:e2e_request_latency_seconds_count", **SERIES) == n
        assert value(text, "acs_open_streams") == 0


def test_a_metrics_directory_given_is_wiped_at_start(tmp_path: Path) -> None:
    """PROMETHEUS_MULTIPROC_DIR set by the user: the last run's counts do not carry over."""
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for run in range(2):
        server = MockProcess(env=env).start()
        try:
            assert (
                httpx.post(
                    server.url + COMPLETIONS, json=completion_body(), headers=AUTH, timeout=60
                ).status_code
                == 200
            )
            text = httpx.get(server.url + METRICS_PATH, timeout=60).text
        finally:
            server.close()
        assert value(text, "acs_requests_total", route=COMPLETIONS, status="200", code="") == 1, run


def test_an_abandoned_streams_tokens_are_counted_and_it_finished_by_abort() -> None:
    """vLLM counts the tokens it generated, read or not (issue 32: the mock counted none of
    a stream its client left)."""
    server = MockProcess("--workers", "1", "--tpot-ms", "50").start()
    try:
        body = completion_body(max_tokens=200, ignore_eos=True, min_tokens=200, stream=True)
        with httpx.stream(
            "POST", server.url + COMPLETIONS, json=body, headers=AUTH, timeout=60
        ) as r:
            lines = r.iter_lines()
            read = sum(1 for _, line in zip(range(20), lines) if line.startswith("data: {"))
        text = ""
        for _ in range(100):  # the server notices the close at its next write
            text = httpx.get(server.url + METRICS_PATH, timeout=60).text
            if value(text, "vllm:request_success_total", finished_reason="abort", **SERIES):
                break
            time.sleep(0.1)
    finally:
        server.close()
    assert value(text, "vllm:request_success_total", finished_reason="abort", **SERIES) == 1
    assert read <= value(text, "vllm:generation_tokens_total", **SERIES) < 200
    # its prompt was prefilled: vLLM counts a prompt's tokens then, whatever comes after
    prompt_tokens = CONTRACT.validate_completion(body).prompt_token_counts[0]
    assert value(text, "vllm:prompt_tokens_total", **SERIES) == prompt_tokens


def test_each_prompt_and_each_sample_is_an_engine_request_of_its_own() -> None:
    """vLLM 0.32 runs `n` samples of each prompt as child requests (parallel_sampling.py): 2
    prompts with n 2 are 4 successes, 4 of each latency, and each child's prompt tokens."""
    body = completion_body(
        prompt=["The sky is", "Once upon a time there"], n=2, max_tokens=3, seed=5
    )
    with mock_client() as c:
        answer = c.post(COMPLETIONS, json=body).json()
        text = c.get(METRICS_PATH).text
    reasons: dict[str, int] = {}
    for choice in answer["choices"]:
        reasons[choice["finish_reason"]] = reasons.get(choice["finish_reason"], 0) + 1
    for reason, count in reasons.items():
        assert value(text, "vllm:request_success_total", finished_reason=reason, **SERIES) == count
    assert sum(reasons.values()) == 4
    assert value(text, "vllm:prompt_tokens_total", **SERIES) == 2 * answer["usage"]["prompt_tokens"]
    assert (
        value(text, "vllm:generation_tokens_total", **SERIES)
        == (answer["usage"]["completion_tokens"])
    )
    for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        assert value(text, name + "_count", **SERIES) == 4
