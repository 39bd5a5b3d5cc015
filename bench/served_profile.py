"""Where a served worker's CPU goes: the mock and the bare Flask app under the same gunicorn + gevent,
sampled by py-spy while wrk sends a 16-token completion, side by side in one run.

    .venv/bin/python -m bench served_profile [--duration S] [--connections N] [--rate HZ]

Each server runs with 2 workers; py-spy samples every worker (`--subprocesses`, `--nonblocking`:
the workers are never stopped) while wrk holds N connections for S seconds. The server's CPU per
request is its processes' CPU over the run divided by wrk's requests; each sample is put to the
component of the innermost frame that is one of ours or a library's (COMPONENTS, in order: the
first whose pattern the frame's file matches), so a component's share of the samples times the
CPU per request is its microseconds per request. The difference between the two servers, row by
row, is what only the mock pays served. A native extension's time (orjson, jsonschema-rs) is
its Python caller's: py-spy samples Python frames. Profiling slows a worker; the shares hold, the absolute
microseconds are those of the profiled run (the requests/s beside them says by how much).

Writes bench/results/served_profile.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import harness
from bench.http_measure import run_wrk
from bench.http_servers import CASES
from bench.report import write_report

WORKERS = 2
# --streams: the paced streams of bench.stacks (20 tokens, 100 ms apart)
STREAM = {"model": "llama-8b", "prompt": "The sky is", "max_tokens": 20, "stream": True}
TPOT_MS = 100
PACED = {"X-Mock-Tpot-Ms": str(TPOT_MS)}
BIN = Path(sys.executable).parent
# (component, pattern of a frame's file): the first match from the innermost frame outward
COMPONENTS = (
    (
        "the fake engine (sampling, the model)",
        r"mock_server/engine/",
    ),
    (
        "vLLM's metrics (prometheus_client, metered)",
        r"prometheus_client/|mock_server/hook/(metered|metrics|kv_cache)",
    ),
    (
        "the mock's faults and headers",
        r"mock_server/hook/(faults|latency|load|profiles|control|counts)",
    ),
    ("validation and errors (contract/)", r"(^|/)contract/"),
    ("the API layer (api_server/; the bare app's view)", r"(^|/)api_server/|servers/bare_app"),
    ("JSON (the stdlib's json)", r"(^|/)json/"),
    ("Flask and werkzeug", r"(^|/)(flask|werkzeug)/"),
    ("gunicorn (parsing, writing)", r"(^|/)gunicorn/"),
    ("gevent (the loop, sockets)", r"(^|/)(gevent|greenlet)/"),
    ("the rest (the interpreter, the stdlib)", r"."),
)


def frame_file(frame: str) -> str:
    m = re.match(r".* \((.*?)(:\d+)?\)$", frame)
    return m.group(1) if m else frame


def component_of(stack: list[str]) -> str:
    """The component of a sample: its innermost frame that matches one other than the rest's."""
    for frame in reversed(stack):
        file = frame_file(frame)
        for name, pattern in COMPONENTS[:-1]:
            if re.search(pattern, file):
                return name
    return COMPONENTS[-1][0]


