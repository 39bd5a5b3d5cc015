"""The reference under a GPU's load, against a simulated vLLM (bench/fake_vllm.py), in one run.

    .venv/bin/python bench/reference_load.py [--streams 8,64,256] [--tokens 64] [--step-ms 20]
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
import asyncio
import datetime
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench.git_export import export_commit  # noqa: E402
from http_report import write_report  # noqa: E402
from reference_bench import (  # noqa: E402
    GOAL_API_US_PER_TOKEN, GOAL_RATIO, MODEL, MODEL_DIR, Target, cpu_seconds, start_upstream_api, stop,
)
from reference_impl.launcher import free_port  # noqa: E402
from contract import spec  # noqa: E402

DEFAULT_OUT = ROOT / "bench" / "results" / "reference_load.md"
COMPLETIONS = spec().completions_path
PROMPT_IDS = [128000, 791, 13180, 374]
USAGE = re.compile(rb'"completion_tokens":(\d+)')


def _start(cmd: list[str], log: Path, what: str) -> tuple[subprocess.Popen[bytes], int]:
    """Run `cmd` plus `--port P` and wait until P takes connections."""
    port = free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([*cmd, "--port", str(port)], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.2)
    stop(proc)
    raise RuntimeError(f"{what} did not start: {log.read_text(errors='replace')[-2000:]}")


def start_fake(step_ms: float, log: Path) -> tuple[subprocess.Popen[bytes], Target]:
    proc, port = _start([sys.executable, str(ROOT / "bench" / "fake_vllm.py"), "--step-ms", str(step_ms),
                         "--model", MODEL], log, "the fake vLLM")
    return proc, Target("vLLM direct (fake)", f"http://127.0.0.1:{port}", {})


def start_relay(upstream: Target, log: Path) -> tuple[subprocess.Popen[bytes], Target]:
    """bench/relay.py: bytes copied and nothing else, the floor under the API's CPU per token."""
    proc, port = _start([sys.executable, str(ROOT / "bench" / "relay.py"), "--upstream", upstream.url],
                        log, "the relay")
    target = Target("relay (the floor)", f"http://127.0.0.1:{port}", {})
    target.pids = [proc.pid]
    return proc, target


# -- the load client ---------------------------------------------------------------------------

