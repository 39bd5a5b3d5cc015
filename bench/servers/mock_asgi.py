"""The mock's Flask app behind an ASGI face, for bench.stacks (issue 46): does the cheapest stack
measured (uvicorn on uvloop and httptools) carry the mock's paced streams for less?

The face keeps Flask's API: each request's WSGI environ is built from the ASGI scope and a body
read to at most x-caps.max_body_bytes + 1 bytes (the app's own read answers 413 past the cap),
and the app runs in the request's task, its response's chunks sent as they come. The mock's only
waits are its pacing's (mock_server/hook/latency.py): there they await asyncio.sleep through greenback's
portal (the sync code hands the task an awaitable on a greenlet switch and gets its result back).

Like mock_wsgi.py it is a measurement, not a deployment: none of api_server/serve.py's gunicorn
worker comes with it (the body-read timeout, early errors in the API's words, prometheus's
multiprocess directory), and a client that leaves is noticed only when its stream ends.
"""

from __future__ import annotations

import asyncio
import io
import sys
import time
import types
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import greenback

import mock_server.hook.latency
from bench.servers.bare_asgi import not_http
from contract import spec
from mock_server import create_app

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse

Send = Callable[[dict[str, Any]], Awaitable[None]]


def _sleep(seconds: float) -> None:
    if greenback.has_portal():  # in a request's task: the loop waits, not the thread
        greenback.await_(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


# The pacing's waits (latency._on_time's time.sleep), the only ones a fake-engine stream makes.
mock_server.hook.latency.time = types.SimpleNamespace(sleep=_sleep, monotonic=time.monotonic)  # type: ignore[assignment]

flask_app = create_app()
_LIMIT = spec().caps["max_body_bytes"] + 1


def _environ(scope: dict[str, Any], body: bytes) -> dict[str, Any]:
    client = scope.get("client") or ("", 0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": scope["path"],
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": client[0],
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    for raw_name, raw_value in scope["headers"]:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
        elif name == "content-length":
            environ["CONTENT_LENGTH"] = value
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
            environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def _respond(environ: dict[str, Any], send: Send) -> None:
    start: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        start.update(
            type="http.response.start",
            status=int(status[:3]),
            headers=[(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        )

    body = flask_app(environ, cast("StartResponse", start_response))
    try:
        if isinstance(body, list):  # a whole body: one message
            greenback.await_(send(start))
            greenback.await_(send({"type": "http.response.body", "body": b"".join(body)}))
            return
        started = False
        for chunk in body:
            if not started:
                greenback.await_(send(start))
                started = True
            if chunk:
                greenback.await_(
                    send({"type": "http.response.body", "body": chunk, "more_body": True})
                )
        if not started:
            greenback.await_(send(start))
        greenback.await_(send({"type": "http.response.body", "body": b""}))
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()


async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[dict]], send: Send) -> None:
    if await not_http(scope, receive, send):
        return
    parts: list[bytes] = []
    size = 0
    while size < _LIMIT:
        message = await receive()
        if message["type"] != "http.request":
            return  # the client left
        parts.append(message.get("body", b""))
        size += len(parts[-1])
        if not message.get("more_body"):
            break
    await greenback.with_portal_run_sync(_respond, _environ(scope, b"".join(parts)[:_LIMIT]), send)
