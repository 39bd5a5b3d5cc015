"""HTTP serving: the mock vs Prism vs a bare Flask app, side by side, in one run.

    .venv/bin/python -m bench http [--duration S]

Starts the servers on free ports of 127.0.0.1 (http_servers.py) -- the mock
(`python -m mock_server`), Prism (`@stoplight/prism-cli`, pinned in
bench/package-lock.json, mocking openapi.yaml) and bench/servers/bare_app.py under the mock's
server settings (the ceiling); `--servers` adds the candidates `mock-gthread` and
`bare-gthread`, and `--baseline REF[,REF...]` the mock as of each git REF, old against new in one run --
then measures (http_measure.py):

  (a) a 400 validation error (max_tokens as a string) and
  (b) a 16-token completion (max_tokens 16, temperature 0)
      with wrk at each connection count: requests/s, p50 and p99 latency;
  (c) one unthrottled stream (max_tokens 4096, ignore_eos): tokens/s from a Python client;
  (d) --streams streams opened at once (20 tokens at 100 ms each): [DONE], wall time,
      time to first token, memory per open stream;
  (e) --stalled clients that send half a body and go silent: a normal request's latency
      beside them, and each one's answer after the body-read timeout.

Writes a markdown report (http_report.py) to bench/results/http.md and prints it.
Servers are stopped at the end, also on error or Ctrl-C.

Exit codes: 0 every cell measured; 1 some cell could not be measured (a server did not
start or answered with the wrong status; the report says which); 2 usage or tooling
error (wrk missing, bad option).
"""

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import BENCH, ServerFailed, command_line
from bench.http_measure import (
    measure_cell,
    measure_concurrency,
    measure_stalled,
    measure_stream,
    median_round,
    warm_up,
)
from bench.http_report import collect_versions, report
from bench.http_servers import CASES, SERVERS, BenchError, add_server_arguments, build_servers
from bench.report import write_report

DEFAULT_OUT = BENCH / "results" / "http.md"
EXIT_OK, EXIT_UNMEASURED, EXIT_USAGE = 0, 1, 2


def measure(servers, args, workdir):
    """Every cell, round after round, servers interleaved so that drift in the machine's
    load spreads over all of them; a cell's result is its median round by requests/s.
    Returns {(case, connections, server): result or {"na": reason}}, the streams, and
    the (d), (e) cells as {("d" or "e", server): result}."""
    rounds = {}
    for case in CASES:
        (workdir / f"body_{case.key}.json").write_text(json.dumps(case.body))
    warm_up(servers, args, workdir)
    for _ in range(args.rounds):
        for case in CASES:
            body_file = workdir / f"body_{case.key}.json"
            for conns in args.connections:
                for server in servers:
                    cell = case.key, conns, server.key
                    if "na" in rounds.get(cell, [{}])[-1]:
                        continue
                    result = measure_cell(server, case, conns, args, body_file)
                    rounds.setdefault(cell, []).append(result)
    cells = {cell: median_round(results) for cell, results in rounds.items()}
    streams = {server.key: measure_stream(server, args) for server in servers}
    extra = {}
    for server in servers:
        if args.streams:
            extra["d", server.key] = measure_concurrency(
                server, args.streams, args.stream_tokens, args.tpot_ms
            )
        if args.stalled:
            extra["e", server.key] = measure_stalled(server, args.stalled)
    return cells, streams, extra


def run(args):
    try:
        servers = build_servers(args)
    except ServerFailed as e:  # a --baseline git cannot export
        raise BenchError(str(e)) from None
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="http_bench_")))
        for server in servers:  # all started, then all waited for: they start side by side
            stack.callback(server.stop)
            try:
                server.start(workdir)
            except ServerFailed as e:
                server.failure = str(e)
        for server in servers:
            if server.failure is None:
                try:
                    server.wait(args.start_timeout)
                except ServerFailed as e:
                    server.failure = " ".join(str(e).split())[-600:]
                    server.stop()
        load_before = os.getloadavg()
        print(
            "servers: "
            + ", ".join(f"{s.label} {s.url if not s.failure else 'FAILED'}" for s in servers),
            file=sys.stderr,
        )
        cells, streams, extra = measure(servers, args, workdir)
        versions = collect_versions()
        versions["load"] = (load_before, os.getloadavg())
    return servers, cells, streams, extra, versions


def install_wrk():
    """apt-get install -y wrk, where apt-get is there and may install (root); True if wrk is then found."""
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return False
    print("installing wrk: apt-get install -y wrk", file=sys.stderr)
    subprocess.run([apt, "install", "-y", "wrk"], capture_output=True)
    if shutil.which("wrk") is None:  # an index that lacks it: update once, then try again
        subprocess.run([apt, "update"], capture_output=True)
        subprocess.run([apt, "install", "-y", "wrk"], capture_output=True)
    return shutil.which("wrk") is not None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=5, help="seconds per measured cell (default 5)")
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="warm-up seconds per server and case, before the rounds (default 3)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds of every cell; the median round is shown (default 3)",
    )
    p.add_argument(
        "--connections",
        type=lambda s: [int(c) for c in s.split(",")],
        default=[1, 64],
        help="wrk connection counts (default 1,64)",
    )
    # The mock's own serving options and defaults (api_server/serve.py), for the mock
    # and the ceiling alike. --connections is wrk's here, so the server's is renamed.
    serving = argparse.ArgumentParser(add_help=False)
    add_server_arguments(serving)
    for action in serving._actions:
        if action.dest == "connections":
            action.option_strings, action.dest = ["--server-connections"], "connections_per_worker"
        p._add_action(action)
    p.add_argument(
        "--servers",
        type=lambda s: s.split(","),
        default=["mock", "prism", "bare"],
        help=f"a subset of {','.join(SERVERS)} (default mock,prism,bare)",
    )
    p.add_argument(
        "--baseline",
        metavar="REF[,REF...]",
        type=lambda s: s.split(","),
        default=[],
        help="also run the mock as of each git REF (column mock@REF): old against new in one run, "
        "or a bisection (several commits side by side)",
    )
    p.add_argument(
        "--streams", type=int, default=2000, help="(d) streams opened at once; 0 skips (d)"
    )
    p.add_argument("--stream-tokens", type=int, default=20, help="(d) tokens per stream")
    p.add_argument("--tpot-ms", type=int, default=100, help="(d) milliseconds per token")
    p.add_argument("--stalled", type=int, default=500, help="(e) stalled clients; 0 skips (e)")
    p.add_argument("--start-timeout", type=float, default=60, help="seconds to wait for /health")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown report path")
    args = p.parse_args(argv)
    unknown = set(args.servers) - set(SERVERS)
    if unknown:
        p.error(f"unknown servers: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if shutil.which("wrk") is None and not install_wrk():
        print("wrk is not installed: apt-get install -y wrk", file=sys.stderr)
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    command = command_line("http_bench", argv)
    try:
        servers, cells, streams, extra, versions = run(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    text = report(servers, cells, streams, extra, versions, args, command)
    write_report(args.out, text)
    print(text)
    measured = all("na" not in c for c in cells.values())
    return EXIT_OK if measured and not any(s.failure for s in servers) else EXIT_UNMEASURED


if __name__ == "__main__":
    sys.exit(main())