def request_bytes(target: Target, tokens: int) -> bytes:
    """One streaming POST, the prompt as token ids ("The sky is"): what the API sends vLLM."""
    body = orjson.dumps({"model": MODEL, "prompt": PROMPT_IDS, "max_tokens": tokens, "temperature": 0,
                         "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    host = target.url.removeprefix("http://")
    head = "".join(f"{k}: {v}\r\n" for k, v in target.headers.items())
    return (f"POST {COMPLETIONS} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{head}\r\n").encode() + body


async def one_stream(port: int, request: bytes) -> int:
    """Completion tokens of one stream, from its usage event; read to `data: [DONE]`."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        tail = b""
        while b"data: [DONE]" not in tail:
            chunk = await reader.read(65536)
            if not chunk:
                raise RuntimeError(f"port {port}: closed before [DONE]: {tail[-200:]!r}")
            tail = tail[-1024:] + chunk
        found = USAGE.findall(tail)
        if not found:
            raise RuntimeError(f"port {port}: no usage event before [DONE]")
        return int(found[-1])
    finally:
        writer.close()


async def _streams(port: int, request: bytes, count: int) -> tuple[int, float]:
    start = time.perf_counter()
    tokens = await asyncio.gather(*(one_stream(port, request) for _ in range(count)))
    return sum(tokens), time.perf_counter() - start


def streams(target: Target, count: int, tokens: int) -> tuple[int, float]:
    """(tokens, seconds) of `count` streams opened at once (the wall time of the slowest)."""
    port = int(target.url.rsplit(":", 1)[1])
    return uvloop.run(_streams(port, request_bytes(target, tokens), count))


def cell(targets: list[Target], count: int, tokens: int, rounds: int) -> dict[str, dict[str, Any]]:
    """Each target `rounds` times, in turn (the order rotating); per target its median tokens/s,
    and for an API its CPU per token and per stream in its median round (and each round's)."""
    for target in targets:   # warm-up: connections to the fake vLLM, the workers' first requests
        streams(target, count, 4)
    rates: dict[str, list[float]] = {t.name: [] for t in targets}
    cpu: dict[str, list[float]] = {t.name: [] for t in targets}   # seconds, per round
    for i in range(rounds):
        for target in targets[i % len(targets):] + targets[:i % len(targets)]:
            before = cpu_seconds(target.pids) if target.pids else 0.0
            got, seconds = streams(target, count, tokens)
            if got != count * tokens:
                raise RuntimeError(f"{target.name}: {got} tokens, expected {count * tokens}")
            if target.pids:
                cpu[target.name].append(cpu_seconds(target.pids) - before)
            rates[target.name].append(got / seconds)
    # The median round: one round that another process's burst landed on moves a sum.
    return {t.name: {"rate": statistics.median(rates[t.name]), "rounds": rates[t.name],
                     "us_rounds": [1e6 * c / (count * tokens) for c in cpu[t.name]],
                     "us_per_token": 1e6 * statistics.median(cpu[t.name] or [0]) / (count * tokens),
                     "ms_per_stream": 1e3 * statistics.median(cpu[t.name] or [0]) / count, "api": bool(t.pids)}
            for t in targets}


# -- the report --------------------------------------------------------------------------------

def report(args: argparse.Namespace, cells: dict[int, dict[str, dict[str, Any]]], direct: str,
           load: tuple[float, float]) -> str:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    baseline = (f"; `reference@{args.baseline}` is the reference as of git {args.baseline}, in front of the "
                "same fake vLLM in the same cells") if args.baseline else ""
    lines = [
        "# The reference under a GPU's load (a simulated vLLM)", "",
        f"- Date: {now}",
        f"- Command: `{' '.join(['.venv/bin/python', 'bench/reference_load.py', *sys.argv[1:]])}`",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores, Linux {platform.release()}; the fake vLLM, "
        f"the API and the client share these cores; load average {load[0]:.2f} before the run, {load[1]:.2f} after",
        f"- git {git}, Python {platform.python_version()}",
        f"- Upstream: `bench/fake_vllm.py --step-ms {args.step_ms:g}`: one token to every open request each "
        f"{args.step_ms:g} ms, in vLLM 0.32's bytes. The API: `python -m reference_impl --upstream ... "
        f"--workers {args.workers}` (gunicorn, gevent workers){baseline}",
        f"- Each stream: {args.tokens} tokens (`ignore_eos`, `include_usage`); all streams of a cell opened "
        f"at once; {args.rounds} rounds, the targets in turn, the median tokens/s shown. The ideal is "
        f"streams x {1000 / args.step_ms:g} tokens/s.", "",
        f"Goals (issue 9): through the reference at least {GOAL_RATIO:.0%} of the direct tokens/s with 256 "
        f"streams; the API's CPU at most {GOAL_API_US_PER_TOKEN:g} us per streamed token.", "",
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
            lines.append(f"| {count} | {name} | {r['rate']:.0f} | {ideal:.0f} | {share} | {cpu_t} | {cpu_s} | {rounds} |")
    lines += ["", "`API CPU` counts the API's processes only (not the fake vLLM, not the client), in the "
              "median round of that API; `ms / stream` is the same time per stream (its request and all its "
              "tokens).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=lambda s: [int(c) for c in s.split(",")], default=[8, 64, 256],
                   help="streams at once, one cell each (default 8,64,256)")
    p.add_argument("--tokens", type=int, default=64, help="max_tokens of each stream")
    p.add_argument("--step-ms", type=float, default=20.0, help="the fake vLLM's batch step")
    p.add_argument("--rounds", type=int, default=3, help="rounds per cell and target")
    p.add_argument("--workers", type=int, default=2, help="gunicorn workers of the reference")
    p.add_argument("--baseline", metavar="REF", help="also the reference as of git REF: old against new")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if not (MODEL_DIR / "config.json").exists():
        print("needs models/tiny-llama (its config.json): bash scripts/setup_vllm.sh", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    logs = Path(tempfile.mkdtemp(prefix="reference-load-"))
    procs: list[subprocess.Popen[bytes]] = []
    folder: Path | None = None
    try:
        fake, direct = start_fake(args.step_ms, logs / "fake.log")
        procs.append(fake)
        proc, ref = start_upstream_api("reference", ROOT, direct.url, args.workers, logs / "reference.log")
        procs.append(proc)
        targets = [ref]
        if args.baseline:
            folder = export_commit(args.baseline, "reference_load_base_")
            proc, base = start_upstream_api(f"reference@{args.baseline}", folder, direct.url, args.workers,
                                            logs / "base.log")
            procs.append(proc)
            targets.append(base)
        proc, floor = start_relay(direct, logs / "relay.log")
        procs.append(proc)
        targets += [floor, direct]
        cells = {}
        for count in args.streams:
            print(f"{count} streams ...", file=sys.stderr, flush=True)
            cells[count] = cell(targets, count, args.tokens, args.rounds)
    except (RuntimeError, OSError, httpx.HTTPError) as exc:
        print(f"a target failed: {exc} (logs in {logs})", file=sys.stderr)
        return 1
    finally:
        for proc in reversed(procs):
            stop(proc)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    text = report(args, cells, direct.name, (load_before, os.getloadavg()[0]))
    write_report(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    sys.exit(main())
