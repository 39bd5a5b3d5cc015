"""What every bench shares: the servers it starts, the CPU and memory they use, one
percentile and one streaming load client.

Servers. `Server` runs one command on a free port of 127.0.0.1 in a session of its own,
logging to a file, waits until it is ready (GET /health answers 200, or anything for Prism,
or the port takes connections for the relay) and stops it with its whole process group
(SIGTERM, then SIGKILL after a grace period). The functions below build the ones the
benches measure: the mock, Prism, the bare Flask ceiling, the reference (with its vLLM or
in front of an `--upstream`), the fake vLLM and the relay; `baseline` runs a server as of
a git revision, from an export of its tracked files, with this checkout's Python.

CPU. A server's processes are those of its session: gunicorn's master and workers, Prism's
node processes, not a vLLM the reference starts (vLLM runs in a session of its own). Their
CPU time is the scheduler's count (/proc/PID/task/TID/schedstat): /proc/PID/stat's utime and
stime are charged by the 100 Hz tick, and a worker that wakes for a few microseconds per
token between ticks is often not charged at all.

Percentiles: `percentile`, linear between the closest ranks (numpy's default, and
`statistics.quantiles(method="inclusive")`), for every bench.

The load client: one asyncio process on uvloop and raw sockets (`streams`). An HTTP
client library costs more CPU per chunk than the server under test, on the same two
cores; asyncio's own loop cost 0.8 s of CPU for 2,000 streams against uvloop's 0.6 s,
which showed as 0.1-0.15 s more time to first token.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import redis
import uvloop

from api_server.children import free_port, stop_process, wait_ready

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PRISM_BIN = BENCH / "node_modules" / ".bin" / "prism"
MODEL_DIR = ROOT / "models" / "tiny-llama"


def vllm_missing() -> str | None:
    """Why a bench of the reference on vLLM's CPU build cannot run here, or None."""
    from reference_impl.launcher import default_python

    if not (MODEL_DIR / "model.safetensors").exists() or not Path(default_python()).exists():
        return "needs .venv-vllm and models/tiny-llama: bash scripts/setup_vllm.sh"
    return None


def start_reference_bench(logs_prefix: str) -> tuple[float, Path]:
    """A reference bench's first step: exit 2, saying why, where vllm_missing() finds a
    reason; else the load average now (for the report) and a new folder for the logs."""
    missing = vllm_missing()
    if missing:
        print(missing, file=sys.stderr)
        raise SystemExit(2)
    return os.getloadavg()[0], Path(tempfile.mkdtemp(prefix=logs_prefix))


API_KEY = "bench-key"
KILL_WAIT = 10.0  # s a killed session may take to be gone on a loaded machine


def command_line(module: str, argv: Sequence[str]) -> str:
    """How a bench was run, for its report: `.venv/bin/python -m bench NAME ARGS` (bench/__main__.py)."""
    return shlex.join([".venv/bin/python", "-m", "bench", module.removesuffix("_bench"), *argv])


# -- servers -----------------------------------------------------------------------------------


class ServerFailed(RuntimeError):
    """A server that did not start, or stopped; the message ends with its log's tail."""


class Endpoint:
    """Where a load client sends its requests: a port of 127.0.0.1, the API key it sends
    (None: no Authorization header), and no processes of its own to measure."""

    def __init__(
        self, key: str, port: int, api_key: str | None = None, label: str | None = None
    ) -> None:
        self.key, self.label, self.port, self.api_key = key, label or key, port, api_key

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def pids(self) -> list[int]:
        return []


