"""OneWriteResponse (api_server/worker.py): each write is one send, the head leaving
with the first body piece, and the framing is HTTP/1.1's."""
from __future__ import annotations

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser

from api_server.worker import OneWriteResponse


class Sock:
    """The socket the response writes to: each send call's bytes, in order; `room`
    caps what one send takes, as a full send buffer would."""

    def __init__(self, room: int = 1 << 20) -> None:
        self.sends: list[bytes] = []
        self.room = room

    def send(self, data: bytes | memoryview) -> int:
        taken = bytes(data[:self.room])
        self.sends.append(taken)
        return len(taken)


def response(request: bytes, sock: Sock) -> OneWriteResponse:
    req = next(RequestParser(Config(), [request], ("127.0.0.1", 1)))
    return OneWriteResponse(req, sock, Config())


def head_and_rest(data: bytes) -> tuple[list[str], bytes]:
    head, _, rest = data.partition(b"\r\n\r\n")
    return head.decode("latin-1").split("\r\n"), rest


GET = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def test_a_sized_body_leaves_with_its_head_in_one_send() -> None:
    sock = Sock()
    resp = response(GET, sock)
    resp.start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "15")])
    resp.write(b'{"status":"ok"}')
    resp.close()
    assert len(sock.sends) == 1
    lines, body = head_and_rest(sock.sends[0])
    assert lines[0] == "HTTP/1.1 200 OK"
    assert "Content-Length: 15" in lines and "Connection: keep-alive" in lines
    assert body == b'{"status":"ok"}'


def test_a_stream_is_chunked_the_head_with_the_first_chunk_then_one_send_per_piece() -> None:
    sock = Sock()
    resp = response(GET, sock)
    resp.start_response("200 OK", [("Content-Type", "text/event-stream")])
    for piece in (b": keepalive\n\n", b"data: {}\n\n", b"data: [DONE]\n\n"):
        resp.write(piece)
    resp.close()
    assert len(sock.sends) == 4
    lines, first = head_and_rest(sock.sends[0])
    assert "Transfer-Encoding: chunked" in lines
    assert first == b"D\r\n: keepalive\n\n\r\n"
    assert sock.sends[1:] == [b"A\r\ndata: {}\n\n\r\n", b"E\r\ndata: [DONE]\n\n\r\n", b"0\r\n\r\n"]


def test_an_empty_body_still_sends_its_head_on_close() -> None:
    sock = Sock()
    resp = response(GET, sock)
    resp.start_response("204 No Content", [])
    resp.close()
    assert len(sock.sends) == 1
    lines, rest = head_and_rest(sock.sends[0])
    assert lines[0] == "HTTP/1.1 204 No Content" and rest == b""


@pytest.mark.parametrize("room", [1, 7, 100])
def test_a_partial_send_is_continued_until_every_byte_left(room: int) -> None:
    sock = Sock(room)
    resp = response(GET, sock)
    body = bytes(range(256)) * 4
    resp.start_response("200 OK", [("Content-Length", str(len(body)))])
    resp.write(body)
    resp.close()
    lines, rest = head_and_rest(b"".join(sock.sends))
    assert lines[0] == "HTTP/1.1 200 OK" and rest == body
    assert all(len(s) <= room for s in sock.sends)


def test_the_date_header_is_gunicorns_formatted_once_a_second() -> None:
    import email.utils
    import time

    from api_server.worker import http_date
    for _ in range(5):   # the second may turn between the two reads
        before = int(time.time())
        got = http_date()
        if int(time.time()) == before:
            break
    assert got == email.utils.formatdate(before, usegmt=True)
    assert http_date() is http_date() or int(time.time()) != before   # cached, not formatted again
    assert http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"


def test_gunicorn_still_looks_up_the_names_the_worker_replaces() -> None:
    """ApiGeventWorker.patch swaps module-level names of gunicorn; an upgrade that stopped
    looking them up at call time would silently undo the swap."""
    from gunicorn import util
    from gunicorn.http import wsgi
    assert "Response" in wsgi.create.__code__.co_names
    assert "http_date" in wsgi.Response.default_headers.__code__.co_names and hasattr(util, "http_date")
    assert "WSGIErrorsWrapper" in wsgi.base_environ.__code__.co_names


def test_wsgi_errors_is_built_only_when_written_and_writes_to_the_error_log(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from gunicorn.http import wsgi

    from api_server.worker import LazyErrors
    built = []
    real = wsgi.WSGIErrorsWrapper
    monkeypatch.setattr("api_server.worker._ErrorsWrapper", lambda cfg: built.append(cfg) or real(cfg))
    monkeypatch.setattr(wsgi, "WSGIErrorsWrapper", LazyErrors)
    errors = wsgi.base_environ(Config())["wsgi.errors"]
    assert isinstance(errors, LazyErrors) and built == []
    errors.write("from the app\n")
    assert len(built) == 1 and capsys.readouterr().err == "from the app\n"


def test_a_workers_settings_are_read_once_each(monkeypatch: pytest.MonkeyPatch) -> None:
    from api_server.worker import ReadOnceConfig

    cfg = Config()
    cfg.set("limit_request_line", 1234)
    cfg.set("forwarded_allow_ips", "10.0.0.1")
    reads: list[str] = []
    lookup = Config.__getattr__

    def counted(self: Config, name: str) -> object:
        reads.append(name)
        return lookup(self, name)

    monkeypatch.setattr(Config, "__getattr__", counted)
    once = ReadOnceConfig(cfg)
    for _ in range(3):
        assert once.limit_request_line == 1234
        assert once.forwarded_allow_ips == ["10.0.0.1"]
        assert not once.is_ssl   # a property of Config, over two settings
        assert once.forwarded_allow_networks() == cfg.forwarded_allow_networks()
    assert sorted(set(reads)) == ["certfile", "forwarded_allow_ips", "keyfile", "limit_request_line"]
    assert reads.count("limit_request_line") == 1 and reads.count("certfile") == 1
    with pytest.raises(AttributeError):
        once.no_such_setting


def test_both_workers_read_their_settings_through_one_read_once_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """init_process (in the worker, after the fork) wraps the Config before gunicorn's own runs."""
    from api_server.worker import ApiGeventWorker, ApiThreadWorker, ReadOnceConfig, _ReadOnce

    for worker_class in (ApiGeventWorker, ApiThreadWorker):
        mro = worker_class.__mro__
        gunicorns = next(c for c in mro[mro.index(_ReadOnce) + 1:] if "init_process" in vars(c))
        seen: list[object] = []
        monkeypatch.setattr(gunicorns, "init_process", lambda self: seen.append(self.cfg))
        worker = worker_class.__new__(worker_class)
        worker.cfg = Config()
        worker.init_process()
        assert len(seen) == 1 and isinstance(seen[0], ReadOnceConfig), worker_class
