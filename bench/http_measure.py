"""What bench.http_bench measures, one function per kind of cell: wrk's requests/s
and latency (cases a, b), one unthrottled stream (c), many open streams at once (d),
stalled clients beside a normal request (e); each with the server's CPU time from /proc.
The streams (c, d) are read by the harness's load client."""

import asyncio
import json
import os
import subprocess
import sys
import time

import httpx
import orjson
import uvloop

from bench.harness import (
    API_KEY,
    BENCH,
    ServerFailed,
    cpu_seconds,
    gather_streams,
    percentile,
    request_bytes,
    rss_bytes,
    streams,
)
from bench.http_servers import CASES, MODEL, PROMPT, STREAM_BODY, BenchError

WRK_SCRIPT = BENCH / "wrk_post.lua"


def preflight(server, case):
    """One request through a Python client: the status the server gives this case."""
    r = httpx.post(
        server.url + "/v1/completions", json=case.body, headers=server.headers, timeout=30
    )
    return r.status_code


def run_wrk(server, case, connections, duration, body_file):
    cmd = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{duration}s",
        "--latency",
        "--timeout",
        "10s",
        "-s",
        str(WRK_SCRIPT),
        server.url + "/v1/completions",
    ]
    env = {**os.environ, "WRK_BODY_FILE": str(body_file), "WRK_API_KEY": API_KEY}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration + 60)
    for line in done.stdout.splitlines():
        if line.startswith("WRK_JSON "):
            return json.loads(line[len("WRK_JSON ") :])
    raise BenchError(f"wrk gave no summary (status {done.returncode}): {done.stderr.strip()}")


def summarise_wrk(raw, case):
    e = raw["errors"]
    seconds = raw["duration_us"] / 1e6
    non_2xx = e["status"]
    wrong = non_2xx if case.expect_status < 300 else raw["requests"] - non_2xx
    return {
        "rps": raw["requests"] / seconds,
        "p50_ms": raw["latency_us"]["p50"] / 1000,
        "p99_ms": raw["latency_us"]["p99"] / 1000,
        "requests": raw["requests"],
        "wrong_status": wrong,
        "socket_errors": e["connect"] + e["read"] + e["write"] + e["timeout"],
    }


