"""HTTP throughput: the mock vs Prism vs a bare Flask app, side by side, in one run.

    .venv/bin/python bench/http_bench.py [--duration S]

Starts three servers on free ports of 127.0.0.1 -- the mock (`python -m mock_server`),
Prism (`@stoplight/prism-cli`, pinned in bench/package-lock.json, mocking openapi.yaml)
and bench/bare_app.py under the mock's gunicorn settings (the ceiling) -- then measures:

  (a) a 400 validation error (max_tokens as a string) and
  (b) a 16-token completion (max_tokens 16, temperature 0)
      with wrk at each connection count: requests/s, p50 and p99 latency;
  (c) one unthrottled stream (max_tokens 4096, ignore_eos): tokens/s from a Python client.

Writes a markdown report to bench/results/http.md and prints it. Servers are stopped
at the end, also on error or Ctrl-C.

Exit codes: 0 every cell measured; 1 some cell could not be measured (a server did not
start or answered with the wrong status; the report says which); 2 usage or tooling
error (wrk missing, bad option).
"""

import argparse
import contextlib
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from reference_impl.launcher import free_port  # noqa: E402
from reference_impl.launcher import wait_ready as launcher_wait_ready  # noqa: E402

BENCH = ROOT / "bench"
PRISM_BIN = BENCH / "node_modules" / ".bin" / "prism"
WRK_SCRIPT = BENCH / "wrk_post.lua"
DEFAULT_OUT = BENCH / "results" / "http.md"
NOTES_MARKER = "<!-- Hand-written notes below this line are kept when the report is rewritten. -->"
API_KEY = "bench-key"
MODEL = "llama-8b"
PROMPT = "The sky is"

EXIT_OK, EXIT_UNMEASURED, EXIT_USAGE = 0, 1, 2


class BenchError(Exception):
    """A tooling problem that stops the whole run (exit 2)."""


class ServerFailed(Exception):
    """A server that did not start or stopped; its column becomes n/a."""


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    body: dict
    expect_status: int


CASES = (
    Case(
        "a",
        "(a) 400 validation error",
        {"model": MODEL, "prompt": PROMPT, "max_tokens": "16", "temperature": 0},
        400,
    ),
    Case(
        "b",
        "(b) 16-token completion",
        {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "temperature": 0},
        200,
    ),
)

STREAM_BODY = {
    "model": MODEL,
    "prompt": PROMPT,
    "max_tokens": 4096,
    "temperature": 0,
    "ignore_eos": True,
    "stream": True,
    "stream_options": {"include_usage": True},
}


@dataclass
class Server:
    key: str
    label: str
    argv: list
    port: int
    cwd: Path = ROOT
    env: dict = field(default_factory=dict)
    proc: subprocess.Popen = None
    log: Path = None
    failure: str = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


# ---------------------------------------------------------------------------
# Servers
# ---------------------------------------------------------------------------


def mock_worker_class():
    """The worker class python -m mock_server gives gunicorn: gthread's, subclassed
    only to answer unparseable HTTP in the API's shape (no change on the hot path)."""
    if importlib.util.find_spec("api_server.worker") is None:
        return "gthread"
    return "api_server.worker.ApiThreadWorker"


def gunicorn_args(args):
    """The ceiling's gunicorn settings: those mock_server/__main__.py gives gunicorn."""
    return ["-k", mock_worker_class(), "--workers", str(args.workers),
            "--threads", str(args.threads), "--preload", "--keep-alive", "5", "--timeout", "60",
            "--graceful-timeout", "5", "--log-level", "warning"]


def mock_defaults():
    """The mock's own defaults for --workers and --threads (MOCK_* variables included)."""
    try:
        from mock_server.__main__ import parser
    except ImportError:
        return os.cpu_count() or 1, 32
    defaults = parser().parse_args([])
    return defaults.workers, defaults.threads


def build_servers(args):
    py = sys.executable
    servers = {
        "mock": Server(
            "mock",
            "mock",
            [py, "-m", "mock_server", "--host", "127.0.0.1", "--workers", str(args.workers),
             "--threads", str(args.threads), "--log-level", "warning"],
            free_port(),
        ),
        "prism": Server(
            "prism",
            "Prism",
            [str(PRISM_BIN), "mock", str(ROOT / "openapi.yaml"), "-h", "127.0.0.1",
             "-v", "silent"],
            free_port(),
            env={"SCARF_ANALYTICS": "false"},
        ),
        "bare": Server(
            "bare",
            "bare Flask",
            [py, "-m", "gunicorn", *gunicorn_args(args), "--chdir", str(BENCH),
             "--pythonpath", str(ROOT), "bare_app:app"],
            free_port(),
        ),
    }
    servers["mock"].argv += ["--port", str(servers["mock"].port)]
    servers["prism"].argv += ["-p", str(servers["prism"].port)]
    servers["bare"].argv += ["--bind", f"127.0.0.1:{servers['bare'].port}"]
    return [servers[k] for k in args.servers]


