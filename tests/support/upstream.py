"""A stand-in for vLLM on a real loopback socket, answering with httpx-style handlers.

The reference talks to its upstream through its own client (reference_impl/wire.py) only,
so a test that scripts vLLM's answers serves them over HTTP/1.1: `answer(request)` gets an
httpx.Request and returns an httpx.Response, as an httpx.MockTransport handler would. A
response with a Content-Length goes whole; one with a stream of its own (a SyncByteStream)
goes chunked, a chunk per piece as the stream yields it, and the stream is closed when the
client leaves. A handler that raises httpx.ConnectError has the connection closed with no
answer; one that raises httpx.TimeoutException gets none either, the connection held open
until the client gives up.
"""

from __future__ import annotations

import socket
import socketserver
import ssl
import threading
from collections.abc import Callable
from typing import Any

import httpx

Answer = Callable[[httpx.Request], httpx.Response]


class _Handler(socketserver.StreamRequestHandler):
    server: UpstreamServer

    def handle(self) -> None:
        while self._one():
            pass

    def _one(self) -> bool:
        """Serve one request; False when the connection is over."""
        line = self.rfile.readline(65537)
        if not line.strip():
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: list[tuple[str, str]] = []
        while (header := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = header.decode("latin-1").partition(":")
            headers.append((name.strip(), value.strip()))
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        request = httpx.Request(
            method,
            f"http://{self.server.host}{target}",
            headers=headers,
            content=self.rfile.read(length),
        )
        try:
            response = self.server.answer(request)
        except httpx.TimeoutException:
            self.rfile.read()  # silent until the client leaves
            return False
        except httpx.ConnectError:
            return False
        return self._send(response)

    def _send(self, response: httpx.Response) -> bool:
        head = [f"HTTP/1.1 {response.status_code} {response.reason_phrase}"]
        head += [
            f"{k}: {v}"
            for k, v in response.headers.multi_items()
            if k.lower() != "transfer-encoding"
        ]
        if "content-length" in response.headers:
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.read())
            return True
        head.append("transfer-encoding: chunked")
        stream: Any = response.stream
        try:
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
            for piece in stream:
                if piece:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            return True
        except OSError:  # the client closed the connection while we wrote
            return False
        finally:
            if hasattr(stream, "close"):
                stream.close()


class UpstreamServer(socketserver.ThreadingTCPServer):
    """`answer` served on 127.0.0.1 (`url`), a thread per connection, kept alive; over TLS
    with `tls` (a server-side context)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: Answer, tls: ssl.SSLContext | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.tls = tls
        self.host = f"127.0.0.1:{self.server_address[1]}"
        self.url = f"{'https' if tls else 'http'}://{self.host}"
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if self.tls is not None:
            sock.settimeout(5)
            try:
                sock = self.tls.wrap_socket(
                    sock, server_side=True
                )  # (a refused handshake: OSError)
            except OSError:
                sock.close()
                raise
            sock.settimeout(None)
        return sock, address

    def close(self) -> None:
        self.shutdown()
        self.server_close()

    def __enter__(self) -> UpstreamServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Proxy(UpstreamServer):
    """A loopback proxy to `target` that keeps every request it forwards (`requests`)."""

    def __init__(self, target: str) -> None:
        self.requests: list[httpx.Request] = []
        self._target = httpx.Client(base_url=target, timeout=120)
        super().__init__(self._forward)

    def _forward(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self._target.request(
            request.method,
            request.url.raw_path.decode(),
            content=request.content,
            headers={
                k: v
                for k, v in request.headers.items()
                if k.lower() not in ("host", "content-length")
            },
        )
        return httpx.Response(
            answer.status_code,
            headers={"content-type": answer.headers.get("content-type", "application/json")},
            content=answer.content,
        )

    def close(self) -> None:
        super().close()
        self._target.close()


def closed_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago, nothing listening on it now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
