"""Peak memory a worker grows by per hostile request, as a multiple of the request's size.

    .venv/bin/python -m bench memory          # writes bench/results/memory.md

Starts `python -m mock_server --workers 1` on a free port and, for each kind of request
(every one at most x-caps.max_body_bytes), resets the worker's peak RSS
(/proc/PID/clear_refs, 5), sends the request, and reads the peak back (VmHWM) less the
RSS before it. The largest growth divided by the request's size is the figure; a
small request that decodes a steering vector grows the worker by up to
x-caps.steering_decoded_bytes whatever its size, so that cap is reported beside it.
Linux only (/proc).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import zstandard

from bench import harness
from bench.harness import ROOT, Server, command_line
from bench.report import write_report
from contract import spec

OUT = ROOT / "bench" / "results" / "memory.md"
MIB = 1 << 20


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def worker_pid(master: int) -> int:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    if not children:
        raise RuntimeError("no gunicorn worker yet")
    return int(children[0])


def requests(limit: int) -> dict[str, bytes]:
    """Hostile bodies, each at most `limit` bytes."""
    model = spec().default_model
    hidden = spec().models[model].hidden_size
    cap = spec().caps["steering_decoded_bytes"]

    def body(**fields: Any) -> bytes:
        return json.dumps(
            {"model": model, "max_tokens": 1, **fields}, separators=(",", ":")
        ).encode()

    def fit(make: Any, unit: int) -> bytes:
        """The largest body `make(n)` under the limit (n in steps of `unit`)."""
        n = max(1, (limit - 1024) // unit)
        raw = make(n)
        while len(raw) > limit:
            n = int(n * 0.97)
            raw = make(n)
        return raw

    def vector(frame: bytes, shape: list[int]) -> dict[str, Any]:
        return {
            "activations": {
                "data": base64.b64encode(frame).decode(),
                "dtype": "float32",
                "original_dtype": "torch.float32",
                "shape": shape,
                "compression": "zstd",
            },
            "layer_indices": [0],
        }

    positions = cap // (hidden * 4)
    bomb = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(positions * hidden * 4))
    noise = os.urandom(limit * 3 // 4 - 4096)
    noisy_positions = len(noise) // (hidden * 4)
    noisy = zstandard.ZstdCompressor(level=1, write_content_size=True).compress(
        noise[: noisy_positions * hidden * 4]
    )
    return {
        "prompt: 8 MiB of text": fit(lambda n: body(prompt="word " * n), 5),
        "prompt: 8 MiB of token ids": fit(lambda n: body(prompt=[1000] * n), 5),
        "prompt: 8 MiB of single-character strings": fit(lambda n: body(prompt=["a"] * n), 4),
        "stop: 8 MiB of strings": fit(lambda n: body(prompt="a", stop=["ab"] * n), 5),
        "unknown keys: 8 MiB": fit(
            lambda n: json.dumps({f"k{i}": 0 for i in range(n)}).encode(), 12
        ),
        "model name: 8 MiB": fit(lambda n: body(prompt="a", model="m" * n), 1),
        "nesting: 8 MiB of [": b'{"prompt":' + b"[" * (limit - 20) + b"}",
        "steering: 8 MiB of incompressible float32": body(
            prompt="a", apply_steering_vectors=[vector(noisy, [1, noisy_positions, hidden])]
        ),
        "steering: bomb decoding to the cap": body(
            prompt="a", apply_steering_vectors=[vector(bomb, [1, positions, hidden])]
        ),
        "steering: 1 TiB declared": body(
            prompt="a", apply_steering_vectors=[vector(bomb, [1, 1 << 26, hidden])]
        ),
        "minimal": body(prompt="a"),
    }


def measure(server: Server, raw: bytes, rounds: int) -> tuple[int, int]:
    """(status, largest peak growth over `rounds`) for one body."""
    assert server.proc is not None
    growth, status = 0, 0
    for _ in range(rounds):
        pid = worker_pid(server.proc.pid)
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        before = _kib(pid, "VmRSS")
        r = httpx.post(
            server.url + "/v1/completions",
            content=raw,
            timeout=300,
            headers={**server.headers, "Content-Type": "application/json"},
        )
        status = r.status_code
        growth = max(growth, _kib(pid, "VmHWM") - before)
    return status, growth


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    limit = spec().caps["max_body_bytes"]
    server = harness.mock("--workers", "1", "--threads", "4")
    try:
        server.run(Path(tempfile.mkdtemp(prefix="bench-memory-")))
        httpx.post(
            server.url + "/v1/completions",
            timeout=60,
            headers=server.headers,
            json={"model": spec().default_model, "prompt": "a", "max_tokens": 1},
        )  # warm the worker
        rows = []
        for name, raw in requests(limit).items():
            status, growth = measure(server, raw, args.rounds)
            rows.append((name, len(raw), status, growth))
            print(
                f"{name:48s} {len(raw) / MIB:7.2f} MiB  {status}  +{growth / MIB:8.1f} MiB  "
                f"x{growth / len(raw):8.1f}",
                flush=True,
            )
    finally:
        server.stop()
    write(rows, limit, args.rounds, command_line("memory_bench", sys.argv[1:]))
    return 0


def write(rows: list[tuple[str, int, int, int]], limit: int, rounds: int, command: str) -> None:
    cap = spec().caps["steering_decoded_bytes"]
    big = [r for r in rows if r[1] >= MIB]
    worst = max(big, key=lambda r: r[3] / r[1])
    small_worst = max((r for r in rows if r[1] < MIB), key=lambda r: r[3])
    lines = [
        "# Peak memory per hostile request (bench.memory_bench)",
        "",
        f"Command: `{command}`.",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.platform()}, Python {platform.python_version()}; "
        "`python -m mock_server --workers 1 --threads 4`; peak RSS of the worker (VmHWM after "
        f"clear_refs) less its RSS before the request, the largest of {rounds} rounds.",
        "",
        f"**Bound: a request of 1 MiB to {limit / MIB:g} MiB grows the worker by at most "
        f"{worst[3] / worst[1]:.1f} x its size** (worst: {worst[0]}). A smaller request grows it by at most "
        f"{small_worst[3] / MIB:.1f} MiB ({small_worst[0]}): a steering vector may decode to "
        f"x-caps.steering_decoded_bytes ({cap / MIB:g} MiB) whatever the size of its frame.",
        "",
        "| request | size (MiB) | status | peak growth (MiB) | growth / size |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {n} | {s / MIB:.2f} | {st} | {g / MIB:.1f} | {g / s:.1f} |" for n, s, st, g in rows
    ]
    write_report(OUT, "\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    sys.exit(main())
