"""Each server a bench starts answers a request (issue 33: bench.servers.bare_app, the ceiling
bench.http_bench measures the mock against, failed every request, so the ceiling could not
be measured): the bare Flask app under the API's own workers, the fake vLLM, and the relay
in front of it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from api_server.children import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "llama-8b", "prompt": [1, 2, 3], "max_tokens": 4}


@contextmanager
def bench_server(module: str, *args: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", f"bench.servers.{module}", "--port", str(port), *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 60, name=f"bench.servers.{module}", any_status=True, interval=0.1)
        yield url
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        # no request failed in the server (gevent's noise at interpreter exit aside: issue 32)
        assert b"Error handling request" not in err, err.decode(errors="replace")[-3000:]


@pytest.mark.parametrize("worker", ["gevent", "gthread"])
def test_the_bare_ceiling_answers_under_each_worker(worker: str) -> None:
    with bench_server("bare_app", "--workers", "1", "--worker", worker) as url:
        done = httpx.post(url + "/v1/completions", json=BODY, timeout=30)
        refused = httpx.post(url + "/v1/completions", json={**BODY, "max_tokens": "x"}, timeout=30)
        streamed = httpx.post(url + "/v1/completions", json={**BODY, "stream": True}, timeout=30)
    assert done.status_code == 200 and done.json()["object"] == "text_completion"
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert streamed.text.count("data: {") == BODY["max_tokens"]


def test_the_fake_vllm_and_the_relay_in_front_of_it_answer() -> None:
    with bench_server("fake_vllm", "--step-ms", "1") as vllm:
        direct = httpx.post(vllm + "/v1/completions", json=BODY, timeout=30)
        with bench_server("relay", "--upstream", vllm) as relay:
            relayed = httpx.post(relay + "/v1/completions", json=BODY, timeout=30)
    for r in (direct, relayed):
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == BODY["max_tokens"]
