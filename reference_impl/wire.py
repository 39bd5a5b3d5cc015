"""The reference's one HTTP/1.1 client to its upstream (vLLM, or a router for vLLM): the
completions, streamed or whole, GET /health and GET /v1/models; read in the request's own
greenlet (or thread), parsed by httptools.

Why not httpx (bench/results/reference.md and reference_load.md have the measurements; the
last, with 256 streams side by side: httpx over its public API ~3x this client's CPU a token):
- httpx's parser, h11, costs ~5 us of CPU per chunk of vLLM's stream (a chunk per token);
  httptools (llhttp, in C: uvicorn's, vLLM's own server's parser) 0.25-0.3 us.
- httpx's reads block. To send `: keepalive` while vLLM is quiet, its stream ran in a pump
  (a greenlet under gevent) that handed each token to the response: two greenlet switches
  and an Event per token. Here a read waits at most `interval` seconds and says when
  nothing came, so the response's own greenlet reads vLLM and writes the client, and what
  one read brings leaves in one write.
- httpcore writes a request's head and body in two sends (each wakes vLLM's server on
  loopback); here a request leaves in one.

What this client does, and no more: GET or POST to one host:port (http, or https with the
system's CA store) with the request written in one send; the answer's status and body
(chunked or Content-Length) through httptools; kept-alive connections, each reused only when
its answer was read to its end, dropped after `keepalive_expiry` idle seconds (before vLLM's
uvicorn drops them) or when the server closed it; a request that meets a kept-alive
connection the server had closed (before any byte of an answer) is sent again on another
(the server closed it idle: it read nothing). Failures are WireError (WireTimeout when the
upstream stayed silent past the wait), which reference_impl/errors.py translates.

Under gevent a read's wait is one timer of gevent's loop per exchange, restarted for each
read (`again`: the whole wait from now) and stopped after it, made again only when the wait
changes by more than TIMER_SLACK_S. A socket timeout would make gevent build a Timeout (and
a timer) for every read that waits, that is for every token of a stream: ~1.5 us of CPU
each. (A gevent.Timeout cannot be reused for this: started again after a cancel, its timer
waits only what was left of it, and reads cut short became keepalives sent too early.) In
threads (gunicorn's gthread worker) the socket's own timeout bounds each read.
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.monkey
import httptools

READ_SIZE = 1 << 16
# A wait reuses the exchange's timer when it is within this of the timer's own: a keepalive
# (every few seconds) may leave this much early or late.
TIMER_SLACK_S = 0.01


class WireError(Exception):
    """The upstream could not be reached, or its connection failed or made no sense."""


class WireTimeout(WireError):
    """The upstream said nothing within the wait (or took it in a send)."""


class _Waited(BaseException):
    """Thrown into a greenlet whose read waited all its time (as gevent.Timeout is, a
    BaseException, so that no `except Exception` between can take it)."""


class _Parsed:
    """httptools' callbacks for one answer: its body pieces as they come."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.body: list[bytes] = []
        self.head = False  # the status line and headers are in
        self.complete = False  # the whole answer is in
        self.keep_alive = False  # ... and the connection may carry the next request
        self.extra = False  # the server sent more than one answer: out of step

    def on_message_begin(self) -> None:
        if self.complete:
            self.extra = True

    def on_headers_complete(self) -> None:
        self.head = True

    def on_body(self, body: bytes) -> None:
        if not self.extra:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if not self.extra:
            self.complete = True
            # (llhttp answers for the message it is in: after it, always False)
            self.keep_alive = self.parser.should_keep_alive()


