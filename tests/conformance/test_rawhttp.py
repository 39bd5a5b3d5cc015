"""conformance/wire/rawhttp.py reads what comes back as HTTP/1.1 frames it (h11): whole
bodies by Content-Length, chunks, or the close; pipelined answers one by one; an answer
that is not HTTP/1.1 said so, never read as a status of 0."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from conformance.wire.rawhttp import RawExchange, Target, exchange

REQUEST = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


@contextmanager
def answering(*answers: bytes, close: bool = True) -> Iterator[Target]:
    """A server on a free port that reads once, sends `answers` one send each, then closes
    (or, without `close`, waits for the client to)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(1 << 16)
            for answer in answers:
                conn.sendall(answer)
            if not close:
                conn.recv(1 << 16)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield Target("127.0.0.1", port, False, "")
    finally:
        thread.join(5)
        listener.close()


def ask(*answers: bytes, expect: int = 1, close: bool = True) -> RawExchange:
    with answering(*answers, close=close) as target:
        return exchange(target, [REQUEST], expect=expect, bound=2)


def test_a_sized_body_and_its_headers() -> None:
    ex = ask(
        b'HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'
    )
    assert [(r.status, r.headers["content-type"], r.body) for r in ex.responses] == [
        (400, "application/json", b'{"a":1}')
    ]
    assert ex.malformed is None and not ex.timed_out


def test_a_chunked_body_is_joined() -> None:
    ex = ask(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"
    )
    assert [(r.status, r.body) for r in ex.responses] == [(200, b"abcde")]


def test_pipelined_answers_are_read_one_by_one() -> None:
    one = b"HTTP/1.1 404 Not Found\r\nContent-Length: 1\r\n\r\na"
    ex = ask(one + one.replace(b"404 Not Found", b"405 Method Not Allowed"), expect=2)
    assert [(r.status, r.body) for r in ex.responses] == [(404, b"a"), (405, b"a")]


def test_an_interim_answer_is_not_the_answer() -> None:
    ex = ask(
        b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 413 Too Large\r\nContent-Length: 0\r\n\r\n"
    )
    assert [r.status for r in ex.responses] == [413]


def test_a_repeated_header_keeps_every_value() -> None:
    ex = ask(b"HTTP/1.1 200 OK\r\nVia: 1.1 a\r\nVia: 1.1 b\r\nContent-Length: 0\r\n\r\n")
    assert ex.responses[0].headers["via"] == "1.1 a, 1.1 b"


def test_a_body_without_length_runs_to_the_close() -> None:
    ex = ask(b"HTTP/1.1 200 OK\r\n\r\nall of it")
    assert [(r.status, r.body) for r in ex.responses] == [(200, b"all of it")] and ex.closed


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 OK\r\n\r\n",
        b"hello\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nBad Header\r\nContent-Length: 0\r\n\r\n",
    ],
)
def test_an_answer_that_is_not_http_is_malformed_not_a_status(answer: bytes) -> None:
    ex = ask(answer, close=False)
    assert ex.responses == [] and ex.malformed and ex.data == answer


def test_a_body_cut_off_by_the_close_is_no_answer() -> None:
    ex = ask(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    assert ex.responses == [] and ex.closed and ex.malformed is None


def test_silence_is_a_timeout() -> None:
    with answering(close=False) as target:
        ex = exchange(target, [REQUEST], bound=0.3)
    assert ex.responses == [] and ex.timed_out


def test_a_raw_head_carries_the_sdks_headers_but_those_it_names_and_accept_encoding() -> None:
    """Issue 53, item 2: the raw requests are a client's too, where their check allows."""
    import openai

    head = Target.from_base_url("http://gate.test:8000/api").head(
        "GET", "/health", [("Connection", "close"), ("User-Agent", "theirs")]
    )
    lines = head.decode("latin-1").split("\r\n")
    assert lines[:4] == [
        "GET /api/health HTTP/1.1",
        "Host: gate.test:8000",
        "Connection: close",
        "User-Agent: theirs",
    ]
    assert f"x-stainless-package-version: {openai.__version__}" in lines
    assert not [
        line for line in lines if line.lower().startswith(("accept-encoding", "user-agent: openai"))
    ]
    assert head.endswith(b"\r\n\r\n")
