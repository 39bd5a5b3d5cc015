"""`python -m reference_impl --upstream URL` in front of a router, without vLLM: a stand-in
that answers as vLLM's production-stack router does (GET /health; GET /v1/models without
max_model_len). The reference takes max_model_len from --max-model-len, or refuses to
start without it; its /health follows the router's."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from api_server.children import free_port, stop_process, wait_ready
from contract import InferenceUnavailable, spec
from reference_impl.health import CACHE_S
from tests.support.contract import CONTRACT
from tests.support.fake_vllm import Router

ROOT = Path(__file__).resolve().parents[2]
SERVED = spec().default_model


def start(upstream: str, *args: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="reference-upstream-")) / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reference_impl",
                "--upstream",
                upstream,
                "--port",
                str(port),
                "--workers",
                "1",
                "--startup-timeout",
                "60",
                *args,
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith(("REFERENCE_", "MOCK_"))},
        )
    return proc, f"http://127.0.0.1:{port}", log


def test_without_max_model_len_from_the_router_it_asks_for_the_option(
    router: tuple[Router, str],
) -> None:
    proc, _, log = start(router[1])
    try:
        assert proc.wait(timeout=120) != 0
    finally:
        stop_process(proc, timeout=30)
    assert "gives no max_model_len: pass --max-model-len" in log.read_text()


def test_behind_a_router_it_serves_with_the_options_max_model_len_and_the_routers_health(
    router: tuple[Router, str],
) -> None:
    app, url = router
    proc, api, log = start(url, "--max-model-len", "8192")
    try:
        wait_ready(api, proc, 120, "python -m reference_impl", log)
        models = httpx.get(api + "/v1/models", headers={"Authorization": "Bearer k"}).json()["data"]
        assert [(m["id"], m["max_model_len"]) for m in models] == [(SERVED, 8192)]
        app.healthy = False
        status = spec().error_codes["inference_unavailable"]["status"]
        for _ in range(100):  # the answer stands for CACHE_S; a bound, not a speed check
            health = httpx.get(api + "/health")
            if health.status_code != 200:
                break
            time.sleep(CACHE_S / 10)
        body = health.json()
        assert (health.status_code, body) == (
            status,
            CONTRACT.errors.body(
                InferenceUnavailable.from_template("inference_unavailable"), body["request_id"]
            ),
        )
    finally:
        stop_process(proc, timeout=30)
