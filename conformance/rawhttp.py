"""HTTP/1.1 over a plain socket, for the requests an HTTP client would normalise.

httpx (h11) refuses to send a body shorter than its Content-Length, both
Content-Length and Transfer-Encoding, pipelined requests or a stalled body; the
robust: checks need exactly those. Every connection goes to the base URL's host
and port (TLS for https), every request target under its path, and every read
is bounded in time.
"""
from __future__ import annotations

import json
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

MAX_READ = 1 << 22          # bytes kept of one connection's answers (4 MiB)


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]      # lower-case names; a repeated header keeps its last value
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass
class RawExchange:
    """What came back on one connection."""
    responses: list[RawResponse] = field(default_factory=list)
    data: bytes = b""            # every byte read
    closed: bool = False         # the server closed the connection (or reset it)
    reset: bool = False          # ... by a reset (RST), not a close
    timed_out: bool = False      # the bound passed while more was expected
    error: str | None = None     # a connection that failed before any answer

    @property
    def first(self) -> RawResponse | None:
        return self.responses[0] if self.responses else None


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    tls: bool
    prefix: str                  # the base URL's path, prepended to every request target

    @classmethod
    def from_base_url(cls, base_url: str) -> "Target":
        parts = urlsplit(base_url)
        tls = parts.scheme == "https"
        return cls(parts.hostname or "localhost", parts.port or (443 if tls else 80), tls,
                   parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        if self.tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        return sock

    def head(self, method: str, path: str, headers: list[tuple[str, str]]) -> bytes:
        """A request head, the Host header first, headers sent as given."""
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def exchange(target: Target, parts: list[bytes], *, expect: int = 1, bound: float,
             half_close: bool = False, pause: float = 0.0, linger_reset: bool = False) -> RawExchange:
    """Send `parts` (pausing `pause` seconds between them), then read until `expect`
    responses came, the server closed, or `bound` seconds passed since the last send.

    `half_close` shuts our sending side after the last part (the client is done);
    `linger_reset` ends the connection with a reset instead of reading (a client that vanishes).
    """
    out = RawExchange()
    try:
        sock = target.connect(bound)
    except OSError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    try:
        for i, part in enumerate(parts):
            if i and pause:
                time.sleep(pause)
            sock.sendall(part)
        if linger_reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            return out
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        _read(sock, out, expect, time.monotonic() + bound)
    except OSError as exc:
        if not out.data:
            out.error = f"{type(exc).__name__}: {exc}"
        out.closed = True
    finally:
        sock.close()
    return out


def _read(sock: socket.socket, out: RawExchange, expect: int, deadline: float) -> None:
    buf = bytearray()
    while len(out.responses) < expect:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            out.timed_out = True
            return
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(1 << 16)
        except (socket.timeout, TimeoutError):
            out.timed_out = True
            return
        except ConnectionResetError:
            out.reset = True
            chunk = b""
        if chunk:
            out.data += chunk
            buf += chunk
        while True:
            parsed = _parse(buf, closed=not chunk)
            if parsed is None:
                break
            response, used = parsed
            if not 100 <= response.status < 200:     # an interim answer (100 Continue) is not the response
                out.responses.append(response)
            del buf[:used]
        if not chunk:
            out.closed = True
            return
        if len(out.data) > MAX_READ:
            return


def _parse(buf: bytearray, *, closed: bool) -> tuple[RawResponse, int] | None:
    """One whole response at the start of `buf` and its length; None if more is needed."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        status = 0
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    start = end + 4
    if 100 <= status < 200:
        return RawResponse(status, headers, b""), start
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, pos = bytearray(), start
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            try:
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            except ValueError:
                return RawResponse(status, headers, bytes(buf[start:])), len(buf)
            if size == 0:
                trailer = buf.find(b"\r\n\r\n", eol)
                if trailer < 0:
                    return None
                return RawResponse(status, headers, bytes(body)), trailer + 4
            if len(buf) < eol + 2 + size + 2:
                return None
            body += buf[eol + 2:eol + 2 + size]
            pos = eol + 2 + size + 2
    if "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            length = 0
        if len(buf) < start + length:
            return None
        return RawResponse(status, headers, bytes(buf[start:start + length])), start + length
    if not closed:        # no length: the body runs to the close
        return None
    return RawResponse(status, headers, bytes(buf[start:])), len(buf)
