"""The reference's own client to vLLM (reference_impl/wire.py), over real sockets: a stream
read in the request's own thread with keepalives while vLLM is quiet, errors before and after
the first event, the deadline, a client that leaves, connections kept and dropped.

vLLM is a scripted HTTP/1.1 server here: each test says what it sends, byte for byte, as
uvicorn does (a stream in chunked encoding, one chunk per event).
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server import ServerConfig, create_app
from contract import spec
from reference_impl.engine import VllmEngine
from tests.support.contract import CONTRACT
from tests.support.fake_vllm import Script, Vllm
from tests.support.upstream import UpstreamServer
from tests.support.vllm_stream import (
    AUTH,
    BODY,
    KEY,
    MODEL,
    SKY,
    completion,
    content,
    events,
    sse,
)

SKY_EVENTS = [event + b"\n\n" for event in SKY.split(b"\n\n") if event]
VLLM_400 = {
    "error": {
        "message": "This model's maximum context length is 8 tokens. (parameter=input_tokens, value=9)",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
}


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def stream_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )


def whole(status: int, payload: Any) -> bytes:
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        status,
        len(body),
        body,
    )


@contextmanager
def api(
    script: Script, wait_seconds: float | None = None, **config: Any
) -> Iterator[tuple[httpx.Client, Vllm]]:
    vllm = Vllm(script)
    engine = VllmEngine(vllm.url, MODEL, wait_seconds=wait_seconds, api=spec())
    app = create_app(ServerConfig(keys=(KEY,), **config), engine)
    try:
        with httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
        ) as c:
            yield c, vllm
    finally:
        engine.close()
        vllm.close()


def sky(conn: socket.socket, body: dict[str, Any], number: int) -> None:
    """vLLM answering SKY: a stream one chunk per event, or the whole Completion."""
    if body["stream"]:
        conn.sendall(stream_head() + b"".join(chunk(e) for e in SKY_EVENTS) + chunk(b""))
    else:
        conn.sendall(whole(200, completion(SKY)))


def texts(response: httpx.Response) -> list[str]:
    """A stream's deltas, or a Completion's text."""
    if response.headers["content-type"].startswith("application/json"):
        return [c["text"] for c in response.json()["choices"]]
    return [
        e["choices"][0]["text"]
        for e in events(response.text)
        if isinstance(e, dict) and e.get("choices")
    ]


def test_streams_and_completions_share_one_kept_alive_connection() -> None:
    with api(sky) as (c, vllm):
        got = [
            texts(c.post("/v1/completions", json={**BODY, "stream": stream}))
            for stream in (True, False, True)
        ]
    assert got == [[" blue", " today"], [" blue today"], [" blue", " today"]]
    assert vllm.connections == 1 and [r["stream"] for r in vllm.requests] == [True, False, True]


def test_keepalive_while_vllm_is_quiet() -> None:
    def slow(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        time.sleep(0.5)  # before its head, as vLLM before its first token
        conn.sendall(stream_head() + chunk(SKY_EVENTS[0]))
        time.sleep(0.5)
        conn.sendall(b"".join(chunk(e) for e in SKY_EVENTS[1:]) + chunk(b""))

    with api(slow, keepalive_seconds=0.1) as (c, _):
        text = c.post("/v1/completions", json={**BODY, "stream": True}).text
    body = text.split("data: [DONE]")[0]
    first, rest = body.split("data: ", 1)
    assert first.startswith(": keepalive\n\n") and set(first.split("\n\n")) == {": keepalive", ""}
    assert ": keepalive\n\n" in rest.split("\n\n", 1)[1]  # between the first event and the second
    assert text.endswith("data: [DONE]\n\n")


def test_events_of_one_read_leave_in_one_write() -> None:
    """vLLM sends the whole stream at once: the API's body is one piece, then [DONE]."""
    vllm = Vllm(sky)
    engine = VllmEngine(vllm.url, MODEL, api=spec())
    app = create_app(ServerConfig(keys=(KEY,)), engine)
    try:
        r = app.test_client().post(
            "/v1/completions", json={**BODY, "stream": True}, headers=AUTH, buffered=False
        )
        pieces = list(r.response)
        r.close()
    finally:
        engine.close()
        vllm.close()
    assert pieces[-1] == b"data: [DONE]\n\n" and len(pieces) == 2
    assert [e["choices"][0]["text"] for e in events(pieces[0].decode()) if e["choices"]] == [
        " blue",
        " today",
    ]


