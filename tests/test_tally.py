"""api_server/tally.py: counts written in batches read the same as prometheus_client's own
metrics, and reach another process's scrape in multiprocess mode (by the flusher or at exit)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

from api_server.metrics import ApiMetrics
from api_server.tally import FLUSH_AT, FLUSH_S, MULTIPROC_DIR, Tally
from mock_server.metrics import E2E_BUCKETS, TTFT_BUCKETS
from tests.metrics_support import samples

ROOT = Path(__file__).resolve().parent.parent
# On a bound (a bucket's `le` holds it), between bounds, past the last one, and zero.
VALUES = (0.0, TTFT_BUCKETS[0], TTFT_BUCKETS[3], 0.03, TTFT_BUCKETS[-1], TTFT_BUCKETS[-1] * 2, 0.03)


def _timeless(text: bytes) -> dict:  # type: ignore[type-arg]
    """Every sample but the `_created` ones (prometheus_client's own, not vLLM's)."""
    return {k: v for k, v in samples(text.decode()).items() if not k[0].endswith("_created")}


def _scrape(tally: Tally, source: CollectorRegistry | None = None) -> dict:  # type: ignore[type-arg]
    return _timeless(tally.exposition(source))


def test_a_histogram_reads_as_prometheus_clients_histogram() -> None:
    tally, theirs = Tally(CollectorRegistry()), CollectorRegistry()
    ours = tally.histograms("vllm:time_to_first_token_seconds", "TTFT.", ["model_name"], TTFT_BUCKETS)
    reference = Histogram("vllm:time_to_first_token_seconds", "TTFT.", ["model_name"], registry=theirs,
                          buckets=TTFT_BUCKETS)
    for model, values in (("a", VALUES), ("b", VALUES[:2])):
        for v in values:
            ours.labels(model).observe(v)
            reference.labels(model).observe(v)
    expected = _timeless(generate_latest(theirs))
    assert _scrape(tally) == expected
    assert expected[("vllm:time_to_first_token_seconds_count", frozenset({("model_name", "a")}))] == len(VALUES)


def test_counters_add_up_across_flushes() -> None:
    tally = Tally(CollectorRegistry())
    plain = tally.counter("acs_generated_tokens", "Tokens.")
    labelled = tally.counters("acs_requests", "Responses.", ["status"])
    theirs = CollectorRegistry()
    c_plain = Counter("acs_generated_tokens", "Tokens.", registry=theirs)
    c_labelled = Counter("acs_requests", "Responses.", ["status"], registry=theirs)
    for round_ in range(3):   # a read (and its flush) between the rounds
        for status, amount in (("200", 5), ("400", 1), ("200", 2.5)):
            plain.inc(amount)
            c_plain.inc(amount)
            labelled.labels(status).inc()
            c_labelled.labels(status).inc()
        expected = _timeless(generate_latest(theirs))
        assert _scrape(tally) == expected, round_
    assert expected[("acs_requests_total", frozenset({("status", "200")}))] == 6


def test_the_queue_is_written_once_it_holds_flush_at() -> None:
    """Without a scrape (an in-process app nobody reads), the counts still reach the
    registry: the queue never grows past FLUSH_AT."""
    registry = CollectorRegistry()
    count = Tally(registry).counter("acs_generated_tokens", "Tokens.")
    for _ in range(FLUSH_AT - 1):
        count.inc()
    assert registry.get_sample_value("acs_generated_tokens_total") == 0
    count.inc()
    assert registry.get_sample_value("acs_generated_tokens_total") == FLUSH_AT


def _child(directory: Path, exit_how: str) -> None:
    """A process in multiprocess mode that counts 3 responses and 2 observations, then
    leaves: at once (`exit`: the flush at exit) or after 3 x FLUSH_S without running
    its exit handlers (`stall`: the flusher's)."""
    code = textwrap.dedent(f"""
        import os, time
        os.environ[{MULTIPROC_DIR!r}] = {str(directory)!r}
        from api_server.metrics import new_tally, ApiMetrics
        from mock_server.metrics import VllmMetrics
        tally = new_tally()
        api, vllm = ApiMetrics(tally), VllmMetrics(tally)
        for _ in range(3):
            api.responded("/v1/completions", 200)
        vllm.model("m").e2e.observe(0.4)
        vllm.model("m").e2e.observe(999)
        if {exit_how!r} == "stall":
            time.sleep(3 * {FLUSH_S})
            os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def _merged(directory: Path) -> dict:  # type: ignore[type-arg]
    """What a scrape by another process reads (this one's tally knows the histogram's name)."""
    merged = CollectorRegistry()
    multiprocess.MultiProcessCollector(merged, path=str(directory))
    tally = Tally(CollectorRegistry())
    tally.histograms("vllm:e2e_request_latency_seconds", "E2E.", ["model_name"], E2E_BUCKETS)
    return _scrape(tally, merged)


def test_another_process_reads_the_counts_flushed_at_exit(tmp_path: Path) -> None:
    _child(tmp_path, "exit")
    got = _merged(tmp_path)
    assert got[("acs_requests_total", frozenset({("route", "/v1/completions"), ("status", "200"), ("code", "")}))] == 3
    model = frozenset({("model_name", "m")})
    assert got[("vllm:e2e_request_latency_seconds_count", model)] == 2
    assert got[("vllm:e2e_request_latency_seconds_sum", model)] == 999.4
    assert got[("vllm:e2e_request_latency_seconds_bucket", model | {("le", "0.5")})] == 1
    assert got[("vllm:e2e_request_latency_seconds_bucket", model | {("le", "+Inf")})] == 2


def test_another_process_reads_the_counts_the_flusher_wrote(tmp_path: Path) -> None:
    _child(tmp_path, "stall")
    got = _merged(tmp_path)
    assert got[("acs_requests_total", frozenset({("route", "/v1/completions"), ("status", "200"), ("code", "")}))] == 3
    assert got[("vllm:e2e_request_latency_seconds_count", frozenset({("model_name", "m")}))] == 2


def test_the_apps_metrics_read_whole_in_one_process() -> None:
    """ApiMetrics.exposition: the flush before the read, so that nothing waits in the queue."""
    metrics = ApiMetrics(Tally(CollectorRegistry()))
    metrics.responded(None, 404, "not_found")
    metrics.generated_tokens.inc(7)
    got = samples(metrics.exposition().decode())
    assert got[("acs_requests_total", frozenset({("route", "none"), ("status", "404"), ("code", "not_found")}))] == 1
    assert got[("acs_generated_tokens_total", frozenset())] == 7


def test_a_forked_child_writes_its_own_counts_alone(tmp_path: Path) -> None:
    """A worker forked while its parent had counts queued and a flush under way (the lock
    held): the child neither writes the parent's counts again nor waits on that lock."""
    code = textwrap.dedent(f"""
        import os
        os.environ[{MULTIPROC_DIR!r}] = {str(tmp_path)!r}
        from api_server.metrics import new_tally, ApiMetrics
        tally = new_tally()
        api = ApiMetrics(tally)
        api.responded("/v1/completions", 200)       # queued in the parent
        tally._lock.acquire()                       # as if its flusher were writing now
        pid = os.fork()
        if pid == 0:
            api.responded("/v1/completions", 200)
            api.responded("/v1/completions", 200)
            tally.flush()
            os._exit(0)
        tally._lock.release()
        assert os.waitpid(pid, 0)[1] == 0
    """)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    got = _merged(tmp_path)
    assert got[("acs_requests_total", frozenset({("route", "/v1/completions"), ("status", "200"), ("code", "")}))] == 3
