"""Wall time of the conformance suite's quick and full profiles against the bundled mock.

    .venv/bin/python -m bench conformance      # writes bench/results/conformance.md

Each round runs `python -m conformance` as a CI job would (a new interpreter,
imports included) against one `python -m mock_server` started for the whole
benchmark. Targets on this machine: quick under 10 s, full under 90 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import ROOT, ServerFailed, command_line
from bench.report import write_report

OUT = ROOT / "bench" / "results" / "conformance.md"
TARGETS = {"quick": 10.0, "full": 90.0}  # seconds, from the issue


def run_once(url: str, profile: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        start = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "conformance",
                "--base-url",
                url,
                "--api-key",
                "bench",
                "--profile",
                profile,
                "--json",
                str(report),
                "--no-progress",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(
                f"{profile} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
            )
        data = json.loads(report.read_text())
    by_group: dict[str, float] = {}
    for r in data["results"]:
        group = r["id"].split(":", 1)[0]
        by_group[group] = by_group.get(group, 0.0) + r["duration_s"]
    return {
        "wall": wall,
        "suite": data["summary"]["duration_s"],
        "checks": data["summary"]["total"],
        "passed": data["summary"]["passed"],
        "skipped": data["summary"]["skipped"],
        "tokens": data["summary"]["tokens"],
        "ceiling": data["summary"]["token_ceiling"],
        "by_group": by_group,
    }


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    rows = [
        "| profile | checks (passed / skipped) | wall time, median (min-max) | in the suite | "
        "tokens generated (ceiling) | target | met |",
        "| --- | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    for profile, runs in results.items():
        walls = [r["wall"] for r in runs]
        med = statistics.median(walls)
        last = runs[-1]
        rows.append(
            f"| {profile} | {last['checks']} ({last['passed']} / {last['skipped']}) | "
            f"{med:.1f} s ({min(walls):.1f}-{max(walls):.1f}) | "
            f"{statistics.median(r['suite'] for r in runs):.1f} s | "
            f"{last['tokens']} ({last['ceiling']}) | < {TARGETS[profile]:.0f} s | "
            f"{'yes' if med < TARGETS[profile] else 'no'} |"
        )
    return "\n".join(rows)


def groups(runs: list[dict[str, Any]]) -> str:
    median_run = sorted(runs, key=lambda r: r["wall"])[len(runs) // 2]
    items = sorted(median_run["by_group"].items(), key=lambda kv: -kv[1])
    return "\n".join(
        ["| group | seconds |", "| --- | ---: |"] + [f"| {g} | {s:.2f} |" for g, s in items]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="mock workers")
    args = p.parse_args(argv)
    mock = harness.mock("--workers", str(args.workers))
    try:
        mock.run(Path(tempfile.mkdtemp(prefix="bench-conformance-")))
    except ServerFailed as exc:
        raise SystemExit(str(exc)) from None
    url = mock.url
    results: dict[str, list[dict[str, Any]]] = {"quick": [], "full": []}
    try:
        run_once(url, "quick")  # warm-up: the mock's first requests load its tables
        for _ in range(args.rounds):
            for profile in results:
                results[profile].append(run_once(url, profile))
                print(f"{profile}: {results[profile][-1]['wall']:.1f} s", file=sys.stderr)
    finally:
        mock.stop()
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    text = f"""# Conformance suite: wall time against the bundled mock

`{command_line("conformance_bench", sys.argv[1:])}` — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC,
{args.rounds} rounds after a warm-up; each round is a fresh `python -m conformance` (interpreter
start-up and imports included) against one `python -m mock_server --workers {args.workers}`.
Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.machine()},
load average {" / ".join(f"{x:.2f}" if isinstance(x, float) else x for x in load)} at the end.

{table(results)}

"In the suite" is the run's own clock (after start-up: GET /v1/models to the last check).
The full profile waits about keepalive_seconds + 1.5 s in `stream:keepalive` (the mock is
slowed past one keepalive interval on purpose) and runs schemathesis twice.

Where the full profile's time goes (median round, seconds per group; the first
`schema:` check runs both schemathesis runs):

{groups(results["full"])}
"""
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_report(OUT, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
