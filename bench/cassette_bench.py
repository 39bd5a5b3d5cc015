"""A replaying mock's start-up time and memory with a large cassette, before and after a change.

    .venv/bin/python -m bench cassette [--mib 200] [--before REV]   # writes bench/results/cassette.md

Writes a cassette of about MIB MiB (exchanges of 100 KiB streamed chunks), then starts
`python -m mock_server --replay FILE --workers 2` from this tree and from REV's (a git worktree,
the same interpreter), one after the other in one run: the seconds until GET /health answers,
and the resident memory of the master and its workers (VmRSS summed) once ready and after a hit
on every 10th exchange. Linux only (/proc).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from api_server.children import free_port
from bench.harness import ROOT, Server, command_line
from bench.memory_bench import _kib
from bench.report import write_report
from contract import spec

OUT = ROOT / "bench" / "results" / "cassette.md"
MIB = 1 << 20
KEY = "bench-cassette-key"


def write_cassette(path: Path, mib: int) -> list[dict[str, object]]:
    """About `mib` MiB of exchanges; the bodies of the requests, in order."""
    api = spec()
    chunk = "data: " + json.dumps({"text": "x" * 1000}) + "\n\n"
    bodies: list[dict[str, object]] = []
    with path.open("w", encoding="utf-8") as f:
        f.write(json.dumps({"cassette": api.mock_cassette["format"], "spec_version": api.version}))
        f.write("\n")
        size, i = 0, 0
        while size < mib * MIB:
            body = {"model": api.default_model, "prompt": f"exchange {i}", "max_tokens": 100}
            line = json.dumps(
                {
                    "method": "POST",
                    "path": api.completions_path,
                    "body": [json.dumps(body)],
                    "response": {
                        "status": 200,
                        "headers": [["Content-Type", "text/event-stream"]],
                        "chunks": [[0.0, chunk] for _ in range(100)],
                    },
                }
            )
            f.write(line + "\n")
            size, i = size + len(line) + 1, i + 1
            bodies.append(body)
    return bodies


def rss(server: Server) -> int:
    return sum(_kib(pid, "VmRSS") for pid in server.pids())


def measure(
    label: str, cwd: Path, cassette: Path, bodies: list[dict[str, object]], logs: Path
) -> dict[str, float]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "mock_server",
        "--port",
        str(port),
        "--workers",
        "2",
        "--replay",
        str(cassette),
    ]
    server = Server(label, argv, port, cwd=cwd)
    began = time.monotonic()
    server.run(logs, timeout=600)
    ready_s = time.monotonic() - began
    time.sleep(1)  # both workers up
    at_start = rss(server)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            for body in bodies[::10]:
                reply = client.post(
                    spec().completions_path, json=body, headers={"Authorization": f"Bearer {KEY}"}
                )
                reply.raise_for_status()
        after = rss(server)
    finally:
        server.stop()
    return {"ready_s": ready_s, "rss_start_mib": at_start / MIB, "rss_after_mib": after / MIB}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench cassette", description=__doc__.splitlines()[0]
    )
    p.add_argument("--mib", type=int, default=200)
    p.add_argument("--before", default="c491d92~1", help="the revision to compare with")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cassette-bench-") as tmp:
        folder = Path(tmp)
        cassette = folder / "big.jsonl"
        bodies = write_cassette(cassette, args.mib)
        before = folder / "before"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(before), args.before],
            cwd=ROOT,
            check=True,
        )
        try:
            rows = {
                f"before ({args.before})": measure("before", before, cassette, bodies, folder),
                "after (this tree)": measure("after", ROOT, cassette, bodies, folder),
            }
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False
            )
        size = cassette.stat().st_size / MIB
    lines = [
        "# A replaying mock with a large cassette",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, Python {platform.python_version()}; "
        f"`{command_line('cassette_bench', argv or [])}`",
        "",
        f"A cassette of {size:.0f} MiB ({len(bodies):,} exchanges of 100 chunks); "
        "`python -m mock_server --replay FILE --workers 2`; RSS of the master and both workers summed.",
        "",
        "| mock | ready after (s) | RSS once ready (MiB) | RSS after a hit on every 10th exchange (MiB) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, row in rows.items():
        lines.append(
            f"| {label} | {row['ready_s']:.1f} | {row['rss_start_mib']:.0f} | {row['rss_after_mib']:.0f} |"
        )
    write_report(OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
