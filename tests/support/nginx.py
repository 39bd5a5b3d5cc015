"""Debian's nginx in front of a server, configured with the shipped front
(reference_impl/deploy/nginx): on free ports, with a temp prefix, as this user.

nginx is installed by scripts/setup_nginx.sh (from scripts/test.sh) where it can be;
without it the tests that need one skip themselves with that reason.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from api_server.children import free_port, stop_process

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "reference_impl" / "deploy" / "nginx"
START_TIMEOUT_S = 30.0
# The two lines of the shipped site that name where it runs; everything else is used as shipped.
UPSTREAM_LINE, LISTEN_LINE = "server api:8000;", "listen 80;"
MAIN = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
    include acs-api.conf;
}}
"""


def missing() -> str | None:
    if shutil.which("nginx") is None:
        return "no nginx (run as root: bash scripts/setup_nginx.sh)"
    return None


ERRORS_LINE = "include acs-errors.conf;"


class NginxFront:
    """The shipped nginx site in front of `upstream` (host:port); `errors=False`: without its
    error pages (nginx's own HTML refusals, as a front usually ships)."""

    def __init__(self, upstream: str, *, errors: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = Path(tempfile.mkdtemp(prefix="nginx-test-"))
        self.dir.chmod(0o755)  # nginx's workers run as nobody when started as root: bodies go here
        self.proc: subprocess.Popen[bytes] | None = None
        site = (SHIPPED / "acs-api.conf").read_text()
        for line, local in (
            (UPSTREAM_LINE, f"server {upstream};"),
            (LISTEN_LINE, f"listen 127.0.0.1:{self.port};"),
        ):
            assert site.count(line) == 1, f"the shipped site has no single {line!r}"
            site = site.replace(line, local)
        if not errors:
            assert site.count(ERRORS_LINE) == 1, f"the shipped site has no single {ERRORS_LINE!r}"
            site = site.replace(ERRORS_LINE, "")
        (self.dir / "acs-api.conf").write_text(site)
        shutil.copy(SHIPPED / "acs-errors.conf", self.dir / "acs-errors.conf")
        (self.dir / "nginx.conf").write_text(MAIN.format(dir=self.dir))

    def start(self) -> NginxFront:
        reason = missing()
        if reason:
            pytest.skip(reason)
        with open(self.dir / "stderr.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["nginx", "-p", str(self.dir), "-c", "nginx.conf", "-g", "daemon off;"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"nginx did not start: {self.log()}") from None
                time.sleep(0.05)

    def log(self) -> str:
        return "".join(
            (self.dir / name).read_text(errors="replace")[-3000:]
            for name in ("stderr.log", "error.log")
            if (self.dir / name).exists()
        )

    def close(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)
