"""httpx's transport to vLLM, writing each request in one piece.

httpcore writes a request's head and its body apart: two sends, and on loopback (vLLM
beside the API) the kernel runs vLLM's side of each send in the sender's time and wakes
vLLM's server twice. Here a connection keeps what httpcore writes until it next reads
(an HTTP/1.1 client always reads the answer after its request), then sends it at once.
The rest is httpx's own HTTPTransport and httpcore's pool, unchanged.
"""
from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx


class _OneWrite(httpcore.NetworkStream):
    """A connection whose writes leave together, with its next read."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream
        self._pending: list[bytes] = []
        self._timeout: float | None = None

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            self._stream.write(data, self._timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:
            self._pending.append(buffer)
            self._timeout = timeout   # the write's own timeout, not the read's

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._flush()
        return self._stream.read(max_bytes, timeout)

    def close(self) -> None:
        self._pending.clear()
        self._stream.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        self._flush()
        return self._stream.start_tls(ssl_context, server_hostname, timeout)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's own sockets (gevent's, once patched), each wrapped in _OneWrite."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _OneWrite(self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _OneWrite(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class OneWriteTransport(httpx.HTTPTransport):
    """httpx.HTTPTransport (its exceptions, its response streams) over httpcore's pool of
    _OneWrite connections. httpx offers no way to hand its pool a network backend, so this
    replaces the pool it built (`_pool`, which handle_request uses) by the same pool with one;
    tests/test_reference_stream_io.py checks that a request still leaves in one write."""

    def __init__(self, limits: httpx.Limits) -> None:
        super().__init__(limits=limits)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_Backend())