def shares(raw: Path) -> dict[str, float]:
    """Each component's share of the samples in py-spy's collapsed stacks."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if stack:
            counts[component_of(stack.split(";")[1:])] += int(n)  # [0]: the process
    total = sum(counts.values()) or 1
    return {name: counts[name] / total for name, _ in COMPONENTS}


def profile(server: harness.Server, args: argparse.Namespace, workdir: Path) -> dict[str, object]:
    case = next(c for c in CASES if c.key == "b")
    body = workdir / "body.json"
    body.write_text(json.dumps(case.body))
    run_wrk(server, case, args.connections, 2, body)  # warm
    raw = (args.raw or workdir) / f"{server.key}.raw"
    assert server.proc is not None
    spy = _spy(server.proc.pid, args.duration + 2, args.rate, raw)
    pids = server.pids()
    before = harness.cpu_seconds(pids)
    if args.streams:
        count = 0
        began = time.monotonic()
        while time.monotonic() - began < args.duration:
            opened, _ = harness.streams(server, STREAM, args.streams, PACED)
            count += sum(s.done for s in opened)
        per, rate = count, count / (time.monotonic() - began)
    else:
        done = run_wrk(server, case, args.connections, args.duration, body)
        per, rate = done["requests"], done["requests"] / (done["duration_us"] / 1e6)
    cpu = harness.cpu_seconds(pids) - before
    _, err = spy.communicate(timeout=120)
    if not raw.exists():
        raise harness.ServerFailed(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
    return {"rps": rate, "us": cpu / per * 1e6, "shares": shares(raw)}


def _spy(pid: int, seconds: int, rate: int, raw: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(BIN / "py-spy"), "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
            "--rate", str(rate), "--duration", str(seconds), "--format", "raw", "--output", str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def render(rows: dict[str, dict[str, object]], args: argparse.Namespace) -> str:
    bare, mock = rows["bare"], rows["mock"]
    unit = "stream" if args.streams else "request"
    lines = [
        "# Where a served worker's CPU goes: the mock and the bare Flask app",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Command: `.venv/bin/python -m bench served_profile --duration {args.duration}"
        f" --rate {args.rate} "
        + (f"--streams {args.streams}`" if args.streams else f"--connections {args.connections}`"),
        f"- Machine: {os.cpu_count()} cores; the load client and py-spy share them with the servers",
        f"- Both under gunicorn + gevent ({WORKERS} workers, api_server/serve.py's settings), "
        + (
            f"{args.streams} paced streams opened at once ({STREAM['max_tokens']} tokens,"
            f" {TPOT_MS} ms apart), again for {args.duration} s"
            if args.streams
            else "a 16-token completion (bench/http_servers.py case b) from wrk"
        )
        + ", py-spy sampling every worker",
        "",
        f"{unit.capitalize()}s/s while profiled: bare {bare['rps']:,.0f}, mock {mock['rps']:,.0f};"
        f" server CPU per {unit}: bare {bare['us']:.0f} us, mock {mock['us']:.0f} us.",
        "",
        f"| component (innermost frame) | bare: share | bare us/{unit} | mock: share"
        f" | mock us/{unit} | mock - bare us |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    bs, ms = bare["shares"], mock["shares"]
    assert isinstance(bs, dict) and isinstance(ms, dict)
    for name, _ in COMPONENTS:
        b_us, m_us = bs[name] * float(bare["us"]), ms[name] * float(mock["us"])  # type: ignore[arg-type]
        lines.append(
            f"| {name} | {bs[name]:.1%} | {b_us:.0f} | {ms[name]:.1%} | {m_us:.0f} | {m_us - b_us:+.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=int, default=10, help="seconds profiled (default 10)")
    p.add_argument("--connections", type=int, default=64, help="wrk's connections (default 64)")
    p.add_argument("--rate", type=int, default=250, help="py-spy's samples/s (default 250)")
    p.add_argument(
        "--streams",
        type=int,
        default=0,
        help="the load: N paced streams at once, again and again (default: wrk's completions)",
    )
    p.add_argument("--raw", type=Path, help="a folder to keep py-spy's collapsed stacks in")
    p.add_argument("--out", type=Path, help="(default results/served_profile[_streams].md)")
    args = p.parse_args(argv)
    results = harness.ROOT / "bench" / "results"
    name = "served_profile_streams.md" if args.streams else "served_profile.md"
    args.out = args.out or results / name
    if shutil.which("wrk") is None or not (BIN / "py-spy").exists():
        print("needs wrk (apt-get install wrk) and py-spy (the [bench] extra)", file=sys.stderr)
        return 2
    servers = {
        "bare": harness.bare("--workers", str(WORKERS), "--worker", "gevent", key="bare"),
        "mock": harness.mock("--workers", str(WORKERS), key="mock"),
    }
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        for key, server in servers.items():
            server.run(workdir)
            try:
                rows[key] = profile(server, args, workdir)
            finally:
                server.stop()
    text = render(rows, args)
    write_report(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