def ensure_prism():
    """Install the pinned Prism from bench/package-lock.json when it is missing."""
    if PRISM_BIN.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ServerFailed("npm is not installed, so Prism could not be installed")
    print("installing Prism: npm ci --prefix bench", file=sys.stderr)
    done = subprocess.run(
        [npm, "ci", "--prefix", str(BENCH), "--ignore-scripts", "--no-audit", "--no-fund"],
        capture_output=True, text=True, env={**os.environ, "SCARF_ANALYTICS": "false"},
    )
    if done.returncode != 0 or not PRISM_BIN.exists():
        raise ServerFailed(f"npm ci failed: {done.stderr.strip()[-300:]}")


def start(server, logdir):
    if server.key == "prism":
        ensure_prism()
    server.log = logdir / f"{server.key}.log"
    with open(server.log, "wb") as log:
        server.proc = subprocess.Popen(
            server.argv, cwd=server.cwd, env={**os.environ, **server.env},
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_ready(server, timeout):
    try:
        launcher_wait_ready(server.url, server.proc, timeout, name=server.label, interval=0.2)
    except RuntimeError as exc:
        raise ServerFailed(f"{exc}: {log_tail(server)}") from None


def log_tail(server, chars=400):
    text = server.log.read_text(errors="replace").strip() if server.log else ""
    return " ".join(text[-chars:].split()) or "(no output)"


def stop(server, grace=10):
    """SIGTERM the server's process group, then SIGKILL what is left after `grace` s."""
    proc = server.proc
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ---------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------


def headers():
    return {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}


def preflight(server, case):
    """One request through a Python client: the status the server gives this case."""
    r = httpx.post(server.url + "/v1/completions", json=case.body, headers=headers(), timeout=30)
    return r.status_code


def run_wrk(server, case, connections, duration, body_file):
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "--timeout", "10s",
           "-s", str(WRK_SCRIPT), server.url + "/v1/completions"]
    env = {**os.environ, "WRK_BODY_FILE": str(body_file), "WRK_API_KEY": API_KEY}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=duration + 60)
    for line in done.stdout.splitlines():
        if line.startswith("WRK_JSON "):
            return json.loads(line[len("WRK_JSON "):])
    raise BenchError(f"wrk gave no summary (status {done.returncode}): {done.stderr.strip()}")


