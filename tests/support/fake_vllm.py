"""Fake vLLM upstreams the reference is tested against: a scripted one on a raw socket (each
request on each connection answered by a script), vLLM over real HTTP/1.1 with chunked streams,
a router's GET /health and GET /v1/models, and a /health that answers as told."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx
from werkzeug.wrappers import Request, Response

from contract import spec
from tests.support.upstream import UpstreamServer
from tests.support.vllm_stream import SKY, completion

SERVED = spec().default_model
SKY_EVENTS = [event + b"\n\n" for event in SKY.split(b"\n\n") if event]


Script = Callable[
    [socket.socket, dict[str, Any], int], None
]  # (connection, request body, request's number on it)


class Vllm:
    """A scripted vLLM: each request on each connection is answered by `script`."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[dict[str, Any]] = []
        self.closed_by_client = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buffer = b""
        number = 0
        with conn:
            try:
                while True:
                    while b"\r\n\r\n" not in buffer:
                        data = conn.recv(65536)
                        if not data:
                            self.closed_by_client.set()
                            return
                        buffer += data
                    head, buffer = buffer.split(b"\r\n\r\n", 1)
                    length = int(
                        next(
                            line.split(b":")[1]
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        )
                    )
                    while len(buffer) < length:
                        buffer += conn.recv(65536)
                    body, buffer = json.loads(buffer[:length]), buffer[length:]
                    self.requests.append(body)
                    number += 1
                    self.script(conn, body, number)
            except OSError:  # the client closed the connection while we wrote
                self.closed_by_client.set()

    def close(self) -> None:
        self.server.close()


class ChunkedVllm(http.server.BaseHTTPRequestHandler):
    """vLLM over real HTTP/1.1: keep-alive, a stream as one chunk per event (uvicorn's way)."""

    protocol_version = "HTTP/1.1"
    connections = 0

    def setup(self) -> None:
        type(self).connections += 1
        super().setup()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        if body["stream"]:
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in [*SKY_EVENTS, b""]:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        else:
            whole = json.dumps(completion(SKY)).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole)

    def log_message(self, *args: object) -> None:
        pass


class Router:
    """The router's GET /health (`healthy` decides 200 or 503) and GET /v1/models."""

    def __init__(self) -> None:
        self.healthy = True

    def __call__(self, environ: dict, start_response: object) -> object:
        request = Request(environ)
        if request.path == "/health":
            response = Response(status=200 if self.healthy else 503)
        elif request.path == "/v1/models":  # production-stack's ModelCard: no max_model_len
            response = Response(
                '{"object": "list", "data": [{"id": "%s", "object": "model", "created": 0, '
                '"owned_by": "vllm", "parent": null}]}' % SERVED,
                content_type="application/json",
            )
        else:
            response = Response(status=404)
        return response(environ, start_response)


class Health(UpstreamServer):
    """A fake upstream's /health: `status` (or `error`, raised: no answer), and every path asked."""

    def __init__(self) -> None:
        self.status, self.error, self.asked = 200, None, []
        super().__init__(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(request.url.path)
        if self.error is not None:
            raise self.error
        return httpx.Response(self.status)
