"""Servers as child processes, for the commands, tests and benchmarks that start them: a
free port, a wait until the child answers GET /health, a stop. The one copy of each (the
reference's launcher, the mock's in-process `live_mock`, tests/ and bench/ use it);
standard library only, so that any layer may import it."""

from __future__ import annotations

import atexit
import http.client
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

TAIL_CHARS = 6000  # of a child's log in the error that says why it never became ready


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def health_status(url: str, timeout: float) -> int | None:
    """The status of GET `url`/health, on a connection of its own; None when nothing answers."""
    parts = urlsplit(url)
    conn_class = (
        http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    )
    conn = conn_class(parts.netloc, timeout=timeout)
    try:
        conn.request("GET", parts.path.rstrip("/") + "/health")
        return conn.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def wait_ready(
    url: str,
    proc: subprocess.Popen[bytes] | None,
    timeout: float,
    name: str = "vLLM",
    log: Path | None = None,
    any_status: bool = False,
    interval: float = 0.5,
) -> None:
    """Until GET /health answers 200 (with any_status, anything: Prism has no /health);
    RuntimeError, with the tail of the child's log (`log`, else its stderr pipe), if the
    process exits or the time runs out."""

    def fail(why: str) -> RuntimeError:
        if log is not None:
            tail = log.read_text(errors="replace")[-TAIL_CHARS:]
        elif proc is not None and proc.stderr is not None and proc.poll() is not None:
            tail = proc.stderr.read().decode(errors="replace")[-TAIL_CHARS:]
        else:
            tail = ""
        return RuntimeError(f"{name} {why}" + (f":\n{tail}" if tail else ""))

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise fail(f"exited with status {proc.returncode} before it was ready")
        status = health_status(url, min(2.0, timeout))
        if status == 200 or (any_status and status is not None):
            return
        time.sleep(interval)
    raise fail(f"was not ready within {timeout:.0f} s")


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 15) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def remove_at_exit(directory: str) -> None:
    """Remove `directory` when this process exits; not when a child forked from it does (a
    forked child runs the parent's atexit hooks too)."""
    owner = os.getpid()

    def remove() -> None:
        if os.getpid() == owner:
            shutil.rmtree(directory, ignore_errors=True)

    atexit.register(remove)