class Server(Endpoint):
    """A command serving on `port`, from `cwd`; `ready` is how to tell it is up: "health"
    (GET /health answers 200), "any" (it answers anything) or "port" (it takes connections)."""

    def __init__(
        self,
        key: str,
        argv: list[str],
        port: int,
        *,
        label: str | None = None,
        api_key: str | None = None,
        cwd: Path = ROOT,
        env: dict[str, str] | None = None,
        ready: str = "health",
        grace: float = 10,
        prepare: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(key, port, api_key, label)
        self.argv, self.cwd, self.env, self.ready, self.grace = argv, cwd, env or {}, ready, grace
        self.prepare = prepare  # what must be there before it starts (Prism's install)
        self.scratch: Path | None = (
            None  # a folder of its own (a baseline's export), removed by `stop`
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.log: Path | None = None
        self.failure: str | None = None  # why a bench that goes on without it could not use it

    def start(self, logdir: Path) -> Server:
        """Start the process (not waiting for it); its output goes to LOGDIR/KEY.log."""
        if self.prepare is not None:
            self.prepare()
        self.log = logdir / f"{self.key}.log"
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("MOCK_")
        }  # a bench sets its own
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env={**env, **self.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait(self, timeout: float = 60) -> Server:
        """Until the server is ready; ServerFailed (with its log's tail) if it exits or the time runs out."""
        assert self.proc is not None
        try:
            if self.ready == "port":
                wait_port(self.port, self.proc, timeout, self.label)
            else:
                wait_ready(
                    self.url,
                    self.proc,
                    timeout,
                    name=self.label,
                    any_status=self.ready == "any",
                    interval=0.2,
                )
        except RuntimeError as exc:
            raise ServerFailed(f"{exc}: {self.log_tail()}") from None
        return self

    def run(self, logdir: Path, timeout: float = 60) -> Server:
        """Start and wait; stopped again if it does not get ready."""
        try:
            return self.start(logdir).wait(timeout)
        except BaseException:
            self.stop()
            raise

    def log_tail(self, chars: int = 2000) -> str:
        text = (
            self.log.read_text(errors="replace").strip() if self.log and self.log.exists() else ""
        )
        return text[-chars:] or "(no output)"

    def pids(self) -> list[int]:
        return session_pids(self.proc.pid) if self.proc is not None else []

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL what is left after `grace` s."""
        proc, self.proc = self.proc, None
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(self.grace)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):  # a child the server left behind, too
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        # A signal is delivered, not done: an orphan may live on a moment, holding its port.
        deadline = time.monotonic() + KILL_WAIT
        while session_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float, name: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with status {proc.returncode} before it was ready")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{name} took no connection on port {port} within {timeout:.0f} s")


def mock(
    *args: str,
    key: str = "mock",
    label: str | None = None,
    cwd: Path = ROOT,
    env: dict[str, str] | None = None,
) -> Server:
    """`python -m mock_server` with these options and variables (from `cwd`: this checkout or
    a baseline's)."""
    port = free_port()
    argv = [sys.executable, "-m", "mock_server", "--host", "127.0.0.1", "--port", str(port), *args]
    return Server(
        key,
        argv,
        port,
        label=label,
        api_key=API_KEY,
        cwd=cwd,
        env={**(env or {}), "PYTHONPATH": str(cwd)},
    )


def bare(*args: str, key: str = "bare", label: str | None = None) -> Server:
    """bench/servers/bare_app.py, the bare Flask ceiling, under api_server/serve.py with these options."""
    port = free_port()
    return Server(
        key,
        [sys.executable, "-m", "bench.servers.bare_app", "--port", str(port), *args],
        port,
        label=label,
        api_key=API_KEY,
    )


def prism(key: str = "prism") -> Server:
    """Prism mocking openapi.yaml, unchanged, logging off; ready once it answers anything."""
    port = free_port()
    argv = [
        str(PRISM_BIN),
        "mock",
        str(ROOT / "openapi.yaml"),
        "-h",
        "127.0.0.1",
        "-v",
        "silent",
        "-p",
        str(port),
    ]
    return Server(
        key,
        argv,
        port,
        label="Prism",
        api_key=API_KEY,
        env={"SCARF_ANALYTICS": "false"},
        ready="any",
        prepare=ensure_prism,
    )


def reference(workers: int, model: Path = MODEL_DIR) -> tuple[Server, Endpoint]:
    """`python -m reference_impl --model models/tiny-llama` (or `model`) with its own vLLM, on
    a port it is told: the reference, and that vLLM to call directly (it stops with the reference)."""
    port, direct = free_port(), Endpoint("vLLM direct", free_port())
    argv = [
        sys.executable,
        "-m",
        "reference_impl",
        "--model",
        str(model),
        "--port",
        str(port),
        "--vllm-port",
        str(direct.port),
        "--keys",
        API_KEY,
        "--workers",
        str(workers),
    ]
    # Its vLLM may take minutes to load and as long to stop.
    return Server("reference", argv, port, api_key=API_KEY, grace=60), direct


def reference_upstream(
    upstream: str, workers: int, key: str = "reference", cwd: Path = ROOT
) -> Server:
    """`python -m reference_impl --upstream URL` (from `cwd`: this checkout or a baseline's)."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "reference_impl",
        "--upstream",
        upstream,
        "--model",
        str(MODEL_DIR),
        "--port",
        str(port),
        "--keys",
        API_KEY,
        "--workers",
        str(workers),
    ]
    return Server(key, argv, port, api_key=API_KEY, cwd=cwd, env={"PYTHONPATH": str(cwd)})


def fake_vllm(step_ms: float, model: str) -> Server:
    """bench/servers/fake_vllm.py: vLLM on a GPU, simulated (a token to every open request each step)."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "bench.servers.fake_vllm",
        "--port",
        str(port),
        "--step-ms",
        str(step_ms),
        "--model",
        model,
    ]
    return Server("vLLM direct (fake)", argv, port)


def relay(upstream: str) -> Server:
    """bench/servers/relay.py in front of `upstream`: bytes copied, the floor under an API's CPU per token.
    It relays one streamed request per connection, so a GET /health would hang: the port tells."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "bench.servers.relay",
        "--upstream",
        upstream,
        "--port",
        str(port),
    ]
    return Server("relay (the floor)", argv, port, ready="port")


def export_commit(ref: str, prefix: str) -> Path:
    """A new temporary folder holding `ref`'s tracked files (the caller removes it);
    ServerFailed, with git's message, when git cannot export `ref`."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True)
    if archive.returncode != 0:
        shutil.rmtree(folder)
        raise ServerFailed(f"git archive {ref}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder


def baseline(ref: str, build: Callable[[Path], Server]) -> Server:
    """The server `build` makes from a folder, made from an export of git `ref`'s tracked
    files (`--baseline REF`: old against new in one run, with this checkout's Python); the
    folder goes when the server stops."""
    folder = export_commit(ref, "bench_baseline_")
    try:
        server = build(folder)
    except BaseException:
        shutil.rmtree(folder)
        raise
    server.scratch = folder
    return server


def ensure_prism() -> None:
    """Install the pinned Prism (bench/package-lock.json, no install scripts) when it is missing."""
    if PRISM_BIN.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise ServerFailed("npm is not installed, so Prism could not be installed")
    print("installing Prism: npm ci --prefix bench", file=sys.stderr)
    done = subprocess.run(
        [npm, "ci", "--prefix", str(BENCH), "--ignore-scripts", "--no-audit", "--no-fund"],
        capture_output=True,
        text=True,
        env={**os.environ, "SCARF_ANALYTICS": "false"},
    )
    if done.returncode != 0 or not PRISM_BIN.exists():
        raise ServerFailed(f"npm ci failed: {done.stderr.strip()[-300:]}")


# -- CPU and memory ------------------------------------------------------------------------------


def session_pids(sid: int) -> list[int]:
    """The live processes of session `sid` (every server the harness starts leads one);
    not a zombie, which a stopped server's orphan is until something reaps it."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        state, _, _, session = text[text.rindex(")") + 2 :].split()[:4]
        if int(session) == sid and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time these processes have had so far, every thread's, from the scheduler's count."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(
                    OSError, IndexError, ValueError
                ):  # a thread that just ended
                    total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def rss_bytes(pids: Sequence[int]) -> int:
    """Resident memory of these processes now."""
    pages = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            pages += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


# -- percentiles -------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The `p`th percentile (0 to 100) of `values`, linear between the closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    at = (len(ordered) - 1) * p / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


# -- the streaming load client -------------------------------------------------------------------

USAGE = re.compile(rb'"completion_tokens":\s*(\d+)')
DONE = b"data: [DONE]"
EVENT = b"data: {"


def wsgi_environ(raw: bytes, headers: dict[str, str] | None = None) -> dict[str, object]:
    """The WSGI environ of one POST /v1/completions with `raw` as its JSON body and the bench's
    key, for an app called in process (werkzeug's EnvironBuilder). Its `wsgi.input` is read once:
    a caller that sends it again copies the environ with a fresh one."""
    from werkzeug.test import EnvironBuilder

    builder = EnvironBuilder(
        path="/v1/completions",
        method="POST",
        data=raw,
        content_type="application/json",
        headers=[("Authorization", f"Bearer {API_KEY}"), *(headers or {}).items()],
    )
    try:
        return builder.get_environ()
    finally:
        builder.close()


def request_bytes(
    target: Endpoint,
    body: dict[str, object],
    headers: dict[str, str] | None = None,
    cut: int | None = None,
    path: str = "/v1/completions",
) -> bytes:
    """One POST with a JSON body, as raw bytes; `cut` sends only that many body bytes (the
    Content-Length still promises them all: a stalled client)."""
    raw = orjson.dumps(body)
    head = "".join(f"{k}: {v}\r\n" for k, v in {**target.headers, **(headers or {})}.items())
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{target.port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(raw)}\r\n{head}\r\n"
    ).encode() + (raw if cut is None else raw[:cut])


@dataclass
class Stream:
    """One streamed answer as the client saw it."""

    done: bool  # it ended with `data: [DONE]`
    events: int  # `data: {...}` events, the usage event included
    usage_tokens: int | None  # completion_tokens of the last usage event, if any
    ttft_s: float | None  # from the start of the run to the first event
    seconds: float  # from the start of the run to the end of this stream
    error: str = ""  # why it is not done: the server's answer or the socket's error

    @property
    def tokens(self) -> int:
        """Tokens from the usage event, else one per event."""
        return self.usage_tokens if self.usage_tokens is not None else self.events


async def read_stream(port: int, request: bytes, t0: float) -> Stream:
    """Send `request` on a new connection and read its answer to `data: [DONE]`; parses only
    the status line, the content type and the usage event (a JSON parse per token would make
    the client the bottleneck)."""
    events, ttft, tail = 0, None, b""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        return Stream(False, 0, None, None, time.perf_counter() - t0, f"connect: {exc}")
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1:2]
        if status != [b"200"] or b"text/event-stream" not in head.lower():
            more = await asyncio.wait_for(reader.read(300), 5)
            answer = (head + more).decode("latin-1")
            return Stream(
                False, 0, None, None, time.perf_counter() - t0, " ".join(answer.split())[:300]
            )
        while DONE not in tail:
            chunk = await reader.read(65536)
            if not chunk:
                return Stream(
                    False,
                    events,
                    None,
                    ttft,
                    time.perf_counter() - t0,
                    "closed before [DONE]: " + tail[-80:].decode("latin-1"),
                )
            # The last bytes of the previous read go with this one, so that a marker cut in
            # two is found; they are too short to hold a whole one, so none counts twice.
            window = tail[-(len(EVENT) - 1) :] + chunk
            if ttft is None and EVENT in window:
                ttft = time.perf_counter() - t0
            events += window.count(EVENT)
            tail = tail[-1024:] + chunk
        usage = USAGE.findall(tail)
        return Stream(
            True, events, int(usage[-1]) if usage else None, ttft, time.perf_counter() - t0
        )
    except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        return Stream(
            False, events, None, ttft, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
        )
    finally:
        writer.close()


async def gather_streams(port: int, request: bytes, count: int) -> tuple[list[Stream], float]:
    """`count` streams opened at once: each one's, and the wall time of them all."""
    t0 = time.perf_counter()
    got = await asyncio.gather(*(read_stream(port, request, t0) for _ in range(count)))
    return list(got), time.perf_counter() - t0


def streams(
    target: Endpoint, body: dict[str, object], count: int = 1, headers: dict[str, str] | None = None
) -> tuple[list[Stream], float]:
    """`count` streams of `body` opened at once, on uvloop: each one's, and the wall time."""
    return uvloop.run(gather_streams(target.port, request_bytes(target, body, headers), count))


# -- redis-server (Debian's; scripts/setup_redis.sh) ------------------------------------------

REDIS_START_TIMEOUT_S = 30.0


def redis_missing() -> str | None:
    """Why no redis-server can start here, or None."""
    if shutil.which("redis-server") is None:
        return "no redis-server (run as root: bash scripts/setup_redis.sh)"
    return None


class RedisServer:
    """`redis-server` on 127.0.0.1 and a free port, with its data in a temp directory: an
    append-only file synced on every write, as DEPLOY.md advises, so a server killed and started
    again on the same directory has every Budget it had (the Budget's bench and its tests)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = Path(tempfile.mkdtemp(prefix="redis-test-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        reason = redis_missing()
        if reason:
            raise ServerFailed(reason)
        with open(self.dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                [
                    "redis-server",
                    "--bind",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--dir",
                    str(self.dir),
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                    "--daemonize",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        deadline = time.monotonic() + REDIS_START_TIMEOUT_S
        try:
            while True:
                try:
                    client.ping()
                    break
                except redis.exceptions.BusyLoadingError:
                    pass
                except redis.ConnectionError:
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start: {self.log()}") from None
                time.sleep(0.05)
        finally:
            client.close()
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown save (the append-only file has every write)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def log(self) -> str:
        return (self.dir / "redis.log").read_text(errors="replace")[-3000:]

    def close(self) -> None:
        stop_process(self.proc, timeout=10)
        self.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)
