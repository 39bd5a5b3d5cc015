"""Every replacement of a third party's internals the servers make, in one module.

Each patch says why it exists and what it saves, measured on and off side by side in one
run: `.venv/bin/python bench/patches_bench.py` (9 rounds, medians; two runs on
2026-12-01, 2 shared cores, gunicorn 27.0.1, Flask 3.1.3; each gain below is "run 1 /
run 2"). All together they take the mock's CPU time per 16-token request from 510 to 380
us (0.75) / 640 to 530 us (0.83); per streamed token 3.0 -> 2.4 us / 3.6 -> 3.6 us, at the
measurement's resolution (0.6 us).

`ACS_PATCHES=0` in the environment turns them all off (read when an app is built and
when a worker starts): gunicorn's and Flask's own code then runs unchanged, and both
servers pass their tests so (scripts/test.sh runs them once that way). Every package
patched has an upper version pin in pyproject.toml, and tests/api/test_patches.py fails when
a name a patch relies on stops being looked up.

In vLLM's interpreter, where this module cannot be imported (no Flask there), the
reference's `reference_impl/vllm_server.py` makes the only other replacements, under the
same switch: it wraps vLLM's OpenAIServingCompletion.completion_stream_generator (the
activations event of a completion stream, which vllm-lens sends only in chat streams;
it calls vllm-lens's private `_serialize_activations_for`) and lengthens a streamed
capture that vllm-lens 1.3 cuts (torch's `_base` of the cut view). Those are for what the
API must do, not for speed: with ACS_PATCHES=0 a completion stream has no activations.

Dropped: gevent's `StreamServer.max_accept = 1` (redundant: gunicorn >= 25 sets it on
each server itself when there is more than one worker), and Flask's `ensure_sync`
returning the function as it is (measured: 0.2 / 2.5 us of 154 / 186, within the
rounds' spread). Not patches: the workers' `handle_error`, `timeout_ctx`, `handle` and
`handle_request` (api_server/worker.py) override gunicorn's worker methods and call on
to gunicorn's.
"""

from __future__ import annotations

import io
import os
import socket
import time
from typing import Any

from flask import Flask, Request
from gunicorn import util
from gunicorn.http import wsgi
from werkzeug.routing import MapAdapter

ENV = "ACS_PATCHES"


def enabled() -> bool:
    """Whether the patches apply: ACS_PATCHES unset or anything but "0"."""
    return os.environ.get(ENV, "1") != "0"


# -- gunicorn: its Response, Date header and wsgi.errors --------------------------------
class OneWriteResponse(wsgi.Response):
    """gunicorn's response, with one send per write (saves 6.1 / 9.6 us of gunicorn's
    61 / 70 a request, 0.90 / 0.86, on a gevent socket pair; the client's second wake-up comes on top).

    gunicorn sends the head and each body piece with a sendall each: two send calls,
    two TCP segments and two wake-ups of the client for a one-piece JSON answer; and
    gevent's sendall asks the kernel for the socket's buffer size before every send
    (one more system call per stream chunk). This response holds the head until the
    first body piece (or close) and sends each piece, framed, with `send` alone.
    A stream's head still leaves with its first piece, as before: the app's first
    write is a keepalive or the first batch, never later than it was."""

    _head: bytes = b""
    headers_sent: bool

    def send_headers(self) -> None:
        if self.headers_sent:
            return
        lines = self.default_headers()
        lines.extend(f"{k}: {v}\r\n" for k, v in self.headers)
        self._head = ("".join(lines) + "\r\n").encode("latin-1")
        self.headers_sent = True

    def _emit_body(self, data: bytes) -> None:
        head, self._head = self._head, b""
        if self.chunked:
            data = b"%s%X\r\n%s\r\n" % (head, len(data), data)
        elif head:
            data = head + data
        send_all(self.sock, data)

    def sendfile(self, respiter: Any) -> bool:
        return False  # the app sends no files; write() keeps the head before the body

    def close(self) -> None:
        if not self.headers_sent:
            self.send_headers()
        head, self._head = self._head, b""
        data = head + (b"0\r\n\r\n" if self.chunked else b"")
        if data:
            send_all(self.sock, data)


def send_all(sock: socket.socket, data: bytes) -> None:
    """sock.sendall, minus gevent's buffer-size query per call. Each send waits at
    most the socket's timeout, so a client that stops reading still frees this greenlet."""
    sent = sock.send(data)
    if sent < len(data):
        view = memoryview(data)
        while sent < len(data):
            sent += sock.send(view[sent:])


_format_date = util.http_date
_date = (0, "")


def http_date(timestamp: float | None = None) -> str:
    """gunicorn's Date header, formatted once a second instead of once a response
    (saves 4.0 / 6.6 us a request, 0.94 / 0.91)."""
    global _date
    if timestamp is not None:
        return _format_date(timestamp)
    now = int(time.time())
    if _date[0] != now:
        _date = (now, _format_date(now))
    return _date[1]


_ErrorsWrapper = wsgi.WSGIErrorsWrapper


class LazyErrors(io.RawIOBase):
    """wsgi.errors: gunicorn's WSGIErrorsWrapper, built when something is written.
    gunicorn builds one for every request, a logger lookup under logging's lock, for a
    stream this app never writes to (saves 3.9 / 4.6 us a request, 0.94 / 0.94)."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> None:
        _ErrorsWrapper(self._cfg).write(data)

    def writelines(self, lines: Any) -> None:
        _ErrorsWrapper(self._cfg).writelines(lines)


def patch_gunicorn() -> None:
    """In a gevent worker, after the fork (the process runs only that worker): gunicorn
    builds its Response, Date header and wsgi.errors through these module-level names
    (wsgi.create, Response.default_headers, wsgi.base_environ)."""
    if not enabled():
        return
    wsgi.Response = OneWriteResponse
    util.http_date = http_date
    wsgi.WSGIErrorsWrapper = LazyErrors


# -- gunicorn: its Config, read once --------------------------------------------------
class ReadOnceConfig:
    """gunicorn's Config for one worker, each setting read once. Config looks a setting up
    by name and asks it for its value on every read, and gunicorn reads ~22 per request
    (the limits, the proxy and forwarding rules, is_ssl...). A worker's settings never
    change (a reload starts new workers), so the first read of each is kept (saves
    13.7 / 15.4 us a request, 0.78 / 0.78)."""

    def __init__(self, cfg: Any) -> None:
        self._cfg = cfg

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cfg, name)
        setattr(self, name, value)  # the next read finds it here, not in __getattr__
        return value


def worker_config(cfg: Any) -> Any:
    """The Config a worker reads: ReadOnceConfig over gunicorn's, or gunicorn's."""
    return ReadOnceConfig(cfg) if enabled() else cfg


# -- Flask: the URL map bound to the method and path alone -----------------------------
class ShortcutFlask(Flask):
    """Flask binds the URL map to the whole environ (trusted hosts, host parsing and
    checks), where the spec's routes are a method and a path alone: no host, subdomain
    or scheme part (saves 8.4 / 14.4 us of the mock
    app's 154 / 186 a request, 0.95 / 0.92)."""

    def create_url_adapter(self, request: Request | None) -> MapAdapter | None:
        if request is None:  # an app context outside a request: Flask's
            return super().create_url_adapter(request)
        return MapAdapter(
            self.url_map, "", request.root_path, "", request.scheme, request.path, request.method
        )


def flask_class() -> type[Flask]:
    """The Flask class an app is built from: ShortcutFlask, or Flask itself."""
    return ShortcutFlask if enabled() else Flask
