"""Serving stacks side by side under thousands of open streams: gunicorn+gevent, uWSGI, granian, uvicorn.

Issue 46: the same bare Flask app (bench/servers/bare_app.py) under gunicorn + gevent (today's,
api_server/serve.py), uWSGI's gevent loop (the pyuwsgi wheel) and granian (its WSGI interface, a
thread per request in flight); the ceiling of an ASGI face (bench/servers/bare_asgi.py: the same
bodies, no framework, asyncio's waits) under granian's ASGI interface and uvicorn (uvloop,
httptools); and the mock under gunicorn, uWSGI and, behind an ASGI face that keeps its Flask app
(bench/servers/mock_asgi.py), uvicorn. Side by side in one run:

- a 16-token completion with wrk at 1 and 64 connections: requests/s and the server's CPU per
  request (all its processes, from /proc);
- N paced streams opened at once (20 tokens at 100 ms, ideal 2 s): how many end with [DONE], the
  wall time against the ideal, time to first token (p50, p99) and each stream's mean
  inter-token gap (the mean over streams against the profile's, and the p99) as the client saw
  them, the server's CPU per stream and the load client's own CPU; for the mock
  under gunicorn, beside the profile's TTFT and ITL, what its own /metrics observed and what the
  client saw (means).

    .venv/bin/python -m bench stacks [--streams 2000,10000] [--servers bare-gunicorn,mock-uwsgi,...]

Each stack serves the bare app (the ceiling: fixed bodies) and, where it can import one, the mock
(bench/servers/mock_wsgi.py and mock_asgi.py: its answers and pacing, none of its gunicorn
worker). The servers interleave cell by cell; results go to bench/results/stacks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import uvloop

from bench import harness
from bench.harness import Server, cpu_seconds, free_port, gather_streams, percentile, request_bytes
from bench.http_measure import measure_cell
from bench.http_servers import CASES
from bench.mock_vs_vllm import SERIES, means, totals
from bench.report import write_report

BIN = Path(sys.executable).parent
TOKENS, TPOT_MS = 20, 100
WORKERS = 2  # one per core here


def gunicorn(app: str, connections: int) -> Server:
    if app == "mock":
        return harness.mock(
            "--workers", str(WORKERS), "--connections", str(connections),
            key="mock-gunicorn", label="mock, gunicorn+gevent",
        )  # fmt: skip
    return harness.bare(
        "--workers", str(WORKERS), "--worker", "gevent", "--connections", str(connections),
        key="bare-gunicorn", label="bare, gunicorn+gevent",
    )  # fmt: skip


def uwsgi(app: str, connections: int) -> Server:
    port = free_port()
    argv = [
        str(BIN / "uwsgi"),
        "--http-socket", f"127.0.0.1:{port}",
        "--module", APPS[app],
        "--processes", str(WORKERS),
        "--gevent", str(connections // WORKERS + 1),
        "--gevent-monkey-patch",
        "--master", "--need-app", "--die-on-term", "--disable-logging",
        "--listen", str(min(connections, 4096)),
        "--buffer-size", "65535",
    ]  # fmt: skip
    return Server(f"{app}-uwsgi", argv, port, label=f"{app}, uWSGI+gevent", api_key=harness.API_KEY)


def granian(app: str, connections: int, interface: str = "wsgi") -> Server:
    """granian's WSGI interface (a blocking thread per request in flight) or its ASGI one."""
    port = free_port()
    if interface == "wsgi":
        own = ["--blocking-threads", str(connections // WORKERS + 1), APPS[app]]
        key, label = f"{app}-granian", f"{app}, granian"
    else:
        own = ["--loop", "uvloop", ASGI_APPS[app]]
        key, label = f"{app}-granian_asgi", f"{app}, granian ASGI"
    argv = [
        str(BIN / "granian"),
        "--interface", interface,
        "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(WORKERS),
        "--backlog", str(min(connections, 4096)),
        "--log-level", "warning", "--no-ws",
        *own,
    ]  # fmt: skip
    return Server(key, argv, port, label=label, api_key=harness.API_KEY)


def uvicorn(app: str, connections: int) -> Server:
    port = free_port()
    argv = [
        str(BIN / "uvicorn"),
        "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(WORKERS),
        "--loop", "uvloop", "--http", "httptools",
        "--backlog", str(min(connections, 4096)),
        "--log-level", "warning", "--no-access-log",
        ASGI_APPS[app],
    ]  # fmt: skip
    return Server(f"{app}-uvicorn", argv, port, label=f"{app}, uvicorn", api_key=harness.API_KEY)


APPS = {"bare": "bench.servers.bare_app:app", "mock": "bench.servers.mock_wsgi:app"}
# The ASGI servers' apps (issue 46): the bare bodies with asyncio's waits, and the mock behind a face.
ASGI_APPS = {"bare": "bench.servers.bare_asgi:app", "mock": "bench.servers.mock_asgi:app"}
STACKS: dict[str, Callable[[str, int], Server]] = {
    "gunicorn": gunicorn,
    "uwsgi": uwsgi,
    "granian": granian,
    "granian_asgi": partial(granian, interface="asgi"),
    "uvicorn": uvicorn,
}
DEFAULT = (
    "bare-gunicorn,bare-uwsgi,bare-granian,bare-granian_asgi,bare-uvicorn,"
    "mock-gunicorn,mock-uwsgi,mock-uvicorn"
)


async def _paced(server: Server, n: int) -> dict[str, Any]:
    body = {"model": "llama-8b", "prompt": "The sky is", "max_tokens": TOKENS, "stream": True}
    request = request_bytes(server, body, {"X-Mock-Tpot-Ms": str(TPOT_MS)})
    # the mock as `python -m mock_server` serves it keeps vLLM's histograms over all its workers
    scraped = server.key == "mock-gunicorn"
    own_before = totals(server.url) if scraped else {}
    cpu_before, client_before = cpu_seconds(server.pids()), time.process_time()
    results, wall = await gather_streams(server.port, request, n)
    client_cpu = time.process_time() - client_before
    own = means(own_before, totals(server.url)) if scraped else {}
    ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
    # a stream's mean gap between its events after the first (the client reads no per-event time)
    gaps = [
        (r.seconds - r.ttft_s) / (r.events - 1)
        for r in results
        if r.done and r.ttft_s is not None and r.events > 1
    ]
    done = sum(r.done for r in results)
    return {
        "done": done,
        "wall_s": wall,
        "ttft_p50_s": percentile(ttfts, 50) if ttfts else None,
        "ttft_p99_s": percentile(ttfts, 99) if ttfts else None,
        "gap_p99_s": percentile(gaps, 99) if gaps else None,
        "ttft_mean_ms": 1000 * sum(ttfts) / len(ttfts) if ttfts else None,
        "gap_mean_ms": 1000 * sum(gaps) / len(gaps) if gaps else None,
        "own_ttft_ms": own.get(SERIES[0]),
        "own_itl_ms": own.get(SERIES[1]),
        "cpu_ms_per_stream": 1000 * (cpu_seconds(server.pids()) - cpu_before) / n,
        "client_cpu_s": client_cpu,
        "errors": sorted({str(r.error) for r in results if not r.done})[:2],
    }


def paced(server: Server, n: int) -> dict[str, Any]:
    if server.failure:
        return {"na": server.failure}
    print(f"  {n} paced streams {server.label:16}", end=" ", flush=True, file=sys.stderr)
    cell = uvloop.run(_paced(server, n))
    print(f"{cell['done']} done in {cell['wall_s']:.1f} s", file=sys.stderr)
    time.sleep(2)  # the closed connections' TIME_WAIT and the workers settle
    return cell


def _gap(ms: float | None) -> str:
    """The client's mean inter-token gap against the profile's (issue 56's 10,000-stream goal)."""
    return "n/a" if ms is None else f"{ms:.1f} ({ms / TPOT_MS:.2f}x)"


def _x(value: float | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if value is None else fmt.format(value)


def markdown(
    servers: list[Server], rps: dict, errors: dict, streams: dict, counts: list[int], cmd: str
) -> str:
    lines = [
        "# The serving stack: the bare app and the mock under each server",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Command: `{cmd}`",
        f"- Machine: {os.cpu_count()} cores; the load clients share them with the servers",
        f"- Each stack: {WORKERS} worker processes. `bare`: bench/servers/bare_app.py (fixed "
        "bodies; a paced stream sleeps X-Mock-Tpot-Ms between chunks: gevent's sleep under "
        "gunicorn and uWSGI, a real thread's under granian's WSGI); `bare` under granian ASGI "
        "and uvicorn: bench/servers/bare_asgi.py (the same bodies without a framework, "
        "asyncio.sleep); `mock`: the mock, under gunicorn as `python -m mock_server` serves it, "
        "under uWSGI its Flask app alone (bench/servers/mock_wsgi.py), under uvicorn its Flask "
        "app behind an ASGI face (bench/servers/mock_asgi.py: a greenlet per request, the "
        "pacing's waits awaited)",
        "",
        "## A 16-token completion (wrk, the median of the servers' interleaved cells)",
        "",
        "| stack | c=1 req/s | c=1 CPU us/req | c=64 req/s | c=64 CPU us/req |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for s in servers:
        row = [s.label]
        for conns in (1, 64):
            cell = rps.get((s.key, conns), {})
            if "na" in cell or not cell:
                row += [cell.get("na", "n/a"), ""]
                continue
            row += [f"{cell['rps']:,.0f}", f"{1e6 * cell['cpu_s'] / max(cell['requests'], 1):,.0f}"]
        lines.append("| " + " | ".join(row) + " |")
    lines += [
        "",
        "## A 400 (max_tokens as a string: validation's answer), wrk at 64 connections",
        "",
        "| stack | req/s | CPU us/req |",
        "| --- | ---: | ---: |",
    ]
    for s in servers:
        cell = errors.get(s.key, {})
        if "na" in cell or not cell:
            lines.append(f"| {s.label} | {cell.get('na', 'n/a')} | |")
            continue
        cpu = 1e6 * cell["cpu_s"] / max(cell["requests"], 1)
        lines.append(f"| {s.label} | {cell['rps']:,.0f} | {cpu:,.0f} |")
    ideal = TOKENS * TPOT_MS / 1000
    lines += [
        "",
        f"## Paced streams opened at once ({TOKENS} tokens at {TPOT_MS} ms, ideal {ideal:.0f} s)",
        "",
        "| stack | streams | done | wall s (x ideal) | TTFT p50 / p99 s | mean gap ms (x profile) "
        "| mean gap p99 s | server CPU ms/stream | client CPU s | errors |",
        "| --- | ---: | --- | --- | --- | --- | --- | ---: | ---: | --- |",
    ]
    for n in counts:
        for s in servers:
            c = streams.get((s.key, n), {})
            if "na" in c or not c:
                lines.append(f"| {s.label} | {n} | {c.get('na', 'n/a')} | | | | | | | |")
                continue
            lines.append(
                f"| {s.label} | {n} | {c['done']} of {n} | {c['wall_s']:.1f} "
                f"({c['wall_s'] / ideal:.2f}x) | {_x(c['ttft_p50_s'])} / {_x(c['ttft_p99_s'])} | "
                f"{_gap(c['gap_mean_ms'])} | {_x(c['gap_p99_s'])} | "
                f"{c['cpu_ms_per_stream']:.2f} | {c['client_cpu_s']:.1f} | "
                f"{'; '.join(c['errors'])} |"
            )
    lines += [
        "",
        "## What the mock's own /metrics saw, beside the client",
        "",
        f"The profile: TTFT 0 ms (the mock's default), ITL {TPOT_MS} ms (X-Mock-Tpot-Ms). Means in "
        "ms: the client's (from its clock, reading the same streams) and the server's own "
        "(vllm:time_to_first_token_seconds and vllm:inter_token_latency_seconds, the difference "
        "of two scrapes of the mock under gunicorn, whose workers share one multiprocess "
        "registry).",
        "",
        "| streams | TTFT: profile / mock's own / client | ITL: profile / mock's own / client |",
        "| ---: | --- | --- |",
    ]
    for n in counts:
        c = streams.get(("mock-gunicorn", n), {})
        if c and "na" not in c:
            lines.append(
                f"| {n} | 0 / {_x(c['own_ttft_ms'], '{:.1f}')} / {_x(c['ttft_mean_ms'], '{:.1f}')} "
                f"| {TPOT_MS} / {_x(c['own_itl_ms'], '{:.1f}')} / {_x(c['gap_mean_ms'], '{:.1f}')} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--streams", default="2000,10000", help="paced stream counts (default 2000,10000)"
    )
    p.add_argument(
        "--servers", default=DEFAULT, help=f"APP-STACK, APP of {sorted(APPS)} (default {DEFAULT})"
    )
    p.add_argument("--duration", type=int, default=5, help="seconds per wrk cell (default 5)")
    p.add_argument("--out", type=Path, default=harness.ROOT / "bench" / "results" / "stacks.md")
    args = p.parse_args(argv)
    # every stream is a socket of the client's and one of a server's: the servers inherit this
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    counts = [int(n) for n in args.streams.split(",") if n]
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 2
    connections = max(counts) + 64
    servers = [
        STACKS[stack](app, connections)
        for app, stack in (name.split("-", 1) for name in args.servers.split(","))
    ]
    case = next(c for c in CASES if c.key == "b")
    refused = next(c for c in CASES if c.key == "a")  # the 400: validation's cost alone
    rps: dict[tuple[str, int], dict[str, Any]] = {}
    errors: dict[str, dict[str, Any]] = {}
    streams: dict[tuple[str, int], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="stacks-") as tmp:
        logs = Path(tmp)
        body_file, refused_file = logs / "body.json", logs / "refused.json"
        body_file.write_text(json.dumps(case.body))
        refused_file.write_text(json.dumps(refused.body))
        try:
            for s in servers:
                try:
                    s.run(logs)
                except harness.ServerFailed as e:
                    s.failure = str(e)[:200]
            for conns in (1, 64):
                for s in servers:
                    rps[(s.key, conns)] = measure_cell(s, case, conns, args, body_file)
            for s in servers:
                errors[s.key] = measure_cell(s, refused, 64, args, refused_file)
            for n in counts:
                for s in servers:
                    streams[(s.key, n)] = paced(s, n)
        finally:
            for s in servers:
                s.stop()
    cmd = ".venv/bin/python -m bench stacks " + " ".join(argv or sys.argv[1:])
    write_report(args.out, markdown(servers, rps, errors, streams, counts, cmd.strip()))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
