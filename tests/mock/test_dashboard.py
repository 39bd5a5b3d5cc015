"""vLLM's own Grafana dashboard on the mock (issue 65): `acs-mock` with its defaults and a pace,
ordinary traffic from the openai SDK (plain, streamed, n > 1, several prompts, streams their
client leaves), a real Prometheus scraping it, and every query of every panel of vLLM's
dashboard (tests/data/vllm_grafana.json, its source named there) evaluated as Grafana asks it:
each has data, and each that a healthy server under traffic moves has moved."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

from openai import OpenAI

from contract import spec
from tests.support.mock import KEY, MockProcess
from tests.support.prometheus import Prometheus

DASHBOARD = json.loads(
    (Path(__file__).parents[1] / "data" / "vllm_grafana.json").read_text(encoding="utf-8")
)
MODEL = spec().default_model
INTERVAL_S = 1
TRAFFIC_S = 12.0
# Grafana's $__rate_interval: at least four scrape intervals
RATE_INTERVAL = f"{4 * INTERVAL_S}s"
# Without the load model nothing waits: these stay at 0, which is data, not "No data".
STILL = {("Scheduler State", "C"), ("Queue Time", "A")}


def traffic(base_url: str, until: float) -> None:
    """One client's ordinary requests, in turn, until `until`."""
    client = OpenAI(base_url=base_url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    while time.monotonic() < until:
        client.completions.create(model=MODEL, prompt="The sky is", max_tokens=12)
        for _ in client.completions.create(
            model=MODEL, prompt="Once upon a time", max_tokens=24, stream=True
        ):
            pass
        client.completions.create(
            model=MODEL, prompt=["The sky is", "Far away, beyond the hills"], n=3, max_tokens=9
        )
        left = client.completions.create(
            model=MODEL, prompt="A long story:", max_tokens=200, stream=True
        )
        for i, _ in enumerate(left):  # the client leaves after a few tokens
            if i == 3:
                left.close()
                break


def test_every_panel_of_vllms_dashboard_has_data_from_the_mock() -> None:
    mock = MockProcess("--ttft-ms", "40", "--tpot-ms", "15").start()
    prometheus = Prometheus(mock.url, INTERVAL_S)
    try:
        prometheus.start()
        start = time.time()
        until = time.monotonic() + TRAFFIC_S
        clients = [threading.Thread(target=traffic, args=(mock.url, until)) for _ in range(3)]
        for c in clients:
            c.start()
        for c in clients:
            c.join()
        time.sleep(3 * INTERVAL_S)  # the last requests' values scraped
        end = time.time()
        assert prometheus.scraped() >= TRAFFIC_S / INTERVAL_S / 2, prometheus.log()
        empty, flat = [], []
        for panel in DASHBOARD["panels"]:
            for target in panel["targets"]:
                expr = (
                    target["expr"]
                    .replace("$model_name", MODEL)
                    .replace("$__rate_interval", RATE_INTERVAL)
                )
                values = [
                    float(v)
                    for series in prometheus.query_range(expr, start, end)
                    for _, v in series["values"]
                ]
                finite = [v for v in values if math.isfinite(v)]
                where = (panel["title"], target["refId"])
                if not finite:
                    empty.append(where)
                elif where not in STILL and not any(v > 0 for v in finite):
                    flat.append(where)
    finally:
        prometheus.close()
        mock.close()
    assert not empty, f"panels with no data: {empty}"
    assert not flat, f"panels that never moved under traffic: {flat}"
