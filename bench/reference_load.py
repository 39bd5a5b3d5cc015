"""The reference under a GPU's load, against a simulated vLLM (bench/servers/fake_vllm.py), in one run.

    .venv/bin/python -m bench reference_load [--streams 8,64,256] [--tokens 64] [--step-ms 20]
                                             [--rounds 3] [--baseline REF]

On this machine's CPU, vLLM makes ~350 tokens/s in all (bench/reference_bench.py), so what
the API costs per token with hundreds of streams at once cannot be seen against it. Here a
fake vLLM gives every open request one token per batch step (`--step-ms`), as a GPU does,
for little CPU; the reference fronts it with `--upstream`, and for each count of streams at
once the load client opens them all together through the reference and directly, in turn:

  - tokens/s through the reference against the fake vLLM's direct tokens/s (issue 9's goal:
    at least 95% with 256 streams), and the ideal, streams x 1000 / step-ms;
  - the API's CPU time per token it streamed (its gunicorn master and workers, from the
    scheduler's count; goal: at most 15 us), and per stream.

With `--baseline REF` the reference as of git REF fronts the same fake vLLM too: old
against new in one run. The client is one uvloop process on raw sockets (an HTTP library
would cost more per chunk than the server under test, on the same two cores).

Writes bench/results/reference_load.md (hand-written notes below its marker line are kept)
and prints it. Exit codes: 0 measured; 1 a target failed; 2 usage (no models/tiny-llama).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench import harness
from bench.harness import MODEL_DIR, ROOT, Endpoint, command_line, cpu_seconds
from bench.reference_bench import GOAL_API_US_PER_TOKEN, GOAL_RATIO, MODEL
from bench.report import write_report

DEFAULT_OUT = ROOT / "bench" / "results" / "reference_load.md"
PROMPT_IDS = [128000, 791, 13180, 374]  # "The sky is" as token ids: what the API sends vLLM


def streams(target: Endpoint, count: int, tokens: int) -> tuple[int, float]:
    """(tokens, seconds) of `count` streams opened at once (tokens from their usage events,
    the wall time of the slowest)."""
    body = {
        "model": MODEL,
        "prompt": PROMPT_IDS,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    got, seconds = harness.streams(target, body, count)
    for stream in got:
        if not stream.done or stream.usage_tokens is None:
            raise RuntimeError(
                f"port {target.port}: {stream.error or 'no usage event before [DONE]'}"
            )
    return sum(s.tokens for s in got), seconds


def cell(
    targets: list[Endpoint], count: int, tokens: int, rounds: int, direct: Endpoint
) -> dict[str, dict[str, Any]]:
    """Each target `rounds` times, in turn (the order rotating); per target its median tokens/s,
    and for an API (any but `direct`) its CPU per token and per stream in its median round (and
    each round's)."""
    for target in targets:  # warm-up: connections to the fake vLLM, the workers' first requests
        streams(target, count, 4)
    rates: dict[str, list[float]] = {t.label: [] for t in targets}
    cpu: dict[str, list[float]] = {t.label: [] for t in targets}  # seconds, per round
    for i in range(rounds):
        for target in targets[i % len(targets) :] + targets[: i % len(targets)]:
            before = cpu_seconds(target.pids())
            got, seconds = streams(target, count, tokens)
            if got != count * tokens:
                raise RuntimeError(f"{target.label}: {got} tokens, expected {count * tokens}")
            if target is not direct:
                cpu[target.label].append(cpu_seconds(target.pids()) - before)
            rates[target.label].append(got / seconds)
    # The median round: one round that another process's burst landed on moves a sum.
    return {
        t.label: {
            "rate": statistics.median(rates[t.label]),
            "rounds": rates[t.label],
            "us_rounds": [1e6 * c / (count * tokens) for c in cpu[t.label]],
            "us_per_token": 1e6 * statistics.median(cpu[t.label] or [0]) / (count * tokens),
            "ms_per_stream": 1e3 * statistics.median(cpu[t.label] or [0]) / count,
            "api": t is not direct,
        }
        for t in targets
    }


# -- the report --------------------------------------------------------------------------------


def report(
    args: argparse.Namespace,
    cells: dict[int, dict[str, dict[str, Any]]],
    direct: str,
    load: tuple[float, float],
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    baseline = (
        (
            f"; `reference@{args.baseline}` is the reference as of git {args.baseline}, in front of the "
            "same fake vLLM in the same cells"
        )
        if args.baseline
        else ""
    )
    lines = [
        "# The reference under a GPU's load (a simulated vLLM)",
        "",
        f"- Date: {now}",
        f"- Command: `{command_line('reference_load', sys.argv[1:])}`",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}; the fake vLLM, "
        f"the API and the client share these cores; load average {load[0]:.2f} before the run, {load[1]:.2f} after",
        f"- git {git}, Python {platform.python_version()}",
        f"- Upstream: `python -m bench.servers.fake_vllm --step-ms {args.step_ms:g}`: one token to every open request each "
        f"{args.step_ms:g} ms, in vLLM 0.32's bytes. The API: `python -m reference_impl --upstream ... "
        f"--workers {args.workers}` (gunicorn, gevent workers){baseline}",
        f"- Each stream: {args.tokens} tokens (`ignore_eos`, `include_usage`); all streams of a cell opened "
        f"at once; {args.rounds} rounds, the targets in turn, the median tokens/s shown. The ideal is "
        f"streams x {1000 / args.step_ms:g} tokens/s.",
        "",
        f"Goals (issue 9): through the reference at least {GOAL_RATIO:.0%} of the direct tokens/s with 256 "
        f"streams; the API's CPU at most {GOAL_API_US_PER_TOKEN:g} us per streamed token.",
        "",
        "| streams at once | target | tokens/s | ideal | of direct | API CPU us / token | API CPU ms / stream "
        "| rounds: tokens/s (API CPU) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for count, by_target in cells.items():
        ideal = count * 1000 / args.step_ms
        d = by_target[direct]["rate"]
        for name, r in by_target.items():
            share = f"{r['rate'] / d:.3f}" if r["api"] else ""
            cpu_t = f"{r['us_per_token']:.1f}" if r["api"] else ""
            cpu_s = f"{r['ms_per_stream']:.2f}" if r["api"] else ""
            rounds = ", ".join(f"{x:.0f}" for x in r["rounds"])
            if r["api"]:
                rounds += " (us / token: " + ", ".join(f"{x:.1f}" for x in r["us_rounds"]) + ")"
            lines.append(
                f"| {count} | {name} | {r['rate']:.0f} | {ideal:.0f} | {share} | {cpu_t} | {cpu_s} | {rounds} |"
            )
    lines += [
        "",
        "`API CPU` counts the API's processes only (not the fake vLLM, not the client), in the "
        "median round of that API; `ms / stream` is the same time per stream (its request and all its "
        "tokens).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--streams",
        type=lambda s: [int(c) for c in s.split(",")],
        default=[8, 64, 256],
        help="streams at once, one cell each (default 8,64,256)",
    )
    p.add_argument("--tokens", type=int, default=64, help="max_tokens of each stream")
    p.add_argument("--step-ms", type=float, default=20.0, help="the fake vLLM's batch step")
    p.add_argument("--rounds", type=int, default=3, help="rounds per cell and target")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers of the reference")
    p.add_argument(
        "--baseline", metavar="REF", help="also the reference as of git REF: old against new"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if not (MODEL_DIR / "config.json").exists():
        print(
            "needs models/tiny-llama (its config.json): bash scripts/setup_vllm.sh", file=sys.stderr
        )
        return 2
    load_before = os.getloadavg()[0]
    logs = Path(tempfile.mkdtemp(prefix="reference-load-"))
    servers: list[harness.Server] = []
    try:
        direct = harness.fake_vllm(args.step_ms, MODEL)
        servers.append(direct.run(logs, 30))
        servers.append(harness.reference_upstream(direct.url, args.workers).run(logs))
        if args.baseline:  # the reference as of git REF, in front of the same fake vLLM
            servers.append(
                harness.baseline(
                    args.baseline,
                    lambda folder: harness.reference_upstream(
                        direct.url, args.workers, key=f"reference@{args.baseline}", cwd=folder
                    ),
                )
            )
            servers[-1].run(logs)
        servers.append(harness.relay(direct.url).run(logs, 30))
        targets: list[Endpoint] = [*servers[1:], direct]
        cells = {}
        for count in args.streams:
            print(f"{count} streams ...", file=sys.stderr, flush=True)
            cells[count] = cell(targets, count, args.tokens, args.rounds, direct)
    except (RuntimeError, OSError, httpx.HTTPError) as exc:
        print(f"a target failed: {exc} (logs in {logs})", file=sys.stderr)
        return 1
    finally:
        for server in reversed(servers):
            server.stop()
    text = report(args, cells, direct.label, (load_before, os.getloadavg()[0]))
    write_report(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
