"""A real redis-server for the tests of the Budget in Redis, on a free port.

redis-server is Debian's package, installed by scripts/setup_redis.sh (from
scripts/test.sh) where it can be; without it the tests that need one skip
themselves with that reason. The server keeps an append-only file synced on
every write, as DEPLOY.md advises, so a server killed and started again on the
same directory has every Budget it had.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis

from api_server.children import free_port, stop_process

START_TIMEOUT_S = 30.0


def missing() -> str | None:
    """Why no Redis test can run here, or None."""
    if shutil.which("redis-server") is None:
        return "no redis-server (run as root: bash scripts/setup_redis.sh)"
    return None


class RedisServer:
    """`redis-server` on 127.0.0.1 and a free port, with its data in a temp directory."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = Path(tempfile.mkdtemp(prefix="redis-test-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        reason = missing()
        if reason:
            pytest.skip(reason)
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
        deadline = time.monotonic() + START_TIMEOUT_S
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