class Exchange:
    """One request and its answer on one connection. `read(wait)` reads what the server sent,
    waiting at most `wait` seconds; `take()` is the body read since the last take. `close()`
    gives the connection back to the pool when the answer was read to its end, else closes it
    (a stream cut short: the server sees the client leave, vLLM aborts the request)."""

    def __init__(self, pool: Pool, request: bytes, wait_seconds: float) -> None:
        self._pool = pool
        self._request = request
        self.wait_seconds = wait_seconds
        self._sock: socket.socket | None = None
        self._timer: Any = None  # under gevent: the reads' wait, a timer of gevent's loop
        self._timer_seconds = 0.0
        self._send()
        self._quiet_since = time.monotonic()

    def _send(self) -> None:
        self._sock, self._reused = self._pool.take()
        self._got = False
        self._answer = _Parsed()
        try:
            self._sock.settimeout(self.wait_seconds)
            self._sock.sendall(self._request)
        except TimeoutError as exc:
            self.close()
            raise WireTimeout(f"sending the request: {exc}") from None
        except OSError as exc:
            if self._retry():
                return
            raise WireError(f"sending the request: {exc!r}") from None

    def _retry(self) -> bool:
        """A kept-alive connection the server had closed: send again on another (each one
        tried is closed, so this ends, at the latest on a new connection)."""
        reused = self._reused
        self.close()
        if reused and not self._got:
            self._send()
            return True
        return False

    @property
    def status(self) -> int | None:
        return self._answer.parser.get_status_code() if self._answer.head else None

    @property
    def complete(self) -> bool:
        return self._answer.complete

    def take(self) -> list[bytes]:
        body, self._answer.body = self._answer.body, []
        return body

    def read(self, wait: float) -> bool:
        """Read once, waiting at most `wait` seconds (and at most what is left of the
        wait_seconds that the server may stay silent): False when nothing came in time."""
        assert self._sock is not None, "read after close"
        now = time.monotonic()
        left = self.wait_seconds - (now - self._quiet_since)
        if left <= 0:
            self._silent()
        try:
            data = self._recv(self._sock, max(min(wait, left), 0.0))  # 0: what is there already
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            if wait >= left:  # the whole wait is over: no keepalive now, the deadline
                self._silent()
            return False
        except OSError as exc:
            if self._retry():
                return True
            raise WireError(f"reading the answer: {exc!r}") from None
        if not data:
            if self._retry():
                return True
            raise WireError(
                "the server closed the connection without an answer"
                if not self._got
                else "the server closed the connection before the answer's end"
            )
        self._got = True
        self._quiet_since = time.monotonic()
        try:
            self._answer.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if not self._answer.complete:
                self.close()
                raise WireError(f"an unreadable answer: {exc}") from None
            self._answer.extra = True  # bytes after a whole answer: it stands, the connection goes
        return True

    def _silent(self) -> None:
        self.close()
        raise WireTimeout(f"the upstream sent nothing for {self.wait_seconds} s")

    def _recv(self, sock: socket.socket, seconds: float) -> bytes:
        """One recv that waits at most `seconds`; TimeoutError when nothing came."""
        if seconds <= 0 or not gevent.monkey.is_module_patched("socket"):
            sock.settimeout(seconds)
            return sock.recv(READ_SIZE)
        timer = self._timer
        if timer is None or abs(self._timer_seconds - seconds) > TIMER_SLACK_S:
            if timer is not None:
                timer.close()
            # repeat = after: `again` (re)starts it for the whole wait from now
            timer = self._timer = gevent.get_hub().loop.timer(seconds, seconds)
            self._timer_seconds = seconds
        sock.settimeout(None)
        timer.again(gevent.getcurrent().throw, _Waited)
        try:
            return sock.recv(READ_SIZE)
        except _Waited:
            raise TimeoutError from None
        finally:
            timer.stop()

    def read_all(self) -> bytes:
        """The rest of the body (an error's, a Completion's), each read waiting up to wait_seconds."""
        while not self.complete:
            self.read(self.wait_seconds)
        return b"".join(self.take())

    def close(self) -> None:
        if self._timer is not None:
            self._timer.close()
            self._timer = None
        sock, self._sock = self._sock, None
        if sock is None:
            return
        if self.complete and self._answer.keep_alive and not self._answer.extra:
            self._pool.give(sock)
        else:
            sock.close()


