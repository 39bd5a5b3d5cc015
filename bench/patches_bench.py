"""What each patch of api_server/patches.py buys, on and off side by side in one run.

    .venv/bin/python -m bench patches [--rounds R] [--requests N]

Three measurements, each round running every variant in turn (so that the machine's
load falls on all of them), the median round shown:

1. gunicorn's per-request path in this process (parse a POST, build its environ and
   response, answer 16 tokens' JSON on a gevent socket pair, read it on the other end):
   stock gunicorn, then each gunicorn patch alone, then all of them; us a request.
2. The mock's Flask app in this process (a 16-token completion through app(environ,
   start_response)): Flask's own, then its create_url_adapter replaced by
   patches.ShortcutFlask's, then its ensure_sync by one that returns the function as it
   is (measured and dropped: patches.py says why); us a request.
3. The mock itself (`python -m mock_server --workers 1`) with ACS_PATCHES=1 and =0: the
   server's CPU time per request (all its processes, the harness's count) for 16-token
   completions over one keep-alive connection, and per token of a stream (read by the
   harness's load client).

Prints a markdown table; nothing is written.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent.socket
from flask import Flask
from gunicorn import util
from gunicorn.config import Config
from gunicorn.http import wsgi
from gunicorn.http.parser import RequestParser

from api_server import patches
from bench import harness
from bench.harness import API_KEY as KEY
from bench.harness import Server, cpu_seconds

BODY = json.dumps(
    {"model": "llama-8b", "prompt": "The sky is", "max_tokens": 16, "temperature": 0}
).encode()
STREAM_TOKENS = 512
STREAM = {
    "model": "llama-8b",
    "prompt": "The sky is",
    "max_tokens": STREAM_TOKENS,
    "temperature": 0,
    "ignore_eos": True,
    "stream": True,
}
REQUEST = (
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
    + KEY.encode()
    + b"\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(BODY)).encode()
    + b"\r\n\r\n"
    + BODY
)
ANSWER = b'{"id":"cmpl-x","object":"text_completion","choices":[{"text":"' + b"word " * 16 + b'"}]}'


def per_call_us(fn: Callable[[], None], n: int) -> float:
    """CPU time of this process (less swayed than wall time by the machine's other load)."""
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6


# -- 1. gunicorn ----------------------------------------------------------------------
def gunicorn_variant(
    response: bool, date: bool, errors: bool, read_once: bool
) -> Callable[[], None]:
    server, client = gevent.socket.socketpair()
    cfg = patches.ReadOnceConfig(Config()) if read_once else Config()
    names = (
        patches.OneWriteResponse if response else STOCK[0],
        patches.http_date if date else STOCK[1],
        patches.LazyErrors if errors else STOCK[2],
    )

    def one() -> None:
        wsgi.Response, util.http_date, wsgi.WSGIErrorsWrapper = names
        req = next(RequestParser(cfg, [REQUEST], ("127.0.0.1", 1)))
        resp, environ = wsgi.create(req, server, ("127.0.0.1", 1), ("127.0.0.1", 8000), cfg)
        environ["wsgi.input"].read()
        resp.start_response(
            "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(ANSWER)))]
        )
        resp.write(ANSWER)
        resp.close()
        client.recv(1 << 16)

    return one


STOCK = (wsgi.Response, util.http_date, wsgi.WSGIErrorsWrapper)
GUNICORN = {
    "stock gunicorn": (False, False, False, False),
    "OneWriteResponse": (True, False, False, False),
    "http_date": (False, True, False, False),
    "LazyErrors": (False, False, True, False),
    "ReadOnceConfig": (False, False, False, True),
    "all": (True, True, True, True),
}


# -- 2. Flask -------------------------------------------------------------------------
def flask_variant(app: Flask, ensure_sync: bool, url_adapter: bool) -> Callable[[], None]:
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(
        "/v1/completions",
        method="POST",
        data=BODY,
        content_type="application/json",
        headers=[("Authorization", f"Bearer {KEY}")],
    ).get_environ()

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> Any:
        assert status.startswith("200"), status

    def one() -> None:
        # Flask's ensure_sync, or one returning the function as it is (a patch measured and
        # dropped); Flask's create_url_adapter, or patches.ShortcutFlask's.
        app.ensure_sync = (lambda func: func) if ensure_sync else Flask.ensure_sync.__get__(app)  # type: ignore
        app.create_url_adapter = (  # type: ignore[method-assign]
            patches.ShortcutFlask if url_adapter else Flask
        ).create_url_adapter.__get__(app)
        env = dict(environ)
        env["wsgi.input"] = io.BytesIO(BODY)
        b"".join(app(env, start_response))

    return one


FLASK = {
    "stock Flask": (False, False),
    "ensure_sync (dropped)": (True, False),
    "create_url_adapter": (False, True),
}


# -- 3. the mock ------------------------------------------------------------------------
def start_mock(patched: bool, logs: Path) -> Server:
    env = {patches.ENV: "1" if patched else "0"}
    return harness.mock(
        "--workers", "1", "--log-level", "warning", key=f"mock-patches-{env[patches.ENV]}", env=env
    ).run(logs)


def mock_round(server: Server, n: int) -> tuple[float, float]:
    """CPU us per 16-token request, and per streamed token."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    headers = {**server.headers, "Content-Type": "application/json"}
    cpu = cpu_seconds(server.pids())
    for _ in range(n):
        conn.request("POST", "/v1/completions", BODY, headers)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
    per_request = (cpu_seconds(server.pids()) - cpu) / n * 1e6
    conn.close()
    streams = max(1, n // 30)
    cpu = cpu_seconds(server.pids())
    for _ in range(streams):
        (stream,), _ = harness.streams(server, STREAM)
        assert stream.done and stream.tokens == STREAM_TOKENS, stream
    per_token = (cpu_seconds(server.pids()) - cpu) / (streams * STREAM_TOKENS) * 1e6
    return per_request, per_token


def table(title: str, rows: dict[str, list[float]], base: str, unit: str) -> str:
    lines = [
        f"### {title}",
        "",
        f"| variant | {unit} (median) | saved vs {base} | ratio | rounds |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    ref = statistics.median(rows[base])
    for name, values in rows.items():
        med = statistics.median(values)
        lines.append(
            f"| {name} | {med:.2f} | {ref - med:+.2f} | {med / ref:.3f} | "
            + ", ".join(f"{v:.1f}" for v in values)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--requests", type=int, default=3000, help="requests per variant and round")
    args = p.parse_args(argv)
    os.environ[patches.ENV] = "1"
    from mock_server.server import create_app

    app = create_app()
    assert isinstance(app, patches.ShortcutFlask)

    gun = {name: gunicorn_variant(*flags) for name, flags in GUNICORN.items()}
    fl = {name: flask_variant(app, *flags) for name, flags in FLASK.items()}
    g_rows: dict[str, list[float]] = {name: [] for name in gun}
    f_rows: dict[str, list[float]] = {name: [] for name in fl}
    for fn in (*gun.values(), *fl.values()):
        per_call_us(fn, 200)  # warm
    for _ in range(args.rounds):
        for name, fn in gun.items():
            g_rows[name].append(per_call_us(fn, args.requests))
        for name, fn in fl.items():
            f_rows[name].append(per_call_us(fn, args.requests))
    wsgi.Response, util.http_date, wsgi.WSGIErrorsWrapper = STOCK

    logs = Path(tempfile.mkdtemp(prefix="bench-patches-"))
    servers: dict[str, Server] = {}
    m_req: dict[str, list[float]] = {name: [] for name in ("ACS_PATCHES=1", "ACS_PATCHES=0")}
    m_tok: dict[str, list[float]] = {name: [] for name in m_req}
    try:
        for name in m_req:
            servers[name] = start_mock(name.endswith("1"), logs)
        for server in servers.values():
            mock_round(server, 200)  # warm
        for _ in range(args.rounds):
            for name, server in servers.items():
                per_request, per_token = mock_round(server, args.requests // 3)
                m_req[name].append(per_request)
                m_tok[name].append(per_token)
    finally:
        for server in servers.values():
            server.stop()
    print(
        f"{args.rounds} rounds, {args.requests} requests a variant and round "
        f"(the mock: {args.requests // 3}, and {max(1, args.requests // 90)} streams of {STREAM_TOKENS} tokens)\n"
    )
    print(
        table("1. gunicorn's request path, in process", g_rows, "stock gunicorn", "us a request"),
        "\n",
    )
    print(table("2. the mock's Flask app, in process", f_rows, "stock Flask", "us a request"), "\n")
    print(
        table(
            "3. the mock, server CPU per 16-token request",
            m_req,
            "ACS_PATCHES=0",
            "CPU us a request",
        ),
        "\n",
    )
    print(
        table(
            "3. the mock, server CPU per streamed token", m_tok, "ACS_PATCHES=0", "CPU us a token"
        )
    )


if __name__ == "__main__":
    main()
