"""Each server a bench starts answers a request (issue 33: bench.servers.bare_app, the ceiling
bench.http_bench measures the mock against, failed every request, so the ceiling could not
be measured): the bare Flask app under the API's own workers, the fake vLLM, and the relay
in front of it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from itertools import pairwise
from pathlib import Path

import httpx
import pytest

from api_server.children import free_port, wait_ready
from bench import harness
from contract import spec
from mock_server import create_app

ROOT = Path(__file__).resolve().parents[2]
BODY = {"model": "llama-8b", "prompt": [1, 2, 3], "max_tokens": 4}


@contextmanager
def serving(argv: list[str], name: str, failed: tuple[bytes, ...]) -> Iterator[str]:
    """`argv` plus `--port P`, run until the block ends; its log must hold none of `failed`."""
    port = free_port()
    proc = subprocess.Popen(
        [*argv, "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 60, name=name, any_status=True, interval=0.1)
        yield url
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        for line in failed:
            assert line not in err, err.decode(errors="replace")[-3000:]


def bench_server(module: str, *args: str) -> AbstractContextManager[str]:
    # no request failed in the server (gevent's noise at interpreter exit aside: issue 32)
    argv = [sys.executable, "-m", f"bench.servers.{module}", *args]
    return serving(argv, module, (b"Error handling request",))


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


def asgi_server(module: str) -> AbstractContextManager[str]:
    """bench.servers.MODULE's ASGI app under uvicorn, as bench.stacks serves it (one worker)."""
    uvicorn = [sys.executable, "-m", "uvicorn", f"bench.servers.{module}:app"]
    argv = [*uvicorn, "--loop", "uvloop", "--http", "httptools", "--log-level", "warning"]
    return serving(argv, module, (b"Traceback",))


def _too_big() -> bytes:
    """A JSON body one byte past x-caps.max_body_bytes."""
    cap = spec().caps["max_body_bytes"]
    head = b'{"model": "llama-8b", "max_tokens": 4, "prompt": "'
    return head + b"a" * (cap + 1 - len(head) - 2) + b'"}'


def test_the_bare_asgi_ceiling_answers_as_the_bare_app() -> None:
    with asgi_server("bare_asgi") as url:
        done = httpx.post(url + "/v1/completions", json=BODY, timeout=30)
        refused = httpx.post(url + "/v1/completions", json={**BODY, "max_tokens": "x"}, timeout=30)
        streamed = httpx.post(url + "/v1/completions", json={**BODY, "stream": True}, timeout=30)
        big = httpx.post(url + "/v1/completions", content=_too_big(), timeout=30)
    assert done.status_code == 200 and done.json()["object"] == "text_completion"
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    assert streamed.headers["content-type"] == "text/event-stream"
    assert streamed.text.endswith("data: [DONE]\n\n")
    assert streamed.text.count("data: {") == BODY["max_tokens"]
    assert big.status_code == 413


def test_the_mock_behind_its_asgi_face_answers_as_in_process() -> None:
    """The face keeps Flask's API: the mock's own answers, errors and caps."""
    seeded = {**BODY, "prompt": "The sky is", "seed": 7, "logprobs": 2}
    key = {"Authorization": f"Bearer {harness.API_KEY}"}
    client = create_app().test_client()
    with asgi_server("mock_asgi") as url:
        served = httpx.post(url + "/v1/completions", json=seeded, headers=key, timeout=30)
        unknown = httpx.post(
            url + "/v1/completions", json={**seeded, "bogus": 1}, headers=key, timeout=30
        )
        big = httpx.post(url + "/v1/completions", content=_too_big(), headers=key, timeout=30)
    local = client.post("/v1/completions", json=seeded, headers=key)
    assert served.status_code == 200, served.text
    assert _content(served.json()) == _content(local.get_json())
    local_unknown = client.post("/v1/completions", json={**seeded, "bogus": 1}, headers=key)
    assert unknown.status_code == local_unknown.status_code == 400
    assert unknown.json()["error"] == local_unknown.get_json()["error"]
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "request_too_large", big.text


def _content(completion: dict) -> dict:
    """A completion less what differs between two answers to one request (id, created)."""
    return {k: v for k, v in completion.items() if k not in ("id", "created")}


def test_the_asgi_face_paces_streams_without_holding_the_loop() -> None:
    """The mock's pacing waits in the task (asyncio.sleep through greenback's portal), not in
    the event loop: two paced streams of one worker interleave, each token paced."""
    tpot_ms, tokens = 150, 4
    body = {**BODY, "max_tokens": tokens, "stream": True, "ignore_eos": True}
    headers = {"Authorization": f"Bearer {harness.API_KEY}", "X-Mock-Tpot-Ms": str(tpot_ms)}

    async def arrivals(client: httpx.AsyncClient, url: str) -> list[float]:
        times = []
        async with client.stream("POST", url, json=body, headers=headers) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: {"):
                    times.append(time.monotonic())
        return times

    async def both(url: str) -> list[list[float]]:
        async with httpx.AsyncClient(timeout=30) as client:
            return list(await asyncio.gather(*(arrivals(client, url) for _ in range(2))))

    with asgi_server("mock_asgi") as url:
        a, b = asyncio.run(both(url + "/v1/completions"))
    assert len(a) == len(b) == tokens
    for times in (a, b):  # paced (the client's clock may see one gap shortened by a late read)
        assert all(later - before >= 0.5 * tpot_ms / 1000 for before, later in pairwise(times))
    assert a[0] < b[-1] and b[0] < a[-1]  # the two streams overlapped
