"""The mock's load model (mock_server/hook/load.py): vLLM's running batch and waiting queue,
prefill per prompt token, decode steps that slow with the batch, profiles. Order and
counts, never wall-clock limits."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from api_server.metrics import new_registry
from contract import InferenceUnavailable, spec
from mock_server.config import MockConfig
from mock_server.hook.load import Scheduler
from mock_server.hook.metrics import VllmMetrics
from mock_server.hook.profiles import PROFILES
from mock_server.testing import transport
from tests.support.contract import CONTRACT
from tests.support.metrics import value
from tests.support.mock import AUTH, MockProcess, completion_body

COMPLETIONS = spec().completions_path
SERIES = {"model_name": spec().default_model, "engine": "0"}  # vLLM's labels on every series
WAIT_S = 60  # generous: only a bound on a test that would otherwise hang


def client(**settings: Any) -> httpx.Client:
    return httpx.Client(
        transport=transport(**settings), base_url="http://mock.test", headers=AUTH, timeout=WAIT_S
    )


class Timed:
    """A stream read in a thread: when each of its chunks came."""

    def __init__(self, c: httpx.Client, **fields: Any) -> None:
        self.times: list[float] = []
        self.status: int | None = None
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(c, fields), daemon=True)
        self._thread.start()

    def _run(self, c: httpx.Client, fields: dict[str, Any]) -> None:
        body = completion_body(stream=True, ignore_eos=True, **fields)
        with c.stream("POST", COMPLETIONS, json=body) as r:
            self.status = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    self.times.append(time.monotonic())
                    self.started.set()
        self.started.set()

    def join(self) -> Timed:
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive()
        return self


def one_after_the_other(**options: Any) -> tuple[Timed, Timed]:
    """Two 6-token streams, the second sent once the first has started."""
    with client(**options) as c:
        first = Timed(c, max_tokens=6)
        assert first.started.wait(WAIT_S)
        second = Timed(c, max_tokens=6)
        return first.join(), second.join()


def test_with_one_running_sequence_the_second_request_waits_for_the_first() -> None:
    first, second = one_after_the_other(max_num_seqs=1, tpot_ms=20)
    assert (first.status, second.status) == (200, 200)
    assert len(first.times) == len(second.times) == 6
    assert second.times[0] > first.times[-1]  # its first token after the first's last


def test_two_running_sequences_overlap() -> None:
    first, second = one_after_the_other(max_num_seqs=2, tpot_ms=20)
    assert second.times[0] < first.times[-1]


def test_a_full_queue_is_503_with_retry_after_and_the_next_request_runs_after() -> None:
    with client(max_num_seqs=1, max_num_queued_reqs=1, tpot_ms=30) as c:
        running = Timed(c, max_tokens=8)
        assert running.started.wait(WAIT_S)
        refused = c.post(COMPLETIONS, json=completion_body())
        running.join()
        after = c.post(COMPLETIONS, json=completion_body())
        text = c.get("/metrics").text
    want = InferenceUnavailable.from_template("inference_unavailable")
    rid = refused.headers["x-request-id"]
    assert refused.status_code == CONTRACT.errors.status(want) == 503
    assert refused.json() == CONTRACT.errors.body(want, rid)
    assert refused.headers["retry-after"] == CONTRACT.errors.headers(want)["Retry-After"]
    assert after.status_code == 200
    assert (
        value(
            text,
            "vllm:admission_rejections_total",
            model_name=spec().default_model,
            reason="max_num_queued_reqs",
        )
        == 1
    )


def test_a_stream_refused_by_a_full_queue_is_an_http_503_too() -> None:
    with client(max_num_seqs=1, max_num_queued_reqs=1, tpot_ms=30) as c:
        running = Timed(c, max_tokens=8)
        assert running.started.wait(WAIT_S)
        refused = c.post(COMPLETIONS, json=completion_body(stream=True))
        running.join()
    assert (
        refused.status_code == 503 and refused.json()["error"]["code"] == InferenceUnavailable.code
    )


def statuses_at_once(c: httpx.Client, bodies: list[dict[str, Any]]) -> list[int]:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(bodies)) as pool:
        return sorted(pool.map(lambda b: c.post(COMPLETIONS, json=b).status_code, bodies))


def test_the_queue_limit_bounds_waiting_plus_running_as_vllm_counts_them() -> None:
    """Issue 32: vLLM 0.32 refuses a request when its sequences in flight, waiting and
    running, would pass --max-num-queued-reqs (AsyncLLM.check_admission); the mock bounded
    the waiting alone, and `--max-num-seqs 2 --max-num-queued-reqs 2` admitted 4 of 4."""
    body = completion_body(max_tokens=10, ignore_eos=True, min_tokens=10)
    with client(max_num_seqs=2, max_num_queued_reqs=2, tpot_ms=50) as c:
        assert statuses_at_once(c, [body] * 4) == [200, 200, 503, 503]
    with client(max_num_seqs=2, max_num_queued_reqs=3, tpot_ms=50) as c:
        assert statuses_at_once(c, [body] * 4) == [200, 200, 200, 503]  # 2 running and 1 waiting


def test_a_request_is_n_sequences() -> None:
    """n: 4 is 4 sequences, past a limit of 3 alone; n: 2 fills a batch of 2."""
    with client(max_num_seqs=4, max_num_queued_reqs=3) as c:
        refused = c.post(COMPLETIONS, json=completion_body(n=4, max_tokens=2))
        assert (
            refused.status_code,
            c.post(COMPLETIONS, json=completion_body(n=3, max_tokens=2)).status_code,
        ) == (503, 200)
    with client(max_num_seqs=2, tpot_ms=20) as c:
        pair = Timed(c, max_tokens=6, n=2)
        assert pair.started.wait(WAIT_S)
        one = Timed(c, max_tokens=6)
        pair.join(), one.join()
    assert one.times[0] > pair.times[-1]  # the batch of 2 was full with the first's two choices


def test_running_and_waiting_in_vllms_gauges() -> None:
    with client(max_num_seqs=1, tpot_ms=40) as c:
        first = Timed(c, max_tokens=10)
        assert first.started.wait(WAIT_S)
        second = Timed(c, max_tokens=2)
        deadline = time.monotonic() + WAIT_S
        while True:  # until the second is queued
            text = c.get("/metrics").text
            if (
                value(text, "vllm:num_requests_waiting", **SERIES) == 1
                or time.monotonic() > deadline
            ):
                break
        first.join(), second.join()
        done = c.get("/metrics").text
    assert (
        value(text, "vllm:num_requests_running", **SERIES),
        value(text, "vllm:num_requests_waiting", **SERIES),
    ) == (1, 1)
    assert value(text, "vllm:kv_cache_usage_perc", **SERIES) == 1.0  # the one slot in use
    assert (
        value(done, "vllm:num_requests_running", **SERIES),
        value(done, "vllm:num_requests_waiting", **SERIES),
    ) == (0, 0)


# -- the timing, without a server -------------------------------------------------------------
def scheduler(clock: Any = time.monotonic, **settings: Any) -> Scheduler:
    config = MockConfig(**settings)
    return Scheduler(
        lambda: config,
        VllmMetrics(new_registry(), [spec().models[spec().default_model]], spec().metrics),
        clock,
    )


def request(prompt: str) -> Any:
    return CONTRACT.validate_completion(
        {"model": spec().default_model, "prompt": prompt, "max_tokens": 4}
    )


def test_prefill_grows_with_the_prompts_tokens() -> None:
    short, long = request("Hi"), request("Hi " * 50)
    tokens = [sum(r.prompt_token_counts) for r in (short, long)]
    assert [
        scheduler(max_num_seqs=4, prefill_ms_per_token=2).steps(r, 0.010, 0.005)(0)  # each alone
        for r in (short, long)
    ] == pytest.approx([0.010 + n * 0.002 for n in tokens])


def test_a_decode_step_slows_with_the_batch_up_to_the_factor() -> None:
    s = scheduler(max_num_seqs=5, time_factor_under_load=3)
    step = s.steps(request("Hi"), 0, 0.010)
    seen = []
    for running in (1, 3, 5):
        s.running = running
        seen.append(step(1))
    assert seen == pytest.approx([0.010, 0.020, 0.030])  # 1 + (3 - 1) x (running - 1) / (5 - 1)


def test_a_profiles_step_is_its_hardwares_whatever_max_num_seqs_is_set_to() -> None:
    """Issue 32: llama-8b-h100 with --max-num-seqs 8 took 24 ms a step at 8 running (the
    factor reached at 8), 12.09 ms with its own 1024: the GPU does not slow down because a
    smaller batch is allowed. Its factor is reached at full_load_seqs, the profile's 1024."""
    profile = PROFILES["llama-8b-h100"].settings
    config = MockConfig.from_env({}, load_profile="llama-8b-h100", max_num_seqs=8)
    s = Scheduler(lambda: config, None)
    s.running = 8
    full = profile["full_load_seqs"]
    want = (
        profile["tpot_ms"] / 1000 * (1 + (profile["time_factor_under_load"] - 1) * 7 / (full - 1))
    )
    step = s.steps(request("Hi"), 0, profile["tpot_ms"] / 1000)
    assert [step(1) for _ in range(200)] == pytest.approx(
        [want] * 200, rel=profile["jitter"] + 1e-9
    )
    own = Scheduler(lambda: MockConfig.from_env({}, load_profile="llama-8b-h100", jitter=0), None)
    own.running = 8
    assert own.steps(request("Hi"), 0, profile["tpot_ms"] / 1000)(1) == pytest.approx(want)