def run_streams(server, duration):
    """Streams one after another for `duration` s (at least one); the median run by tokens/s,
    or ServerFailed when the answer is not a stream."""
    runs, deadline = [], time.monotonic() + duration
    cpu_before = cpu_seconds(server.pids())
    while not runs or (time.monotonic() < deadline and len(runs) < 50):
        (stream,), _ = streams(server, STREAM_BODY)
        if not stream.done:
            raise ServerFailed(f"not a finished text/event-stream: {stream.error}")
        runs.append(stream)
    cpu_s = cpu_seconds(server.pids()) - cpu_before
    all_tokens = sum(run.tokens for run in runs)
    runs.sort(key=lambda run: run.tokens / run.seconds)
    median = runs[len(runs) // 2]
    return {
        "tokens_per_s": median.tokens / median.seconds,
        "tokens": median.tokens,
        "ttft_ms": (median.ttft_s or median.seconds) * 1000,
        "runs": len(runs),
        "usage": median.usage_tokens is not None,
        "cpu_us_per_token": 1e6 * cpu_s / max(all_tokens, 1),
    }


def prism_stream_reason(server):
    """Why Prism has no tokens/s: what it answers to a stream request, both ways of asking."""
    seen = []
    for accept in ("*/*", "text/event-stream"):
        r = httpx.post(
            server.url + "/v1/completions",
            json=STREAM_BODY,
            headers={**server.headers, "Accept": accept},
            timeout=30,
        )
        ctype = r.headers.get("content-type", "").split(";")[0]
        detail = r.json().get("detail") if ctype == "application/problem+json" else None
        seen.append(
            f"with Accept: {accept} it answers {r.status_code} {ctype}"
            + (f" ({detail})" if detail else "")
        )
    return "Prism has no streaming (it serves one static example per request): " + "; ".join(seen)


def median_round(results):
    if "na" in results[-1]:
        return results[-1]
    ordered = sorted(results, key=lambda r: r["rps"])
    median = dict(ordered[len(ordered) // 2])
    median["rounds"] = [r["rps"] for r in results]
    for key in ("requests", "wrong_status", "socket_errors", "cpu_s"):
        median[key] = sum(r[key] for r in results)
    median["cpu_us"] = 1e6 * median["cpu_s"] / max(median["requests"], 1)
    return median


def warm_up(servers, args, workdir):
    """Every server through every case before any measurement: Prism's JIT needs seconds,
    and a cold server in the first round would drag the median."""
    if not args.warmup:
        return
    print(f"  warming up: {args.warmup} s per server and case", file=sys.stderr)
    for server in servers:
        for case in CASES:
            if not server.failure:
                run_wrk(
                    server,
                    case,
                    max(args.connections),
                    args.warmup,
                    workdir / f"body_{case.key}.json",
                )


def measure_cell(server, case, conns, args, body_file):
    if server.failure:
        return {"na": server.failure}
    try:
        status = preflight(server, case)
    except httpx.HTTPError as e:
        return {"na": f"preflight request failed: {e!r}"}
    if status != case.expect_status:
        return {"na": f"answered {status}, not {case.expect_status}"}
    print(f"  {case.title:28} c={conns:<3} {server.label:11}", end=" ", flush=True, file=sys.stderr)
    cpu_before = cpu_seconds(server.pids())
    result = summarise_wrk(run_wrk(server, case, conns, args.duration, body_file), case)
    result["cpu_s"] = cpu_seconds(server.pids()) - cpu_before
    print(
        f"{result['rps']:9.0f} req/s {1e6 * result['cpu_s'] / max(result['requests'], 1):6.0f}"
        " CPU us/req",
        file=sys.stderr,
    )
    return result


def measure_stream(server, args):
    if server.failure:
        return {"na": server.failure}
    try:
        return run_streams(server, args.duration)
    except ServerFailed as e:
        reason = prism_stream_reason(server) if server.key == "prism" else str(e)
        return {"na": reason}


# -- many open streams at once (d), stalled clients (e) ----------------------------------


def pct(values, p):
    return percentile(values, p) if values else None


async def _sample_rss(server, peak, stop):
    while not stop.is_set():
        peak[0] = max(peak[0], rss_bytes(server.pids()))
        try:
            await asyncio.wait_for(stop.wait(), 0.25)
        except TimeoutError:
            pass


async def _streams(server, n, tokens, tpot_ms):
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    request = request_bytes(server, body, {"X-Mock-Tpot-Ms": str(tpot_ms)})
    rss_before, peak, stop = rss_bytes(server.pids()), [0], asyncio.Event()
    sampler = asyncio.create_task(_sample_rss(server, peak, stop))
    cpu_before, client_before = cpu_seconds(server.pids()), time.process_time()
    results, wall = await gather_streams(server.port, request, n)
    client_cpu = time.process_time() - client_before  # before the sampler's last /proc walk
    stop.set()
    await sampler
    ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
    return {
        "streams": n,
        "done": sum(r.done for r in results),
        "wall_s": wall,
        "ideal_s": tokens * tpot_ms / 1000,
        "ttft_p50_s": pct(ttfts, 50),
        "ttft_p99_s": pct(ttfts, 99),
        "cpu_s": cpu_seconds(server.pids()) - cpu_before,
        "client_cpu_s": client_cpu,
        "kib_per_stream": max(peak[0] - rss_before, 0) / 1024 / n,
        "errors": sorted({r.error for r in results if not r.done})[:3],
    }


def measure_concurrency(server, n, tokens=20, tpot_ms=100):
    """(d) `n` streams opened at once, `tokens` tokens each at `tpot_ms` per token
    (X-Mock-Tpot-Ms): how many end with [DONE], the wall time against the ideal
    tokens x tpot, time to first token, the server's CPU, and its memory per open stream."""
    if server.failure:
        return {"na": server.failure}
    if server.key == "prism":
        return {"na": "Prism has no streaming"}
    print(f"  (d) {n} open streams {server.label:11}", end=" ", flush=True, file=sys.stderr)
    cell = uvloop.run(_streams(server, n, tokens, tpot_ms))
    print(
        f"{cell['done']} done in {cell['wall_s']:.1f} s, TTFT p99 {cell['ttft_p99_s'] or 0:.2f} s",
        file=sys.stderr,
    )
    return cell


async def _stalled_client(port, request, answers, wait_s):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = time.perf_counter()
    try:
        writer.write(request)
        await writer.drain()
        try:
            reply = await asyncio.wait_for(reader.read(), wait_s)  # until the server closes
        except TimeoutError:
            reply = b"HTTP/1.1 no-answer"
        answers.append((reply.split(b" ", 2)[1:2] or [b"none"])[0].decode("latin-1"))
        answers.append(time.perf_counter() - t0)
    except OSError as exc:
        answers.append(type(exc).__name__)
        answers.append(time.perf_counter() - t0)
    finally:
        writer.close()


async def _one_request(port, request):
    t0 = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        return time.perf_counter() - t0
    finally:
        writer.close()


async def _latencies(port, request, count):
    return [await _one_request(port, request) for _ in range(count)]


async def _stalled(server, n, probes, wait_s):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    whole = request_bytes(server, body)
    half = request_bytes(server, body, cut=len(orjson.dumps(body)) // 2)
    quiet = await _latencies(server.port, whole, probes)
    answers = []
    stalled = [
        asyncio.create_task(_stalled_client(server.port, half, answers, wait_s)) for _ in range(n)
    ]
    await asyncio.sleep(1.0)  # every stalled client connected and sent its half
    busy = await _latencies(server.port, whole, probes)
    await asyncio.gather(*stalled)
    statuses, waits = answers[0::2], answers[1::2]
    return {
        "stalled": n,
        "p50_quiet_ms": 1000 * percentile(quiet, 50),
        "p50_stalled_ms": 1000 * percentile(busy, 50),
        "p99_quiet_ms": 1000 * percentile(quiet, 99),
        "p99_stalled_ms": 1000 * percentile(busy, 99),
        "answered_400": statuses.count("400"),
        "other": sorted(set(statuses) - {"400"}),
        "answer_min_s": min(waits),
        "answer_max_s": max(waits),
    }


def measure_stalled(server, n, probes=200, wait_s=75):
    """(e) `n` clients that send half a body and go silent: a normal request's latency
    (p50, p99 of `probes` one after another) without and with them, and what each
    stalled client is answered, after how long (`no-answer`: nothing within `wait_s`)."""
    if server.failure:
        return {"na": server.failure}
    print(f"  (e) {n} stalled clients {server.label:11}", end=" ", flush=True, file=sys.stderr)
    try:
        cell = uvloop.run(_stalled(server, n, probes, wait_s))
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
        return {"na": f"{type(exc).__name__}: {exc}"}
    print(
        f"p50 {cell['p50_quiet_ms']:.2f} -> {cell['p50_stalled_ms']:.2f} ms, "
        f"{cell['answered_400']} answered 400",
        file=sys.stderr,
    )
    return cell
