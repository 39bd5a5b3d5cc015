"""Load generators the HTTP benchmark shares: many open streams at once, and stalled
clients (half a body, then silence), from one asyncio client on raw sockets (an HTTP
client library costs more CPU per chunk than the server under test)."""
from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field

API_KEY = "bench-key"


def post_bytes(port: int, body: dict, headers: dict[str, str] | None = None, cut: int | None = None) -> bytes:
    """A whole POST /v1/completions request; `cut` keeps only that many body bytes
    (a stalled client: the Content-Length promises the rest)."""
    raw = json.dumps(body).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(raw)}\r\n{extra}\r\n").encode()
    return head + (raw if cut is None else raw[:cut])


@dataclass
class StreamResult:
    ok: bool
    ttft: float | None = None
    total: float | None = None
    error: str = ""


async def _one_stream(port: int, request: bytes, t0: float) -> StreamResult:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    except OSError as exc:
        return StreamResult(False, error=f"connect: {exc}")
    try:
        writer.write(request)
        await writer.drain()
        ttft = None
        buf = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                return StreamResult(False, ttft, error="closed before [DONE]: " + buf[:120].decode("latin-1"))
            buf = (buf + chunk)[-4096:] if ttft is not None else buf + chunk
            if ttft is None and b"data: {" in buf:
                ttft = time.perf_counter() - t0
            if b"data: [DONE]" in buf:
                return StreamResult(True, ttft, time.perf_counter() - t0)
    except OSError as exc:
        return StreamResult(False, error=f"{type(exc).__name__}: {exc}")
    finally:
        writer.close()


@dataclass
class ConcurrencyCell:
    streams: int
    ok: int
    wall_s: float
    ttft_p50: float | None
    ttft_p99: float | None
    errors: list[str] = field(default_factory=list)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def _streams(port: int, n: int, tokens: int, tpot_ms: int) -> ConcurrencyCell:
    body = {"model": "llama-8b", "prompt": "The sky is", "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True, "stream": True}
    request = post_bytes(port, body, {"X-Mock-Tpot-Ms": str(tpot_ms)})
    t0 = time.perf_counter()
    results = await asyncio.gather(*(_one_stream(port, request, t0) for _ in range(n)))
    wall = time.perf_counter() - t0
    ttfts = [r.ttft for r in results if r.ttft is not None]
    errors = sorted({r.error for r in results if not r.ok})
    return ConcurrencyCell(n, sum(r.ok for r in results), wall, pct(ttfts, 0.5), pct(ttfts, 0.99), errors[:5])


def concurrent_streams(port: int, n: int, tokens: int = 20, tpot_ms: int = 100) -> ConcurrencyCell:
    """`n` streams opened at once, each `tokens` tokens at `tpot_ms` per token."""
    return asyncio.run(_streams(port, n, tokens, tpot_ms))


if __name__ == "__main__":
    import sys
    cell = concurrent_streams(int(sys.argv[1]), int(sys.argv[2]))
    print(cell)