def session_cpu_seconds(sid):
    """User + system CPU time of every live process in session `sid` (a server and its
    workers: each server starts a new session), from /proc."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue   # gone meanwhile
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[3]) == sid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


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


def sse_events(raw_chunks):
    """The `data:` payloads of an event stream, as bytes; comments and blank lines skipped."""
    buffer = b""
    for piece in raw_chunks:
        buffer += piece
        *events, buffer = buffer.split(b"\n\n")
        for event in events:
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    yield line[5:].strip()


def one_stream(server):
    """One streamed completion: (tokens, chunks, ttft_s, total_s, tokens_from_usage), or
    raises ServerFailed when the answer is not a stream."""
    t0 = time.perf_counter()
    ttft, chunks, usage = None, 0, None
    with httpx.stream("POST", server.url + "/v1/completions", json=STREAM_BODY,
                      headers=headers(), timeout=120) as r:
        ctype = r.headers.get("content-type", "")
        if r.status_code != 200 or not ctype.startswith("text/event-stream"):
            r.read()
            raise ServerFailed(f"answered {r.status_code} {ctype or '(no content-type)'}, "
                               f"not a text/event-stream: {r.text[:120]}")
        for event in sse_events(r.iter_raw()):
            if event == b"[DONE]":
                break
            # Only the usage chunk is parsed: a JSON parse per token would make this
            # client, on the same cores, the bottleneck.
            if b'"choices":[]' in event.replace(b" ", b""):
                usage = json.loads(event).get("usage") or usage
                continue
            chunks += 1
            if ttft is None:
                ttft = time.perf_counter() - t0
    total = time.perf_counter() - t0
    tokens = usage["completion_tokens"] if usage else chunks
    return tokens, chunks, ttft or total, total, usage is not None


def run_streams(server, duration):
    """Streams one after another for `duration` s (at least one); the median run."""
    runs, deadline = [], time.monotonic() + duration
    cpu_before = session_cpu_seconds(server.proc.pid)
    while not runs or (time.monotonic() < deadline and len(runs) < 50):
        runs.append(one_stream(server))
    cpu_s = session_cpu_seconds(server.proc.pid) - cpu_before
    all_tokens = sum(run[0] for run in runs)
    runs.sort(key=lambda run: run[0] / run[3])
    tokens, chunks, ttft, total, from_usage = runs[len(runs) // 2]
    return {
        "tokens_per_s": tokens / total,
        "tokens": tokens,
        "chunks": chunks,
        "ttft_ms": ttft * 1000,
        "runs": len(runs),
        "usage": from_usage,
        "cpu_us_per_token": 1e6 * cpu_s / max(all_tokens, 1),
    }


def prism_stream_reason(server):
    """Why Prism has no tokens/s: what it answers to a stream request, both ways of asking."""
    seen = []
    for accept in ("*/*", "text/event-stream"):
        r = httpx.post(server.url + "/v1/completions", json=STREAM_BODY,
                       headers={**headers(), "Accept": accept}, timeout=30)
        ctype = r.headers.get("content-type", "").split(";")[0]
        detail = r.json().get("detail") if ctype == "application/problem+json" else None
        seen.append(f"with Accept: {accept} it answers {r.status_code} {ctype}"
                    + (f" ({detail})" if detail else ""))
    return ("Prism has no streaming (it serves one static example per request): "
            + "; ".join(seen))


# ---------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------


def measure(servers, args, workdir):
    """Every cell, round after round, servers interleaved so that drift in the machine's
    load spreads over all three; a cell's result is its median round by requests/s.
    Returns {(case, connections, server): result or {"na": reason}} and the streams."""
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
    return cells, streams


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
                run_wrk(server, case, max(args.connections), args.warmup,
                        workdir / f"body_{case.key}.json")


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
    cpu_before = session_cpu_seconds(server.proc.pid)
    result = summarise_wrk(run_wrk(server, case, conns, args.duration, body_file), case)
    result["cpu_s"] = session_cpu_seconds(server.proc.pid) - cpu_before
    print(f"{result['rps']:9.0f} req/s {1e6 * result['cpu_s'] / max(result['requests'], 1):6.0f}"
          " CPU us/req", file=sys.stderr)
    return result


def measure_stream(server, args):
    if server.failure:
        return {"na": server.failure}
    try:
        return run_streams(server, args.duration)
    except ServerFailed as e:
        reason = prism_stream_reason(server) if server.key == "prism" else str(e)
        return {"na": reason}


def run(args):
    servers = build_servers(args)
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="http_bench_")))
        for server in servers:
            stack.callback(stop, server)
            try:
                start(server, workdir)
            except ServerFailed as e:
                server.failure = str(e)
        for server in servers:
            if server.failure is None:
                try:
                    wait_ready(server, args.start_timeout)
                except ServerFailed as e:
                    server.failure = str(e)
                    stop(server)
        load_before = os.getloadavg()
        print("servers: " + ", ".join(f"{s.label} {s.url if not s.failure else 'FAILED'}"
                                      for s in servers), file=sys.stderr)
        cells, streams = measure(servers, args, workdir)
        versions = collect_versions()
        versions["load"] = (load_before, os.getloadavg())
    return servers, cells, streams, versions


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def command_output(argv):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return "n/a"
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr) else "n/a"


def package_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "n/a"


def collect_versions():
    rev = command_output(["git", "rev-parse", "--short", "HEAD"])
    dirty = command_output(["git", "status", "--porcelain", "--", "mock_server", "contract"])
    return {
        "mock": f"git {rev}" + (" + uncommitted changes" if dirty != "n/a" else ""),
        "Prism": f"@stoplight/prism-cli {command_output([str(PRISM_BIN), '--version'])}",
        "node": command_output(["node", "--version"]),
        "wrk": command_output(["wrk", "--version"]).split(" Copyright")[0],
        "Python": platform.python_version(),
        "Flask": package_version("flask"),
        "gunicorn": package_version("gunicorn"),
    }


def machine_info():
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kib / 2**20:.0f} GiB"
    return f"{cpu}, {os.cpu_count()} cores, {mem} RAM, {platform.system()} {platform.release()}"


def fmt_cell(cell):
    if "na" in cell:
        return "n/a", "n/a"
    flag = "" if not (cell["wrong_status"] or cell["socket_errors"]) else " (!)"
    return f"{cell['rps']:,.0f}{flag}", f"{cell['p50_ms']:.2f} / {cell['p99_ms']:.2f}"


def ratio(cells, case, conns, other):
    a, b = cells.get((case, conns, "mock")), cells.get((case, conns, other))
    if not a or not b or "na" in a or "na" in b:
        return None
    return a["rps"] / b["rps"]


def fmt_ratio(value, goal):
    if value is None:
        return "n/a"
    return f"{value:.2f} ({'meets' if value >= goal else 'misses'} >= {goal:g})"


def throughput_table(servers, cells, args):
    keys = [s.key for s in servers]
    labels = {s.key: s.label for s in servers}
    head = ["case", "conns"]
    for k in keys:
        head += [f"{labels[k]} req/s", f"{labels[k]} p50 / p99 ms"]
    head += ["mock/Prism", "mock/bare"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for case in CASES:
        for conns in args.connections:
            row = [case.title, str(conns)]
            for k in keys:
                row += fmt_cell(cells[case.key, conns, k])
            row += [fmt_ratio(ratio(cells, case.key, conns, "prism"), 1.0),
                    fmt_ratio(ratio(cells, case.key, conns, "bare"), 0.6)]
            rows.append("| " + " | ".join(row) + " |")
    return rows


def cpu_table(servers, cells, args):
    """The servers' CPU time per request over all rounds: less swayed by other load on
    the machine than requests/s. A ratio here is other/mock, so >= 1 favours the mock."""
    labels = {s.key: s.label for s in servers}
    head = ["case", "conns", *(f"{labels[s.key]} CPU us/req" for s in servers),
            "Prism/mock", "bare/mock"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for case in CASES:
        for conns in args.connections:
            cell = {s.key: cells[case.key, conns, s.key] for s in servers}
            row = [case.title, str(conns)]
            row += ["n/a" if "na" in cell[s.key] else f"{cell[s.key]['cpu_us']:,.0f}" for s in servers]
            for other in ("prism", "bare"):
                mine, theirs = cell.get("mock"), cell.get(other)
                ok = mine and theirs and "na" not in mine and "na" not in theirs and mine["cpu_us"]
                row.append(f"{theirs['cpu_us'] / mine['cpu_us']:.2f}" if ok else "n/a")
            rows.append("| " + " | ".join(row) + " |")
    return rows


def stream_table(servers, streams):
    rows = ["| server | tokens/s | tokens | TTFT ms | runs (median shown) | server CPU us/token |"
            " note |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for s in servers:
        st = streams[s.key]
        if "na" in st:
            rows.append(f"| {s.label} | n/a | | | | | {st['na']} |")
            continue
        note = "tokens from the usage chunk" if st["usage"] else "tokens counted as content chunks"
        if s.key == "bare":
            note = ("fixed one-token chunks, one write each: the server's share of a stream's cost;"
                    " its tokens/s is about what this Python client can read")
        rows.append(f"| {s.label} | {st['tokens_per_s']:,.0f} | {st['tokens']} | "
                    f"{st['ttft_ms']:.1f} | {st['runs']} | {st['cpu_us_per_token']:.1f} | {note} |")
    return rows


def problems(servers, cells):
    lines = [f"- {s.label} did not run: {s.failure}" for s in servers if s.failure]
    for (case, conns, key), cell in cells.items():
        label = next(s.label for s in servers if s.key == key)
        if "na" in cell and not next(s for s in servers if s.key == key).failure:
            lines.append(f"- ({case}) c={conns} {label}: {cell['na']}")
        elif "na" not in cell and (cell["wrong_status"] or cell["socket_errors"]):
            lines.append(f"- (!) ({case}) c={conns} {label}: {cell['wrong_status']} answers with "
                         f"the wrong status class, {cell['socket_errors']} socket errors/timeouts "
                         f"of {cell['requests']} requests (all rounds)")
    return lines


def rounds_table(servers, cells, args):
    rows = ["| case | conns | server | req/s in each round |", "| --- | --- | --- | --- |"]
    for case in CASES:
        for conns in args.connections:
            for s in servers:
                cell = cells[case.key, conns, s.key]
                if "na" not in cell:
                    values = ", ".join(f"{v:,.0f}" for v in cell["rounds"])
                    rows.append(f"| {case.title} | {conns} | {s.label} | {values} |")
    return rows


def report(servers, cells, streams, versions, args, command):
    (before, after) = versions.pop("load")
    load = f"load average {before[0]:.2f} before the run, {after[0]:.2f} after"
    warning = busy_warning(before[0])
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# HTTP throughput: mock vs Prism vs bare Flask",
        "",
        f"- Date: {now}",
        f"- Command: `{command}`",
        f"- Machine: {machine_info()}; wrk and the servers share these cores; {load}",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- Server settings: mock and bare Flask under gunicorn `{' '.join(gunicorn_args(args))}`;"
        " Prism `prism mock openapi.yaml -v silent` (openapi.yaml unchanged, one Node process)",
        f"- Load: wrk `-t1 -c<conns> -d{args.duration}s --latency --timeout 10s` with"
        f" bench/wrk_post.lua; {args.rounds} rounds of every cell, the servers interleaved,"
        f" the median round shown; first a {args.warmup} s warm-up per server and case at"
        f" {max(args.connections)} connections;"
        f" key `Authorization: Bearer {API_KEY}`",
        "",
        *([warning, ""] if warning else []),
        "## Requests/s and latency",
        "",
        "Goals: mock >= Prism (ratio >= 1) and mock >= 60% of the bare ceiling (ratio >= 0.6).",
        "",
        *throughput_table(servers, cells, args),
        "",
        "Server CPU time per request, summed over every round (all the server's processes,"
        " from /proc; wrk's own CPU not counted). It is less swayed than requests/s by other"
        " load on the machine; a ratio is other/mock, so a ratio >= 1 means the mock spends"
        " no more CPU per request than the other server.",
        "",
        *cpu_table(servers, cells, args),
        "",
        "## One unthrottled stream (c)",
        "",
        f"`max_tokens` {STREAM_BODY['max_tokens']}, temperature 0, ignore_eos, include_usage;"
        f" one connection, streams back to back for {args.duration} s; tokens/s over the whole"
        " request (from sending it to `[DONE]`); the server's CPU time per token over every"
        " run (the client's own parsing, on the same cores, not counted).",
        "",
        *stream_table(servers, streams),
        "",
        "## Every round",
        "",
        *rounds_table(servers, cells, args),
    ]
    trouble = problems(servers, cells)
    if trouble:
        out += ["", "## Problems", "", *trouble]
    return "\n".join(out) + "\n"


def busy_warning(load_before):
    """A line for a machine that was not quiet when the run began, or None."""
    cores = os.cpu_count() or 1
    if load_before < 0.5 * cores:
        return None
    return (f"**The machine was busy** (load average {load_before:.2f} on {cores} cores when the"
            " run began): other processes took CPU from the servers and wrk, so requests/s vary"
            " from round to round; the CPU time per request is the steadier comparison.")


def kept_notes(path):
    """The hand-written notes of an earlier report at `path` (after NOTES_MARKER)."""
    try:
        text = path.read_text()
    except OSError:
        return ""
    at = text.find(NOTES_MARKER)
    return "" if at < 0 else text[at + len(NOTES_MARKER):].strip("\n")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=5, help="seconds per measured cell (default 5)")
    p.add_argument("--warmup", type=int, default=3,
                   help="warm-up seconds per server and case, before the rounds (default 3)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of every cell; the median round is shown (default 3)")
    p.add_argument("--connections", type=lambda s: [int(c) for c in s.split(",")],
                   default=[1, 64], help="wrk connection counts (default 1,64)")
    workers, threads = mock_defaults()
    p.add_argument("--workers", type=int, default=workers,
                   help=f"gunicorn workers of the mock and the ceiling (the mock's default, {workers})")
    p.add_argument("--threads", type=int, default=threads,
                   help=f"gthread threads per worker (the mock's default, {threads})")
    p.add_argument("--servers", type=lambda s: s.split(","), default=["mock", "prism", "bare"],
                   help="a subset of mock,prism,bare (default all three)")
    p.add_argument("--start-timeout", type=float, default=60, help="seconds to wait for /health")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="markdown report path")
    args = p.parse_args(argv)
    unknown = set(args.servers) - {"mock", "prism", "bare"}
    if unknown:
        p.error(f"unknown servers: {', '.join(sorted(unknown))}")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    command = shlex.join([".venv/bin/python", "bench/http_bench.py", *argv])
    try:
        servers, cells, streams, versions = run(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    text = report(servers, cells, streams, versions, args, command)
    notes = kept_notes(args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n" + NOTES_MARKER + "\n" + (notes + "\n" if notes else ""))
    print(text)
    measured = all("na" not in c for c in cells.values())
    return EXIT_OK if measured and not any(s.failure for s in servers) else EXIT_UNMEASURED


if __name__ == "__main__":
    sys.exit(main())
