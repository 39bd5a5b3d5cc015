"""The servers bench/http_bench.py measures, side by side, on free ports of 127.0.0.1:
the mock (`python -m mock_server`), Prism mocking the same openapi.yaml, and the bare
Flask ceiling (bench/bare_app.py) under the mock's own server settings. Candidates of
the serving model (`mock-gthread`, `bare-gthread`) run the same with `--worker gthread`."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from api_server.serve import add_arguments  # noqa: E402
from bench.git_export import export_commit  # noqa: E402
from reference_impl.launcher import free_port  # noqa: E402
from reference_impl.launcher import wait_ready as launcher_wait_ready  # noqa: E402

BENCH = ROOT / "bench"
PRISM_BIN = BENCH / "node_modules" / ".bin" / "prism"
API_KEY = "bench-key"
MODEL = "llama-8b"
PROMPT = "The sky is"
SERVERS = ("mock", "prism", "bare", "mock-gthread", "bare-gthread")


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
    Case("a", "(a) 400 validation error",
         {"model": MODEL, "prompt": PROMPT, "max_tokens": "16", "temperature": 0}, 400),
    Case("b", "(b) 16-token completion",
         {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "temperature": 0}, 200),
)

STREAM_BODY = {
    "model": MODEL, "prompt": PROMPT, "max_tokens": 4096, "temperature": 0, "ignore_eos": True,
    "stream": True, "stream_options": {"include_usage": True},
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
    scratch: Path = None   # a folder of its own, removed by `stop`

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


def add_server_arguments(p):
    """The serving options of `python -m mock_server` (api_server/serve.py's, with the
    mock's defaults and MOCK_* variables), for the mock and the ceiling alike."""
    add_arguments(p, lambda name, default: os.environ.get("MOCK_" + name, default), os.cpu_count() or 1)


def serving_args(args, worker=None):
    """The serving options as given to both the mock and the ceiling."""
    return ["--workers", str(args.workers), "--worker", worker or args.worker,
            "--connections", str(args.connections_per_worker), "--threads", str(args.threads)]


def build_servers(args):
    py = sys.executable
    servers = []
    for key in args.servers:
        port = free_port()
        worker = "gthread" if key.endswith("-gthread") else None
        if key.startswith("mock"):
            argv = [py, "-m", "mock_server", "--host", "127.0.0.1", "--port", str(port),
                    *serving_args(args, worker), "--log-level", "warning"]
            servers.append(Server(key, key, argv, port))
        elif key.startswith("bare"):
            argv = [py, str(BENCH / "bare_app.py"), "--port", str(port), *serving_args(args, worker)]
            servers.append(Server(key, key.replace("bare", "bare Flask", 1), argv, port))
        else:
            argv = [str(PRISM_BIN), "mock", str(ROOT / "openapi.yaml"), "-h", "127.0.0.1",
                    "-v", "silent", "-p", str(port)]
            servers.append(Server(key, "Prism", argv, port, env={"SCARF_ANALYTICS": "false"}))
    if args.baseline:
        servers.append(baseline_server(args, args.baseline))
    return servers


def baseline_server(args, ref):
    """The mock as of git `ref` (`--baseline`), for old against new in one run: its
    tracked files exported to a temporary folder (removed by `stop`) and run from there
    with this checkout's Python environment."""
    folder = export_commit(ref, "http_bench_base_", BenchError)
    port = free_port()
    argv = [sys.executable, "-m", "mock_server", "--host", "127.0.0.1", "--port", str(port),
            *serving_args(args), "--log-level", "warning"]
    return Server("mock-base", f"mock@{ref}", argv, port, cwd=folder,
                  env={"PYTHONPATH": str(folder)}, scratch=folder)


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
    if server.scratch is not None:
        shutil.rmtree(server.scratch, ignore_errors=True)
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