class Pool:
    """Kept-alive connections to one server, per process (gunicorn forks its workers after
    the app, and this pool, were built)."""

    def __init__(
        self, base_url: str, *, connect_timeout: float, keepalive_expiry: float, max_idle: int
    ) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http:// or https:// URL: {base_url!r}")
        self.address = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self.host = url.netloc.rsplit("@", 1)[-1].encode("ascii")
        # (the system's CA store, and SSL_CERT_FILE / SSL_CERT_DIR when set)
        self._tls = ssl.create_default_context() if url.scheme == "https" else None
        self.prefix = url.path.rstrip("/")
        self.connect_timeout = connect_timeout
        self.keepalive_expiry = keepalive_expiry
        self.max_idle = max_idle
        self._lock = threading.Lock()
        self._idle: list[tuple[float, socket.socket]] = []
        self._pid = os.getpid()

    def post(
        self, path: str, body: bytes, headers: dict[str, str], wait_seconds: float
    ) -> Exchange:
        """Send POST `path` (under the base URL's path) with `body` (JSON): the exchange,
        its answer not yet read."""
        head = [
            b"POST %s HTTP/1.1\r\nHost: %s\r\nAccept: */*\r\nContent-Length: %d\r\n"
            % ((self.prefix + path).encode("ascii"), self.host, len(body))
        ]
        head += [
            b"%s: %s\r\n" % (name.encode("ascii"), value.encode("ascii"))
            for name, value in headers.items()
        ]
        return Exchange(self, b"".join(head) + b"\r\n" + body, wait_seconds)

    def get(self, path: str, wait_seconds: float) -> Exchange:
        """Send GET `path` (under the base URL's path): the exchange, its answer not yet read."""
        return Exchange(
            self,
            b"GET %s HTTP/1.1\r\nHost: %s\r\nAccept: */*\r\n\r\n"
            % ((self.prefix + path).encode("ascii"), self.host),
            wait_seconds,
        )

    def take(self) -> tuple[socket.socket, bool]:
        """A kept-alive connection (and True), or a new one (and False)."""
        now = time.monotonic()
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's sockets are not its own
                self._idle, self._pid = [], os.getpid()
            while self._idle:
                since, sock = self._idle.pop()
                if now - since < self.keepalive_expiry and not _readable(sock):
                    return sock, True
                sock.close()  # expired, or the server closed it (or sent what no request asked for)
        try:
            sock = socket.create_connection(self.address, timeout=self.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self.address[0])
        except OSError as exc:  # a timeout too: the upstream does not take connections
            raise WireError(f"connecting to {self.address[0]}:{self.address[1]}: {exc!r}") from None
        return sock, False

    def give(self, sock: socket.socket) -> None:
        with self._lock:
            if self._pid == os.getpid() and len(self._idle) < self.max_idle:
                self._idle.append((time.monotonic(), sock))
                return
        sock.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for _, sock in idle:
            sock.close()


def _readable(sock: socket.socket) -> bool:
    """An idle connection with something to read has been closed by the server (or is
    out of step): select with no wait (gevent's, once patched, polls without switching)."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def get(url: str, timeout: float) -> tuple[int, bytes]:
    """GET `url` on a connection of its own, closed after (a probe: nothing pooled outlives
    a fork, and probes are seconds apart): the answer's status and body. WireError when
    the server cannot be reached or answers nothing within `timeout`."""
    parts = urlsplit(url)
    pool = Pool(
        f"{parts.scheme}://{parts.netloc}", connect_timeout=timeout, keepalive_expiry=0, max_idle=0
    )
    exchange = pool.get((parts.path or "/") + (f"?{parts.query}" if parts.query else ""), timeout)
    try:
        body = exchange.read_all()
        return exchange.status or 0, body
    finally:
        exchange.close()
