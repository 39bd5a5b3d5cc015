"""The bare ceiling as an ASGI app: bare_app.py's bodies and pacing with asyncio's waits.

Issue 46 asks whether an ASGI face would carry thousands of paced streams for less than
gevent under gunicorn. This is the least such a face could cost: no framework, the body read
to its Content-Length (bounded by x-caps.max_body_bytes, as the API's), parsed as JSON, and
answered with bare_app.py's fixed bodies; a stream's chunks wait X-Mock-Tpot-Ms with
asyncio.sleep. bench.stacks runs it under uvicorn (uvloop, httptools) and granian (ASGI).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from bench.servers.bare_app import _CHUNK, _HEADERS, COMPLETION_BODY, ERROR_BODY
from contract import spec

_MAX_BODY = spec().caps["max_body_bytes"]
_DONE = b"data: [DONE]\n\n"


def _headers(content_type: bytes, length: int | None = None) -> list[tuple[bytes, bytes]]:
    out = [(b"content-type", content_type)]
    out += [(k.lower().encode(), v.encode()) for k, v in _HEADERS.items()]
    if length is not None:
        out.append((b"content-length", str(length).encode()))
    return out


async def _body(receive: Any) -> bytes | None:
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            return None
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


async def _send_whole(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": _headers(content_type, len(body)),
        }
    )
    await send({"type": "http.response.body", "body": body})


async def not_http(scope: dict[str, Any], receive: Any, send: Any) -> bool:
    """Answers a scope that is not an HTTP request (lifespan: nothing to start or stop)."""
    if scope["type"] == "http":
        return False
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    return True


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if await not_http(scope, receive, send):
        return
    if scope["path"] == "/health":
        await _send_whole(send, 200, b'{"status": "ok"}', b"application/json")
        return
    raw = await _body(receive)
    if raw is None:  # past the cap (or the client left): a fixed error body, as every other
        await _send_whole(send, 413, ERROR_BODY.encode(), b"application/json")
        return
    body = json.loads(raw)
    if type(body.get("max_tokens")) is not int:
        await _send_whole(send, 400, ERROR_BODY.encode(), b"application/json")
        return
    if body.get("stream") is not True:
        await _send_whole(send, 200, COMPLETION_BODY.encode(), b"application/json")
        return
    tpot_s = 0.0
    for name, value in scope["headers"]:
        if name == b"x-mock-tpot-ms":
            tpot_s = float(value) / 1000
    await send(
        {"type": "http.response.start", "status": 200, "headers": _headers(b"text/event-stream")}
    )
    for i in range(body["max_tokens"]):
        if tpot_s and i:
            await asyncio.sleep(tpot_s)
        await send({"type": "http.response.body", "body": _CHUNK, "more_body": True})
    await send({"type": "http.response.body", "body": _DONE})
