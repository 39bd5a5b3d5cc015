"""A real Prometheus (Debian's package, installed by scripts/setup_prometheus.sh from
scripts/test.sh) scraping one target, on a free port with its data in a temp directory, and
its HTTP query API. Without the binary the tests that need one skip themselves."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from api_server.children import free_port, stop_process

START_TIMEOUT_S = 60.0


class Prometheus:
    """`prometheus` scraping `target` (a base URL: its /metrics) every `interval_s`."""

    def __init__(self, target: str, interval_s: int = 1) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="prometheus-test-"))
        self.target, self.interval_s = urlsplit(target).netloc, interval_s  # whole seconds
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Prometheus:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.skip("no prometheus (run as root: bash scripts/setup_prometheus.sh)")
        config = self.dir / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {self.interval_s}s\n  evaluation_interval: {self.interval_s}s\n"
            f"scrape_configs:\n  - job_name: mock\n    static_configs:\n"
            f"      - targets: ['{self.target}']\n",
            encoding="utf-8",
        )
        with open(self.dir / "prometheus.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(self.url + "/-/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {self.log()}")
            time.sleep(0.1)

    def log(self) -> str:
        return (self.dir / "prometheus.log").read_text(errors="replace")[-4000:]

    def scraped(self) -> int:
        """The scrapes of the target so far that succeeded."""
        result = self.query_range("up == 1", time.time() - 3600, time.time())
        return sum(len(series["values"]) for series in result)

    def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        """`expr` evaluated each `interval_s` from `start` to `end` (Grafana's range query)."""
        resp = httpx.get(
            self.url + "/api/v1/query_range",
            params={"query": expr, "start": start, "end": end, "step": self.interval_s},
            timeout=30,
        )
        body = resp.json()
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def close(self) -> None:
        stop_process(self.proc)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