def test_vllms_400_before_the_stream_is_the_apis_400_and_the_connection_is_kept() -> None:
    def refuse_first(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        if number == 1:
            conn.sendall(whole(400, VLLM_400))
        else:
            sky(conn, body, number)

    with api(refuse_first) as (c, vllm):
        r = c.post("/v1/completions", json={**BODY, "stream": True})
        after = c.post("/v1/completions", json={**BODY, "stream": True})
    assert r.status_code == 400
    assert r.json()["error"] == {
        "message": "This model's maximum context length is 8 tokens.",
        "type": "invalid_request_error",
        "param": "prompt",
        "code": "context_length_exceeded",
    }
    assert texts(after) == [" blue", " today"] and vllm.connections == 1


def test_vllm_down_is_an_http_503_stream_or_not() -> None:
    free = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{free.getsockname()[1]}"
    free.close()  # nothing listens there now
    engine = VllmEngine(url, MODEL, api=spec())
    app = create_app(ServerConfig(keys=(KEY,)), engine)
    with httpx.Client(
        transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
    ) as c:
        got = [
            c.post("/v1/completions", json={**BODY, "stream": stream}) for stream in (True, False)
        ]
    engine.close()
    for r in got:
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "inference_unavailable"
        assert r.json()["error"]["message"] == spec().messages["inference_unavailable"]


def test_an_error_event_after_the_first_is_the_apis_error_event() -> None:
    error = {
        "error": {
            "message": "Expecting value",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    }

    def failing(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        conn.sendall(stream_head() + chunk(sse(content(0, " blue", [6437]), done=False)))
        time.sleep(0.05)
        conn.sendall(chunk(sse(content(0, " sky", [6438]), error, done=True)) + chunk(b""))

    with api(failing) as (c, _):
        got = events(c.post("/v1/completions", json={**BODY, "stream": True}).text)
    assert [g["choices"][0]["text"] for g in got[:2]] == [
        " blue",
        " sky",
    ]  # the one before the error too
    assert got[2]["error"]["code"] == "invalid_request" and got[3] == "[DONE]" and len(got) == 4


def test_a_stream_cut_off_ends_with_an_error_event_and_drops_the_connection() -> None:
    cuts = [True]

    def cut(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        if cuts and cuts.pop():  # the first request only
            conn.sendall(stream_head() + chunk(SKY_EVENTS[0]))
            time.sleep(0.05)
            conn.shutdown(socket.SHUT_RDWR)
        else:
            sky(conn, body, number)

    with api(cut) as (c, vllm):
        got = events(c.post("/v1/completions", json={**BODY, "stream": True}).text)
        after = c.post("/v1/completions", json={**BODY, "stream": True})
    assert got[0]["choices"][0]["text"] == " blue"
    assert got[1]["error"]["code"] == "inference_unavailable" and got[2] == "[DONE]"
    assert texts(after) == [" blue", " today"] and vllm.connections == 2


def test_vllm_silent_past_the_wait_is_a_504() -> None:
    def silent(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        time.sleep(3)

    with api(silent, wait_seconds=1, keepalive_seconds=0.2) as (c, _):
        r = c.post("/v1/completions", json=BODY)
        stream = c.post("/v1/completions", json={**BODY, "stream": True})
    message = spec().messages["deadline_exceeded"].format(seconds=1)
    assert (r.status_code, r.json()["error"]["message"]) == (504, message)
    # The stream began with keepalives while it waited: the deadline is its error event.
    assert stream.status_code == 200 and stream.text.startswith(": keepalive\n\n")
    got = events(stream.text)
    assert got[0]["error"]["message"] == message and got[1] == "[DONE]"


def test_vllm_silent_after_done_leaves_the_stream_whole() -> None:
    """The body's end (its last, empty chunk) that never comes, past the wait: the stream
    stands as vLLM sent it, and only the connection goes."""

    def no_end(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        conn.sendall(stream_head() + b"".join(chunk(e) for e in SKY_EVENTS))
        time.sleep(3)

    with api(no_end, wait_seconds=1) as (c, vllm):
        r = c.post("/v1/completions", json={**BODY, "stream": True})
        assert vllm.closed_by_client.wait(5)
    assert (
        texts(r) == [" blue", " today"] and "error" not in r.text and events(r.text)[-1] == "[DONE]"
    )


def test_a_client_that_goes_away_closes_the_connection_to_vllm() -> None:
    def endless(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        conn.sendall(stream_head())
        for i in range(1000):
            conn.sendall(chunk(sse(content(0, f" t{i}", [i]), done=False)))
            time.sleep(0.01)

    with api(endless) as (c, vllm):
        with c.stream(
            "POST", "/v1/completions", json={**BODY, "max_tokens": 1000, "stream": True}
        ) as r:
            next(r.iter_lines())
        assert vllm.closed_by_client.wait(5), (
            "the engine kept vLLM's stream open after the client left"
        )


def test_a_kept_alive_connection_that_vllm_closed_is_not_reused() -> None:
    def close_after(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        sky(conn, body, number)
        conn.shutdown(socket.SHUT_RDWR)  # as uvicorn when a kept-alive connection idles out

    with api(close_after) as (c, vllm):
        first = c.post("/v1/completions", json={**BODY, "stream": True})
        time.sleep(0.1)
        second = c.post("/v1/completions", json={**BODY, "stream": True})
    assert texts(first) == texts(second) == [" blue", " today"] and vllm.connections == 2


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_that_meets_a_closing_connection_is_sent_again(stream: bool) -> None:
    """vLLM closes a kept-alive connection as the next request arrives (its idle timeout):
    the request was not read, and goes once more on a new connection."""

    def drop_second(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        if number == 2:
            conn.shutdown(socket.SHUT_RDWR)
            conn.close()
            return
        sky(conn, body, number)

    with api(drop_second) as (c, vllm):
        got = [c.post("/v1/completions", json={**BODY, "stream": stream}) for _ in range(2)]
    assert [r.status_code for r in got] == [200, 200] and texts(got[0]) == texts(got[1])
    assert vllm.connections == 2 and len(vllm.requests) == 3


def test_bytes_after_a_whole_answer_keep_the_answer_and_drop_the_connection() -> None:
    def trailing(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        # An answer nobody asked for, in the same send as the first answer, so that the client
        # reads both at once. (Sent later, it could come after the connection was taken for
        # the next request: no client can tell it from that request's answer.)
        extra = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n" if number == 1 else b""
        conn.sendall(stream_head() + b"".join(chunk(e) for e in SKY_EVENTS) + chunk(b"") + extra)

    with api(trailing) as (c, vllm):
        got = [
            c.post("/v1/completions", json={**BODY, "stream": stream}) for stream in (True, True)
        ]
    assert [texts(r) for r in got] == [[" blue", " today"]] * 2 and vllm.connections == 2


def test_an_unreadable_answer_is_a_503() -> None:
    def garbage(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")

    with api(garbage) as (c, _):
        r = c.post("/v1/completions", json={**BODY, "stream": True})
    assert (r.status_code, r.json()["error"]["code"]) == (503, "inference_unavailable")


def test_generate_streams_over_the_same_client_and_closing_it_closes_vllms_stream() -> None:
    """`generate` (what a pump runs, for a server whose hook paces the events) reads the
    same way, each read waiting up to the API's wait; closed early, it drops vLLM's stream."""
    from api_server.engine import ChoiceDelta, Usage

    def endless(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        conn.sendall(stream_head())
        for i in range(1000):
            conn.sendall(chunk(sse(content(0, f" t{i}", [i]), done=False)))
            time.sleep(0.01)

    for script, expect_closed in ((sky, False), (endless, True)):
        vllm = Vllm(script)
        engine = VllmEngine(vllm.url, MODEL, api=spec())
        req = CONTRACT.validate_completion({**BODY, "stream": True}, models=spec().models)
        try:
            got = engine.generate(req, "req_1")
            first = next(got)
            if expect_closed:
                got.close()
                # before the engine closes its pool: the stream's own connection was closed
                assert vllm.closed_by_client.wait(5)
            else:
                assert [type(e) for e in got] == [ChoiceDelta, Usage]
                assert not vllm.closed_by_client.is_set()  # kept for the next request
        finally:
            engine.close()
            vllm.close()
        assert isinstance(first, ChoiceDelta) and first.text in (" blue", " t0")


# -- an https:// upstream ------------------------------------------------------------------------


def sky_answer(request: httpx.Request) -> httpx.Response:
    if request.method == "GET":  # /health
        return httpx.Response(200)
    if json.loads(request.content)["stream"]:
        return httpx.Response(200, content=SKY, headers={"content-type": "text/event-stream"})
    return httpx.Response(200, json=completion(SKY))


def test_an_https_upstream_with_a_trusted_certificate(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts the system's CAs and this
    with UpstreamServer(sky_answer, tls) as upstream:
        engine = VllmEngine(upstream.url, MODEL, api=spec())
        app = create_app(ServerConfig(keys=(KEY,)), engine)
        try:
            with httpx.Client(
                transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
            ) as c:
                got = [
                    texts(c.post("/v1/completions", json={**BODY, "stream": stream}))
                    for stream in (True, False)
                ]
                assert c.get("/health").status_code == 200
        finally:
            engine.close()
    assert upstream.url.startswith("https://") and got == [[" blue", " today"], [" blue today"]]


def test_an_https_upstream_whose_certificate_is_not_trusted_is_a_503(
    certificate: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = certificate
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    with UpstreamServer(sky_answer, tls) as upstream:
        engine = VllmEngine(upstream.url, MODEL, api=spec())
        app = create_app(ServerConfig(keys=(KEY,)), engine)
        try:
            with httpx.Client(
                transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
            ) as c:
                r = c.post("/v1/completions", json=BODY)
        finally:
            engine.close()
    assert (r.status_code, r.json()["error"]["code"]) == (503, "inference_unavailable")
    assert "CERTIFICATE_VERIFY_FAILED" in caplog.text  # (the client checks the certificate)


# -- under gevent (the default worker) ----------------------------------------------------------

GREEN = __import__("gevent.monkey").monkey.is_module_patched("socket")


def test_the_tests_above_pass_under_gevent() -> None:
    """wire.py waits differently under gevent (one Timeout per exchange, the socket without
    a timeout): this module again, in a process that gevent has patched as the worker does."""
    if GREEN:
        pytest.skip("this is the run under gevent")
    code = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import sys, pytest\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:randomly', sys.argv[1]]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, __file__],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed, 1 skipped in " in run.stdout  # all ran but this one, the gevent-only one too


def test_under_gevent_tokens_that_keep_coming_get_no_keepalive_and_no_timeout_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each read that waits for vLLM's next token waits the whole keepalive interval from
    its start (a gevent.Timeout started again after a cancel waits only what was left of
    it: keepalives went out between tokens 20 ms apart); and it makes no gevent.Timeout
    (one per read cost ~1.5 us of each token's CPU)."""
    if not GREEN:
        pytest.skip("runs in the gevent run (test_the_tests_above_pass_under_gevent)")
    import gevent

    made: list[float] = []
    init = gevent.Timeout.__init__

    def counted(self: Any, seconds: Any = None, *args: Any, **kwargs: Any) -> None:
        made.append(seconds)
        init(self, seconds, *args, **kwargs)

    def steady(conn: socket.socket, body: dict[str, Any], number: int) -> None:
        conn.sendall(stream_head())
        for i in range(150):
            time.sleep(0.004)  # each read waits for the next token: 0.6 s in all
            conn.sendall(chunk(sse(content(0, f" t{i}", [i]), done=False)))
        conn.sendall(chunk(b"data: [DONE]\n\n") + chunk(b""))

    with api(steady, keepalive_seconds=0.25) as (c, _):
        monkeypatch.setattr(gevent.Timeout, "__init__", counted)
        r = c.post("/v1/completions", json={**BODY, "max_tokens": 150, "stream": True})
    assert texts(r) == [f" t{i}" for i in range(150)]
    assert ": keepalive" not in r.text
    assert [s for s in made if s is not None and 0.2 < s <= 0.25] == []
