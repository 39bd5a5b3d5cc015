"""For the robust: group's tests: the mock under gunicorn, broken one way at a time, and a
toy server that frames a body by Transfer-Encoding and keeps the connection (smuggling).

`python -m gallery.hostile --port P --mode-file F` serves the mock under gunicorn
(one worker) with `HostileBreaker` in front; the mode is read from F on every request,
so one process serves every mode. An empty file: the mock untouched.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from api_server.children import free_port, stop_process, wait_ready
from contract import InferenceUnavailable, InternalError, spec
from gallery.support import CONTRACT

Environ = dict[str, Any]
StartResponse = Callable[..., Any]

_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_JSON_EDGE = re.compile(rb"NaN|Infinity|e999|e-999|[0-9]{1000}|\[{1000}|(\{\"a\":){1000}")
_PATH_TRICK = re.compile(r"\.\.|%00|%ff|//|;")

# mode -> what it breaks (checks in tests/conformance/test_robust_discrimination.py)
MODES = (
    "surrogate_500",
    "json_500",
    "steering_500",
    "priority_accepted",
    "echo",
    "short_body_executed",
    "stall_forever",
    "unhealthy_after",
    "path_500",
    "coding_read_plain",
    "chunk_waits",
    "lists_unbounded",
)


def _error(start_response: StartResponse, error: Any, extra: str = "") -> list[bytes]:
    body = CONTRACT.errors.body(error, CONTRACT.errors.new_request_id())
    body["error"]["message"] += extra
    raw = json.dumps(body).encode()
    start_response(
        f"{CONTRACT.errors.status(error)} X",
        [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(raw))),
            ("X-Request-Id", body["request_id"]),
        ],
    )
    return [raw]


class HostileBreaker:
    """WSGI middleware: the mock with the mode in `mode_file` broken."""

    def __init__(
        self, app: Callable[[Environ, StartResponse], Iterable[bytes]], mode_file: Path
    ) -> None:
        self.app, self.mode_file = app, mode_file
        self.hit = False  # unhealthy_after: a POST was served in this mode
        self.last: str | None = None

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        mode = self.mode_file.read_text().strip() or None
        if mode != self.last:
            self.hit, self.last = False, mode
        path = environ.get("RAW_URI") or environ.get("PATH_INFO", "")
        if mode == "unhealthy_after" and path == "/health" and self.hit:
            return _error(
                start_response, InferenceUnavailable.from_template("inference_unavailable")
            )
        if mode == "path_500" and _PATH_TRICK.search(path):
            return _error(start_response, InternalError.from_template("internal_error"))
        if mode == "coding_read_plain" and "HTTP_TRANSFER_ENCODING" in environ:
            # undoes the chunking alone and reads what a gzip coding hides as plain text
            environ["HTTP_TRANSFER_ENCODING"] = "chunked"
        if mode == "chunk_waits" and "chunked" in environ.get("HTTP_TRANSFER_ENCODING", ""):
            # waits for the bytes a chunk's size line declares, as a reader without a bound does
            time.sleep(3600)  # (gevent's, under the server's worker)
        if environ.get("REQUEST_METHOD") == "POST":
            self.hit = True
        if environ.get("REQUEST_METHOD") != "POST" or mode in (None, "unhealthy_after", "path_500"):
            return self._maybe_echo(mode, environ, start_response, b"")
        if mode == "stall_forever":
            raw = environ["wsgi.input"].read()  # no bound: waits for the client
        elif mode == "short_body_executed":
            raw = environ["wsgi.input"].read()  # what came, as if it were all
        else:
            length = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                raw = environ["wsgi.input"].read(length) if length else environ["wsgi.input"].read()
            except Exception:
                raw = b""
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(raw), str(len(raw))
        if (
            (mode == "surrogate_500" and _SURROGATE.search(raw))
            or (mode == "json_500" and _JSON_EDGE.search(raw))
            or (mode == "steering_500" and b"apply_steering_vectors" in raw)
        ):
            return _error(start_response, InternalError.from_template("internal_error"))
        if mode == "lists_unbounded":  # reads a list's first items, however many there are
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if isinstance(body, dict):
                body = {k: v[:1] if isinstance(v, list) else v for k, v in body.items()}
                raw = json.dumps(body).encode()
                environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(raw), str(len(raw))
        if mode == "priority_accepted":
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if isinstance(body, dict) and isinstance(body.get("priority"), str):
                body["priority"] = 0
                raw = json.dumps(body).encode()
                environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(raw), str(len(raw))
        return self._maybe_echo(mode, environ, start_response, raw)

    def _maybe_echo(
        self, mode: str | None, environ: Environ, start_response: StartResponse, raw: bytes
    ) -> Iterable[bytes]:
        if mode != "echo":
            return self.app(environ, start_response)
        captured: dict[str, Any] = {}

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            captured["status"], captured["headers"] = status, headers
            return lambda data: None

        body = b"".join(self.app(environ, capture))
        if int(captured["status"].split()[0]) >= 400:
            data = json.loads(body)
            data["error"]["message"] += (
                " " + environ.get("RAW_URI", "") + " " + raw.decode("utf-8", "replace")
            )
            body = json.dumps(data).encode()
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        start_response(captured["status"], headers + [("Content-Length", str(len(body)))])
        return [body]


# -- a server that smuggles: Transfer-Encoding first, then the next request on the connection ----


def _read_head(rfile: Any) -> bytes | None:
    """A request's head, byte by byte (what follows is the caller's to read); None at the close."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = rfile.read(1)
        if not byte:
            return None
        head += byte
    return head