def test_prompts_that_arrive_together_are_prefilled_one_after_another() -> None:
    """Issue 32: prefill never contended (4 prompts of 1,502 tokens at once each took the one
    prompt's time). Prefill is bound by compute: on one timeline, the k-th of k prompts that
    arrive together is done after all k (a clock that stands still: no wall clock)."""
    now = [100.0]
    s = scheduler(lambda: now[0], max_num_seqs=8, prefill_ms_per_token=1)
    req = request("Hi " * 50)
    work = sum(req.prompt_token_counts) / 1000
    waits = [s.steps(req, 0.010, 0.005)(0) for _ in range(4)]
    assert waits == pytest.approx([0.010 + k * work for k in (1, 2, 3, 4)])
    now[0] += 10  # long after: the timeline is free again
    assert s.steps(req, 0.010, 0.005)(0) == pytest.approx(0.010 + work)


def test_four_long_prompts_at_once_wait_for_each_others_prefill() -> None:
    """The same, sent: four streams of one long prompt at once; the last first token comes
    after all four prefills (a lower bound: sleeps only grow)."""
    with client(max_num_seqs=8, prefill_ms_per_token=1) as c:
        req = request("Hi " * 100)
        work = sum(req.prompt_token_counts) / 1000
        sent = time.monotonic()
        streams = [Timed(c, prompt="Hi " * 100, max_tokens=2) for _ in range(4)]
        firsts = sorted(t.join().times[0] - sent for t in streams)
    assert firsts[-1] >= 4 * work and firsts[1] >= 2 * work


