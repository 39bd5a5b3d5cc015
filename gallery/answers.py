"""Servers whose answers a client must bound before it believes them (the gate's
tests/conformance/test_claimed_sizes.py): the mock with its model's numbers claimed past their
schema bounds, with an answer that never ends, with its answers coded whatever was accepted; and
the mock with its streams scripted or its whole completions rewritten."""

from __future__ import annotations

import gzip
import io
import json
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import zstandard

from conformance.engine.runner import DEPLOYMENT_NUMBERS
from contract import spec
from gallery.support import Environ, StartResponse, whole_response
from mock_server import create_app
from mock_server.config import MockConfig

BOUNDS = spec().schema("Model")["properties"]


class ClaimsPast:
    """The mock with each of its model's numbers in GET /v1/models `past` its schema bound."""

    def __init__(self, past: int) -> None:
        self.app, self.past = create_app(MockConfig()), past

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        status, headers, body = whole_response(self.app, environ)
        if environ.get("PATH_INFO") == "/v1/models" and status.startswith("200"):
            listed = json.loads(body)
            for entry in listed["data"]:
                entry.update({n: BOUNDS[n]["maximum"] + self.past for n in DEPLOYMENT_NUMBERS})
            body = json.dumps(listed).encode()
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]


class Endless:
    """The mock, but a completion's answer never ends (a whole one; every one with `streams`):
    `chunk` bytes at a time, `pause` seconds apart."""

    def __init__(self, chunk: bytes, pause: float = 0.0, streams: bool = False) -> None:
        self.app, self.chunk, self.pause, self.streams = (
            create_app(MockConfig()),
            chunk,
            pause,
            streams,
        )

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != spec().completions_path:
            return self.app(environ, start_response)
        raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        stream = bool(json.loads(raw).get("stream"))
        if stream and not self.streams:
            environ["wsgi.input"] = io.BytesIO(raw)
            return self.app(environ, start_response)
        media = "text/event-stream" if stream else "application/json"
        start_response("200 OK", [("Content-Type", media)])
        return self._forever()

    def _forever(self) -> Iterator[bytes]:
        yield b'{"id": "'
        while True:
            time.sleep(self.pause)
            yield self.chunk


class Coded:
    """The mock, its answers coded (Content-Encoding) whatever the request accepts; `pad` bytes of
    spaces after the JSON (a bomb: they compress a thousandfold)."""

    def __init__(self, coding: str, pad: int = 0) -> None:
        self.app, self.coding, self.pad = create_app(MockConfig()), coding, pad
        self.accepted: list[str | None] = []

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        self.accepted.append(environ.get("HTTP_ACCEPT_ENCODING"))
        status, headers, body = whole_response(self.app, environ)
        body += b" " * self.pad
        packed: bytes = {  # type: ignore[operator]  # zstandard ships no types
            "gzip": gzip.compress,
            "deflate": zlib.compress,
            "zstd": zstandard.ZstdCompressor().compress,
        }[self.coding](body)
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(
            status,
            [*headers, ("Content-Encoding", self.coding), ("Content-Length", str(len(packed)))],
        )
        return [packed]


def _event(text: str, finish: str | None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    event = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": spec().default_model,
    }
    return b"data: " + json.dumps({**event, "choices": [choice]}).encode() + b"\n\n"


class ScriptedStream:
    """The mock, but a streamed completion is `chunks` (then [DONE])."""

    def __init__(self, chunks: list[tuple[str, str | None]]) -> None:
        self.app, self.chunks = create_app(MockConfig()), chunks

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        raw = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        environ["wsgi.input"] = io.BytesIO(raw)
        if environ.get("PATH_INFO") != spec().completions_path or not json.loads(raw).get("stream"):
            return self.app(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return [*(_event(t, f) for t, f in self.chunks), b"data: [DONE]\n\n"]


class Rewrites:
    """The mock, each whole 200 completion rewritten by `change` (its parsed body)."""

    def __init__(self, change: Callable[[dict[str, Any]], None] | None) -> None:
        self.app, self.change = create_app(MockConfig()), change

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        status, headers, body = whole_response(self.app, environ)
        media = {k.lower(): v for k, v in headers}.get("content-type", "")
        if (
            self.change
            and status.startswith("200")
            and media.startswith("application/json")
            and environ.get("PATH_INFO") == spec().completions_path
        ):
            data = json.loads(body)
            self.change(data)
            body = json.dumps(data).encode()
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]