class _Smuggling(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while True:
            head = _read_head(self.rfile)
            if head is None:
                return
            lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip()
                for k, _, v in (line.partition(":") for line in lines[1:] if line)
            }
            if "chunked" in headers.get("transfer-encoding", ""):
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    self.rfile.read(size + 2)
                    if size == 0:
                        break
            else:
                self.rfile.read(int(headers.get("content-length", "0")))
            path = lines[0].split()[1]
            rid = CONTRACT.errors.new_request_id()
            body: dict[str, Any]
            if path == "/health":
                status, body = "200 OK", {"status": "ok"}
            else:
                status, body = (
                    "400 Bad Request",
                    {
                        "error": {
                            "message": "x",
                            "type": "invalid_request_error",
                            "param": None,
                            "code": "invalid_request",
                        },
                        "request_id": rid,
                    },
                )
            raw = json.dumps(body).encode()
            self.wfile.write(
                f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nX-Request-Id: {rid}\r\n"
                f"Content-Length: {len(raw)}\r\n\r\n".encode()
                + raw
            )
            if headers.get("connection", "").lower() == "close":
                return


class _NotHttp(socketserver.StreamRequestHandler):
    """GET /health and /v1/models as the mock answers them (the run connects); anything else
    answered with a status line that is not HTTP/1.1's (no status code), then closed."""

    models: bytes = b""

    def handle(self) -> None:
        head = _read_head(self.rfile)
        if head is None:
            return
        path = head.split(b" ", 2)[1]
        if path in (b"/health", b"/v1/models"):
            raw = b'{"status": "ok"}' if path == b"/health" else self.models
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(raw), raw)
            )
            return
        self.wfile.write(b"HTTP/1.1 OK\r\nContent-Length: 2\r\n\r\n{}")


@contextmanager
def not_http_server(models: bytes) -> Iterator[str]:
    """A server whose answers to the API's requests are not HTTP/1.1; `models`: its GET /v1/models body."""
    handler = type("NotHttp", (_NotHttp,), {"models": models})
    with _serving(handler) as url:
        yield url


@contextmanager
def smuggling_server() -> Iterator[str]:
    with _serving(_Smuggling) as url:
        yield url


@contextmanager
def _serving(handler: type[socketserver.BaseRequestHandler]) -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def main() -> None:
    from api_server.serve import gunicorn_options, serve
    from mock_server import MockConfig, create_app

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mode-file", type=Path, required=True)
    args = p.parse_args()
    app = create_app(MockConfig())
    app.wsgi_app = HostileBreaker(app.wsgi_app, args.mode_file)  # type: ignore[method-assign]
    serve(app, gunicorn_options("127.0.0.1", args.port, 1, 8))


ROOT = Path(__file__).resolve().parents[1]


class Breakable:
    """This module's server, the mock under gunicorn, in a process of its own, its mode set through
    a file; the spec's body-read timeout shortened to `body_read_seconds`."""

    def __init__(self, tmp: Path, body_read_seconds: float) -> None:
        raw = yaml.safe_load(spec().path.read_text())
        raw["x-caps"]["body_read_seconds"] = body_read_seconds
        (tmp / "openapi.yaml").write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True))
        self.mode_file = tmp / "mode"
        self.mode_file.write_text("")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "ACS_OPENAPI": str(tmp / "openapi.yaml")}
        self.log = (tmp / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gallery.hostile",
                "--port",
                str(self.port),
                "--mode-file",
                str(self.mode_file),
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_ready(
                self.url,
                self.proc,
                60,
                name="the breakable mock",
                log=tmp / "server.log",
                interval=0.1,
            )
        except RuntimeError:
            self.close()
            raise

    def mode(self, mode: str | None) -> None:
        self.mode_file.write_text(mode or "")

    def close(self) -> None:
        stop_process(self.proc)
        self.log.close()


if __name__ == "__main__":
    main()
