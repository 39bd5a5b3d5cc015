"""Servers of ours that behave as the peers no one here wrote did (issue 31, shared/docs/peers.md).

`Peer` is WSGI middleware over the mock with any of these ways, each one thing that
llama.cpp's server or LiteLLM's proxy was seen to do:

- "zero unlimited": max_tokens 0 or below read as "until the context ends" (llama.cpp);
- "keyed health" / "no health": GET /health needs the key (LiteLLM: 401) or is absent
  (llama.cpp: 404);
- "usage details": `completion_tokens_details: null` beside the counts (vLLM, LiteLLM);
- "reset after 500": unparsable JSON gets a bare 500, and the kept-alive connection
  is then dropped under the next request sent on it (llama.cpp);
- "ignores fields": allowed_token_ids, ignore_eos, return_token_ids,
  skip_special_tokens and n dropped unread (llama.cpp);
- "no max_model_len": GET /v1/models without it (llama.cpp);
- "max_tokens x4": a positive max_tokens read as four times itself (a bound
  the token ledger trusts, broken).
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from api_server.children import free_port, wait_ready
from gallery.support import Environ, StartResponse, whole_response
from gallery.wrong import App

WAYS = (
    "zero unlimited",
    "keyed health",
    "no health",
    "usage details",
    "reset after 500",
    "ignores fields",
    "no max_model_len",
    "max_tokens x4",
    "max_tokens x4 unstreamed",
)
LLAMA_CPP = frozenset(
    {"zero unlimited", "no health", "reset after 500", "ignores fields", "no max_model_len"}
)
LITELLM = frozenset({"keyed health", "usage details"})
IGNORED = ("allowed_token_ids", "ignore_eos", "return_token_ids", "skip_special_tokens", "n")


RESETS_PATH = "/peer/resets"  # how many requests the peer dropped, for the tests that need one
CONTEXT = 2048  # llama.cpp's --n_ctx in shared/docs/peers.md
REWRITES = frozenset(
    {"zero unlimited", "ignores fields", "max_tokens x4", "max_tokens x4 unstreamed"}
)


def _rewrite(environ: Environ, change: Any) -> None:
    """The body rewritten by `change` when it is a JSON object; any other bytes as they came
    (hostile ones included: the mock behind must see them)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    if isinstance(body, dict):
        raw = json.dumps(change(body)).encode()
    environ["wsgi.input"] = io.BytesIO(raw)
    environ["CONTENT_LENGTH"] = str(len(raw))


def _json(start_response: StartResponse, status: str, data: Any) -> list[bytes]:
    body = json.dumps(data).encode()
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


def _peer(sock: socket.socket) -> object:
    try:
        return sock.getpeername()
    except OSError:  # the client is gone: nothing to drop
        return None


class Peer:
    """The mock as a peer that does `ways` (a subset of WAYS)."""

    def __init__(self, app: App, ways: Iterable[str]) -> None:
        self.app, self.ways = app, frozenset(ways)
        assert self.ways <= set(WAYS), self.ways - set(WAYS)
        # connections to drop under their next request, by the client's address: a socket's id or
        # descriptor is reused by the next connection once one is closed
        self._dropped: set[object] = set()
        self._lock = threading.Lock()
        self.resets = 0

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO"), environ.get("REQUEST_METHOD")
        sock = environ.get("gunicorn.socket") or environ.get("werkzeug.socket")
        if path == RESETS_PATH:
            return _json(start_response, "200 OK", {"resets": self.resets})
        with self._lock:
            drop = sock is not None and _peer(sock) in self._dropped
            if sock is not None:
                self._dropped.discard(_peer(sock))
        if drop and sock is not None:
            self.resets += 1
            sock.shutdown(socket.SHUT_RDWR)
            start_response("500 Internal Server Error", [("Content-Length", "0")])
            return []
        if path == "/health" and "no health" in self.ways:
            return _json(start_response, "404 Not Found", {"detail": "Not Found"})
        if (
            path == "/health"
            and "keyed health" in self.ways
            and not environ.get("HTTP_AUTHORIZATION")
        ):
            return _json(
                start_response, "401 Unauthorized", {"error": {"message": "No api key passed in."}}
            )
        if path == "/v1/completions" and method == "POST":
            return self._completion(environ, start_response, sock)
        status, headers, body = whole_response(self.app, environ)
        if path == "/v1/models" and "no max_model_len" in self.ways and status.startswith("200"):
            data = json.loads(body)
            for entry in data.get("data", []):
                entry.pop("max_model_len", None)
            return _json(start_response, status, data)
        start_response(status, headers)
        return [body]

    def _completion(
        self, environ: Environ, start_response: StartResponse, sock: Any
    ) -> Iterable[bytes]:
        if self.ways & REWRITES:
            _rewrite(environ, self._request)
        status, headers, body = whole_response(self.app, environ)
        ctype = next((v for k, v in headers if k.lower() == "content-type"), "")
        data = json.loads(body) if "json" in ctype else None
        error = data.get("error") if isinstance(data, dict) else None
        if (
            "reset after 500" in self.ways
            and isinstance(error, dict)
            and error.get("code") == "invalid_json"
        ):
            if sock is not None:
                with self._lock:
                    self._dropped.add(_peer(sock))
            start_response(
                "500 Internal Server Error",
                [("Content-Type", "text/plain"), ("Content-Length", "21")],
            )
            return [b"Internal Server Error"]
        if (
            "usage details" in self.ways
            and status.startswith("200")
            and isinstance(data, dict)
            and isinstance(data.get("usage"), dict)
        ):
            data["usage"]["completion_tokens_details"] = None
            return _json(start_response, status, data)
        start_response(status, headers)
        return [body]

    def _request(self, body: dict[str, Any]) -> dict[str, Any]:
        if "ignores fields" in self.ways:
            body = {k: v for k, v in body.items() if k not in IGNORED}
        limit = body.get("max_tokens")
        if "zero unlimited" in self.ways and type(limit) is int and limit <= 0:
            body = {
                k: v for k, v in body.items() if k != "max_tokens"
            }  # the mock's default: the context
        elif (
            type(limit) is int
            and limit > 0
            and (
                "max_tokens x4" in self.ways
                or ("max_tokens x4 unstreamed" in self.ways and not body.get("stream"))
            )
        ):
            body = {**body, "max_tokens": 4 * limit}
        return body


def app(*ways: str) -> Peer:
    """The peer as gunicorn loads it (`gallery.peers:app("reset after 500")`): werkzeug's
    development server closes every connection, and a dropped kept-alive one needs one kept."""
    from contract import spec
    from mock_server import create_app
    from mock_server.config import MockConfig

    return Peer(create_app(MockConfig(max_model_len={spec().default_model: CONTEXT})), ways)


@contextmanager
def live_peer(*ways: str) -> Iterator[str]:
    """The peer under gunicorn (one gthread worker, connections kept alive) on a free port."""
    port = free_port()
    factory = "gallery.peers:app(" + ", ".join(json.dumps(w) for w in ways) + ")"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            "1",
            "-k",
            "gthread",
            "--threads",
            "4",
            "--keep-alive",
            "30",
            "-b",
            f"127.0.0.1:{port}",
            factory,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, 60, name="the peer", any_status=True, interval=0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
