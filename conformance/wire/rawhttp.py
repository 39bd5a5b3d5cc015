"""HTTP/1.1 over a plain socket, for the requests an HTTP client would normalise.

httpx (h11) refuses to send a body shorter than its Content-Length, both
Content-Length and Transfer-Encoding, pipelined requests or a stalled body; the
robust: checks need exactly those. What comes back is read by h11 itself, as any
client would read it. Every connection goes to the base URL's host
and port (TLS for https), every request target under its path, and every read
is bounded in time.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import h11

from conformance.wire import jsontext
from conformance.wire.sdk import client_headers
from conformance.wire.secrets import SECRETS

MAX_READ = 1 << 22  # bytes kept of one connection's answers (4 MiB)


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header's values joined with ", "
    body: bytes

    def json(self) -> Any:
        try:
            return jsontext.loads(self.body)
        except ValueError:
            return None


@dataclass
class RawExchange:
    """What came back on one connection."""

    responses: list[RawResponse] = field(default_factory=list)
    data: bytes = b""  # every byte read
    closed: bool = False  # the server closed the connection (or reset it)
    reset: bool = False  # ... by a reset (RST), not a close
    timed_out: bool = False  # the bound passed while more was expected
    error: str | None = None  # a connection that failed before any answer
    malformed: str | None = None  # what came back is not HTTP/1.1 (h11's reason)

    @property
    def first(self) -> RawResponse | None:
        return self.responses[0] if self.responses else None


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    tls: bool
    prefix: str  # the base URL's path, prepended to every request target

    @classmethod
    def from_base_url(cls, base_url: str) -> Target:
        parts = urlsplit(base_url)
        tls = parts.scheme == "https"
        return cls(
            parts.hostname or "localhost",
            parts.port or (443 if tls else 80),
            tls,
            parts.path.rstrip("/"),
        )

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
        """A request head, the Host header first, headers sent as given, then the openai SDK's
        that they do not name (a client's, as the gate's other requests; but Accept-Encoding:
        what comes back here is read as sent)."""
        lines = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers]
        named = {k.lower() for k, _ in headers} | {"accept-encoding"}
        lines += [f"{k}: {v}" for k, v in client_headers().items() if k.lower() not in named]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def exchange(
    target: Target,
    parts: Sequence[bytes],
    *,
    expect: int = 1,
    bound: float,
    half_close: bool = False,
    pause: float = 0.0,
    linger_reset: bool = False,
) -> RawExchange:
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
    out.data = SECRETS.mask_bytes(out.data)  # a server's words masked before any check cuts them
    return out


def _read(sock: socket.socket, out: RawExchange, expect: int, deadline: float) -> None:
    """The answers, parsed by h11 as a client's: strict (a status line or header that is not
    HTTP/1.1 is `malformed`, never a made-up status), each message framed as HTTP frames it."""
    conn = h11.Connection(h11.CLIENT)
    _asked(conn)
    status, headers, body = 0, {}, bytearray()
    ended = False
    while len(out.responses) < expect:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            if not ended:  # a message cut off by the close is no answer, as a close is
                out.malformed = str(exc)
            return
        if event is h11.NEED_DATA:
            chunk = _recv(sock, out, deadline)
            if chunk is None:
                return
            ended = not chunk
            out.closed = out.closed or ended
            conn.receive_data(chunk)
            if len(out.data) > MAX_READ:
                return
        elif isinstance(event, h11.Response):
            status, headers, body = event.status_code, _headers(event.headers), bytearray()
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage):
            masked = {k: SECRETS(v) for k, v in headers.items()}
            out.responses.append(RawResponse(status, masked, SECRETS.mask_bytes(bytes(body))))
            if conn.their_state is not h11.DONE:  # the server closes after it
                continue
            conn.start_next_cycle()
            _asked(conn)
        elif isinstance(event, h11.ConnectionClosed):
            return
        # an InformationalResponse (100 Continue) is not the response: read on


def _asked(conn: h11.Connection) -> None:
    """Tell h11 a request went (the bytes sent were ours, not h11's), so it reads the answer."""
    conn.send(h11.Request(method="POST", target="/", headers=[("Host", "raw")]))
    conn.send(h11.EndOfMessage())


def _recv(sock: socket.socket, out: RawExchange, deadline: float) -> bytes | None:
    """The next bytes (b"" at the close or a reset); None when the bound passed."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        out.timed_out = True
        return None
    sock.settimeout(remaining)
    try:
        chunk = sock.recv(1 << 16)
    except TimeoutError:
        out.timed_out = True
        return None
    except ConnectionResetError:
        out.reset = True
        return b""
    out.data += chunk
    return chunk


def _headers(fields: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lower-case names; a repeated field's values joined with ", " (RFC 9110 5.3)."""
    out: dict[str, str] = {}
    for name, value in fields:
        key, text = name.decode("latin-1"), value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out
