"""Where a paced stream's CPU goes: the stack, the mock's own work per request and per token, its metrics.

Issue 46 asks for a mock whose CPU per paced stream is at most half the bare Flask app's under
gunicorn + gevent. This splits that CPU, side by side in one run on the same cores:

- in process (no sockets, no server): N streams at once through each app's WSGI callable under
  gevent (monkey-patched, in a child process), at 2 and at 40 tokens paced X-Mock-Tpot-Ms apart:
  the CPU per stream; per token is the difference over the 38 tokens between, per request what is
  left at 2 tokens after its 2 tokens;
- served (api_server/serve.py, gunicorn + gevent, 2 workers): N paced streams at 100 ms a token
  opened at once against the bare app, the mock and the mock with --disable-log-stats (no vLLM
  metrics): the server's CPU per stream (all its processes, from /proc) at 2 and 40 tokens, split
  the same way; and at 20 tokens (issue 46's goals) with the wall time and the client's time to
  first token (p99).

    .venv/bin/python -m bench stream_cost [--streams 2000] [--rounds 2] [--baseline REF]

The served cost less the in-process one is what the stack spends (parsing, sockets, the hub);
the mock's in-process cost less the bare app's is the mock's own. Results: bench/results/stream_cost.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from bench import harness
from bench.harness import cpu_seconds, gather_streams, percentile, request_bytes
from bench.report import write_report

SHORT, LONG = 2, 40  # tokens of the streams that split a cost per request and per token
TOKENS, TPOT_MS = 20, 100  # the goals' streams, as bench.stacks's
WORKERS = 2
BODY: dict[str, Any] = {"model": "llama-8b", "prompt": "The sky is", "stream": True}


def split(short_ms: float, long_ms: float) -> tuple[float, float]:
    """CPU per token and per request (less its SHORT tokens), in us, from the CPU per stream
    at SHORT and at LONG tokens."""
    per_token = 1000 * (long_ms - short_ms) / (LONG - SHORT)
    return per_token, 1000 * short_ms - SHORT * per_token


def _inner(app_name: str, tokens: int, count: int) -> dict[str, float]:
    """In this (child) process: `count` streams of `tokens` at once through the app; CPU per stream."""
    from gevent import monkey

    monkey.patch_all()
    import io

    import gevent

    if app_name == "bare":
        from bench.servers.bare_app import app
    else:
        from mock_server import create_app

        app = create_app()
    raw = json.dumps({**BODY, "max_tokens": tokens, "ignore_eos": True}).encode()
    environ = harness.wsgi_environ(raw, {"X-Mock-Tpot-Ms": "10"})

    def start_response(*args: Any) -> Any:
        return None

    def one() -> int:
        body: Any = app({**environ, "wsgi.input": io.BytesIO(raw)}, start_response)
        try:
            return sum(chunk.count(b"data: {") for chunk in body)
        finally:
            body.close()

    for _ in range(50):  # warm: the first requests build tables
        one()
    before = time.process_time()
    greenlets = [gevent.spawn(one) for _ in range(count)]
    gevent.joinall(greenlets)
    cpu = time.process_time() - before
    events = min(g.value or 0 for g in greenlets)
    return {"cpu_ms_per_stream": 1000 * cpu / count, "events": events}


def in_process(app_name: str, tokens: int, count: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.stream_cost", "--inner", f"{app_name},{tokens},{count}"],
        cwd=harness.ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.splitlines()[-1])


def served(server: harness.Server, count: int, tokens: int) -> dict[str, float]:
    request = request_bytes(
        server,
        {**BODY, "max_tokens": tokens, "ignore_eos": True},
        {"X-Mock-Tpot-Ms": str(TPOT_MS)},
    )
    before = cpu_seconds(server.pids())
    results, wall = uvloop.run(gather_streams(server.port, request, count))
    cpu = cpu_seconds(server.pids()) - before
    ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
    time.sleep(2)  # the closed connections' TIME_WAIT and the workers settle
    return {
        "cpu_ms_per_stream": 1000 * cpu / count,
        "wall_s": wall,
        "ttft_p99_s": percentile(ttfts, 99) if ttfts else float("nan"),
        "done": sum(r.done for r in results),
    }


def _median(cells: list[dict[str, float]], key: str) -> float:
    values = sorted(c[key] for c in cells)
    return values[len(values) // 2]


def _split_rows(cells: dict, names: dict[str, str]) -> list[str]:
    rows = []
    for key, label in names.items():
        short = _median(cells[(key, SHORT)], "cpu_ms_per_stream")
        long = _median(cells[(key, LONG)], "cpu_ms_per_stream")
        per_token, per_request = split(short, long)
        rows.append(f"| {label} | {short:.3f} | {long:.3f} | {per_token:.1f} | {per_request:.0f} |")
    return rows


def markdown(inner: dict, outer: dict, labels: dict[str, str], args: Any, cmd: str) -> str:
    head = (
        f"| app | CPU ms/stream at {SHORT} tokens | at {LONG} tokens | us per token "
        f"| us per request (less its {SHORT} tokens) |"
    )
    lines = [
        "# Where a paced stream's CPU goes",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Command: `{cmd}`",
        f"- Machine: {os.cpu_count()} cores; the load client shares them with the servers",
        f"- {args.rounds} rounds, the servers interleaved in each; the median round shown",
        "",
        f"## In process: {args.streams} streams at once through the WSGI app (gevent, no sockets)",
        "",
        head,
        "| --- | ---: | ---: | ---: | ---: |",
        *_split_rows(inner, {"bare": "bare Flask", "mock": "mock"}),
        "",
        f"## Served: {args.streams} paced streams opened at once ({TPOT_MS} ms a token), "
        f"gunicorn + gevent, {WORKERS} workers",
        "",
        head,
        "| --- | ---: | ---: | ---: | ---: |",
        *_split_rows(outer, labels),
    ]
    ideal = TOKENS * TPOT_MS / 1000
    lines += [
        "",
        f"At {TOKENS} tokens (ideal {ideal:.0f} s):",
        "",
        "| server | server CPU ms/stream | wall s (x ideal) | TTFT p99 s | done |",
        "| --- | ---: | --- | ---: | --- |",
    ]
    for key, label in labels.items():
        cells = outer[(key, TOKENS)]
        wall = _median(cells, "wall_s")
        lines.append(
            f"| {label} | {_median(cells, 'cpu_ms_per_stream'):.2f} | {wall:.2f} "
            f"({wall / ideal:.2f}x) | {_median(cells, 'ttft_p99_s'):.2f} "
            f"| {min(c['done'] for c in cells):.0f} of {args.streams} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=2000, help="streams at once (default 2000)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, servers interleaved (default 2)")
    p.add_argument(
        "--baseline",
        default="",
        help="also serve the mock as of git REF (mock@REF), old beside new",
    )
    p.add_argument("--inner", help=argparse.SUPPRESS)  # APP,TOKENS,COUNT: one in-process cell
    p.add_argument(
        "--out", type=Path, default=harness.ROOT / "bench" / "results" / "stream_cost.md"
    )
    args = p.parse_args(argv)
    if args.inner:
        app_name, tokens, count = args.inner.split(",")
        print(json.dumps(_inner(app_name, int(tokens), int(count))))
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    connections = str(args.streams + 64)
    servers = {
        "bare": harness.bare("--workers", str(WORKERS), "--connections", connections, key="bare"),
        "mock": harness.mock("--workers", str(WORKERS), "--connections", connections, key="mock"),
        "mock-nostats": harness.mock(
            "--workers",
            str(WORKERS),
            "--connections",
            connections,
            "--disable-log-stats",
            key="mock-nostats",
        ),  # fmt: skip
    }
    labels = {
        "bare": "bare Flask",
        "mock": "mock",
        "mock-nostats": "mock --disable-log-stats",
    }
    if args.baseline:
        key = f"mock@{args.baseline}"
        servers[key] = harness.baseline(
            args.baseline,
            lambda folder: harness.mock(
                "--workers", str(WORKERS), "--connections", connections, key=key, cwd=folder
            ),
        )
        labels[key] = key
    inner: dict[tuple[str, int], list[dict[str, float]]] = {}
    outer: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for app_name in ("bare", "mock"):
            for tokens in (SHORT, LONG):
                cell = in_process(app_name, tokens, args.streams)
                inner.setdefault((app_name, tokens), []).append(cell)
                print(f"  in process {app_name} {tokens} tokens: {cell}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="stream-cost-") as tmp:
        try:
            for s in servers.values():
                s.run(Path(tmp))
            for _ in range(args.rounds):
                for tokens in (SHORT, TOKENS, LONG):
                    for key, s in servers.items():
                        cell = served(s, args.streams, tokens)
                        outer.setdefault((key, tokens), []).append(cell)
                        print(f"  served {key} {tokens} tokens: {cell}", file=sys.stderr)
        finally:
            for s in servers.values():
                s.stop()
    cmd = harness.command_line("stream_cost", argv if argv is not None else sys.argv[1:])
    write_report(args.out, markdown(inner, outer, labels, args, cmd))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