def test_jitter_is_seeded_and_bounded() -> None:
    def draws(seed: int) -> list[float]:
        step = scheduler(max_num_seqs=1, jitter=0.2, load_seed=seed).steps(request("Hi"), 0, 0.010)
        return [step(1) for _ in range(50)]

    assert draws(7) == draws(7) != draws(8)
    assert all(0.008 <= d <= 0.012 for d in draws(7)) and len(set(draws(7))) == 50


def test_a_profile_fills_the_settings_and_options_override_it() -> None:
    profile = PROFILES["llama-8b-h200"].settings
    config = MockConfig.from_env({}, load_profile="llama-8b-h200")
    assert config.loaded and {k: getattr(config, k) for k in profile} == profile
    env = MockConfig.from_env(
        {"MOCK_LOAD_PROFILE": "llama-8b-h200", "MOCK_MAX_NUM_SEQS": "8"}, tpot_ms=3
    )
    assert (env.max_num_seqs, env.tpot_ms, env.ttft_ms) == (8, 3, profile["ttft_ms"])


def test_every_profile_is_a_valid_config_that_says_where_its_numbers_come_from() -> None:
    for name, profile in PROFILES.items():
        assert MockConfig.from_env({}, load_profile=name).loaded and profile.sources, name


def test_the_load_model_is_off_by_default() -> None:
    assert not MockConfig().loaded and not MockConfig.from_env({}).loaded


def test_the_server_as_a_whole_holds_the_load_models_limits() -> None:
    """Issue 32: the limits were per worker, with a worker a core by default. With the load
    model the mock runs one worker unless told otherwise: 4 requests at once against a batch
    of 1 and no queue get one 200 and three 503s, whichever connections they come on."""
    from concurrent.futures import ThreadPoolExecutor

    server = MockProcess(
        "--max-num-seqs", "1", "--max-num-queued-reqs", "1", "--tpot-ms", "100"
    ).start()
    try:
        body = completion_body(max_tokens=20, ignore_eos=True, min_tokens=20)
        with ThreadPoolExecutor(4) as pool:
            statuses = sorted(
                pool.map(
                    lambda _: (
                        httpx.post(
                            server.url + COMPLETIONS, json=body, headers=AUTH, timeout=60
                        ).status_code
                    ),
                    range(4),
                )
            )
    finally:
        server.close()
    assert statuses == [200, 503, 503, 503]
