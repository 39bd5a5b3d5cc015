"""The Budget's added latency per request, SQLite vs Redis, side by side in one run.

    .venv/bin/python -m bench budget [--seconds S] [--rounds R]   # writes bench/results/budget.md

(a) The store alone, in this process: one reserve + settle (what each completion
    costs the Budget), on the SQLite file and on a local redis-server; p50 and p90,
    one thread; and reserve + settle pairs per second with 16 threads on one key.
(b) Over HTTP: `python -m mock_server` three times, without a Budget, with the
    SQLite Budget and with the Redis Budget; one client sends 16-token completions
    back to back on one connection; p50 and p90, and the p50 minus that of the
    server without a Budget (the Budget's added latency). The servers are
    interleaved round by round, so a change in the machine's load falls on all three.

redis-server is Debian's package (scripts/setup_redis.sh); it runs on a free port of
127.0.0.1 with the settings DEPLOY.md advises (append-only file, fsync always).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import httpx

from api_server.budget.redis import RedisBudget
from api_server.budget.sqlite import BudgetStore
from bench import harness
from bench.harness import ROOT, Server, command_line, percentile
from bench.report import write_report
from contract import Contract, spec

OUT = ROOT / "bench" / "results" / "budget.md"
BODY = {"model": "llama-8b", "prompt": "The sky is", "max_tokens": 16, "temperature": 0}
BIG = 10**15  # a Budget no run can spend


def percentiles(times: list[float]) -> tuple[float, float]:
    return statistics.median(times), percentile(times, 90)


def timed(fn: Callable[[], object], seconds: float) -> list[float]:
    fn()
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 20:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def store_cells(stores: dict[str, object], seconds: float) -> list[str]:
    req = Contract(spec()).validate_completion(BODY)
    rows = []
    for name, store in stores.items():

        def once(store: object = store) -> None:
            held = store.reserve(harness.API_KEY, req)  # type: ignore[attr-defined]
            store.settle(harness.API_KEY, held, held.amount - 3)  # type: ignore[attr-defined]

        p50, p90 = percentiles(timed(once, seconds))
        with ThreadPoolExecutor(16) as pool:
            t0, done = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds:
                list(pool.map(lambda _: once(), range(64)))
                done += 64
            rate = done / (time.perf_counter() - t0)
        rows.append(f"| {name} | {p50 * 1e6:,.0f} µs | {p90 * 1e6:,.0f} µs | {rate:,.0f} |")
    return rows


def http_cells(
    servers: dict[str, Server], seconds: float, rounds: int
) -> tuple[list[str], list[str]]:
    per_round: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
    clients = {
        name: httpx.Client(base_url=s.url, headers=s.headers, timeout=60)
        for name, s in servers.items()
    }
    try:
        for _ in range(rounds):
            for name, client in clients.items():

                def once(c: httpx.Client = client, name: str = name) -> None:
                    r = c.post("/v1/completions", json=BODY)
                    if r.status_code != 200:
                        raise RuntimeError(f"{name}: {r.status_code} {r.text[:300]}")

                per_round[name].append(percentiles(timed(once, seconds)))
    finally:
        for c in clients.values():
            c.close()
    median = {name: sorted(cells)[len(cells) // 2] for name, cells in per_round.items()}
    base = median["no Budget"][0]
    rows = [
        f"| {name} | {p50 * 1e3:.2f} ms | {p90 * 1e3:.2f} ms | "
        f"{'-' if name == 'no Budget' else f'{(p50 - base) * 1e3:+.2f} ms'} |"
        for name, (p50, p90) in median.items()
    ]
    every = [
        f"| {name} | " + " | ".join(f"{p50 * 1e3:.2f}" for p50, _ in cells) + " |"
        for name, cells in per_round.items()
    ]
    return rows, every


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="per cell")
    ap.add_argument("--rounds", type=int, default=3, help="HTTP rounds, servers interleaved")
    args = ap.parse_args(argv)
    reason = harness.redis_missing()
    if reason:
        print(f"budget_bench: {reason}", file=sys.stderr)
        return 2
    redis_server = harness.RedisServer().start()
    budget_dir = tempfile.mkdtemp(prefix="bench-budget-")
    logs = Path(tempfile.mkdtemp(prefix="bench-budget-logs-"))
    servers: dict[str, Server] = {}
    try:
        stores = {
            "SQLite (WAL, one file)": BudgetStore(budget_dir, BIG),
            "Redis (Lua, local, fsync always)": RedisBudget(redis_server.url, BIG),
        }
        store_rows = store_cells(stores, args.seconds)
        common = ("--workers", "2", "--threads", "16")
        budgets = {
            "no Budget": (),
            "SQLite": (
                "--budget-tokens",
                str(BIG),
                "--budget-dir",
                tempfile.mkdtemp(prefix="bench-budget-"),
            ),
            "Redis": ("--budget-tokens", str(BIG), "--budget-url", redis_server.url),
        }
        for name, options in budgets.items():
            servers[name] = harness.mock(*common, *options, key=name.replace(" ", "-"))
            servers[name].run(logs)
        http_rows, every = http_cells(servers, args.seconds, args.rounds)
    finally:
        for s in servers.values():
            s.stop()
        redis_server.close()
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    text = f"""# The Budget's added latency: SQLite vs Redis

`{command_line("budget_bench", ["--seconds", f"{args.seconds:g}", "--rounds", str(args.rounds)])}` —
{datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Machine: {os.cpu_count()} CPUs, Python
{platform.python_version()}, {platform.machine()}, load average {load} at the end. Redis:
a local redis-server on 127.0.0.1 (append-only file, fsync on every write), so these
numbers have no network in them: over a network add one round trip to reserve and one
to settle.

## (a) The store alone: one reserve + settle

| store | p50 | p90 | pairs/s, 16 threads, one key |
| --- | ---: | ---: | ---: |
{chr(10).join(store_rows)}

## (b) Over HTTP: a 16-token completion, one client, back to back

`python -m mock_server --workers 2 --threads 16`, median round of {args.rounds}:

| Budget | p50 | p90 | added p50 |
| --- | ---: | ---: | ---: |
{chr(10).join(http_rows)}

p50 per round (ms):

| Budget | {" | ".join(f"round {i + 1}" for i in range(args.rounds))} |
| --- | {" | ".join("---:" for _ in range(args.rounds))} |
{chr(10).join(every)}
"""
    write_report(OUT, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
