"""A WSGI app served for real in-process, and an app's answer read whole: what every broken
server and every test that runs the suite against one stands on."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from werkzeug.serving import make_server

from api_server.children import free_port

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


@contextmanager
def serve(app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> Iterator[str]:
    """A real HTTP server (werkzeug, a thread per request) on a free port; yields its URL."""
    server = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def whole_response(
    app: Callable[[Environ, StartResponse], Iterable[bytes]], environ: Environ
) -> tuple[str, list[tuple[str, str]], bytes]:
    """`app`'s answer to `environ`, read whole: its status, headers and body."""
    captured: dict[str, Any] = {}

    def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        captured["status"], captured["headers"] = status, headers
        return lambda data: None

    chunks = app(environ, capture)
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return captured["status"], captured["headers"], body
