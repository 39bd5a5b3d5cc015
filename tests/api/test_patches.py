"""The patches of gunicorn and Flask (api_server/patches.py): what each gives is what
gunicorn's or Flask's own code gives (the bytes, the headers, the values), and
ACS_PATCHES=0 leaves gunicorn and Flask as they are.

OneWriteResponse: each write is one send (one TCP segment), the head leaving with the
first body piece, and the framing is HTTP/1.1's."""

from __future__ import annotations

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser

from api_server import patches
from api_server.patches import OneWriteResponse


class Sock:
    """The socket the response writes to: each send call's bytes, in order; `room`
    caps what one send takes, as a full send buffer would."""

    def __init__(self, room: int = 1 << 20) -> None:
        self.sends: list[bytes] = []
        self.room = room

    def send(self, data: bytes | memoryview) -> int:
        taken = bytes(data[: self.room])
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


def test_the_date_header_is_gunicorns() -> None:
    import email.utils
    import time

    for _ in range(5):  # the second may turn between the two reads
        before = int(time.time())
        got = patches.http_date()
        if int(time.time()) == before:
            break
    assert got == email.utils.formatdate(before, usegmt=True)
    assert patches.http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"


def created(request: bytes = GET) -> tuple[object, dict[str, object], Sock]:
    from gunicorn.http import wsgi

    sock = Sock()
    req = next(RequestParser(Config(), [request], ("127.0.0.1", 1)))
    resp, environ = wsgi.create(req, sock, ("127.0.0.1", 1), ("127.0.0.1", 8000), Config())
    return resp, environ, sock


def test_once_patched_gunicorn_answers_through_the_patches(restored: pytest.MonkeyPatch) -> None:
    """A gunicorn release that stopped looking these names up at call time would
    silently undo the patches: its response would be its own again."""
    restored.setenv(patches.ENV, "1")
    patches.patch_gunicorn()
    resp, environ, sock = created()
    assert isinstance(resp, OneWriteResponse) and isinstance(
        environ["wsgi.errors"], patches.LazyErrors
    )
    resp.start_response("200 OK", [("Content-Length", "2")])
    resp.write(b"{}")
    resp.close()
    lines, body = head_and_rest(sock.sends[0])
    assert f"Date: {patches.http_date()}" in lines and body == b"{}"


def test_with_acs_patches_0_gunicorn_is_left_as_it_is(restored: pytest.MonkeyPatch) -> None:
    from gunicorn import util
    from gunicorn.http import wsgi

    before = (wsgi.Response, util.http_date, wsgi.WSGIErrorsWrapper)
    restored.setenv(patches.ENV, "0")
    patches.patch_gunicorn()
    assert (wsgi.Response, util.http_date, wsgi.WSGIErrorsWrapper) == before
    resp, environ, _ = created()
    assert type(resp) is wsgi.Response and isinstance(
        environ["wsgi.errors"], wsgi.WSGIErrorsWrapper
    )


def test_wsgi_errors_writes_to_the_error_log(capsys: pytest.CaptureFixture[str]) -> None:
    errors = patches.LazyErrors(Config())
    errors.write("from the app\n")
    errors.writelines(["two\n", "lines\n"])
    assert capsys.readouterr().err == "from the app\ntwo\nlines\n"


def test_a_read_once_config_reads_as_gunicorns() -> None:
    cfg = Config()
    cfg.set("limit_request_line", 1234)
    cfg.set("forwarded_allow_ips", "10.0.0.1")
    once = patches.ReadOnceConfig(cfg)
    for _ in range(2):  # the first read and the kept one
        assert once.limit_request_line == 1234
        assert once.forwarded_allow_ips == ["10.0.0.1"]
        assert (
            once.is_ssl == cfg.is_ssl and not once.is_ssl
        )  # a property of Config, over two settings
        assert once.forwarded_allow_networks() == cfg.forwarded_allow_networks()
    with pytest.raises(AttributeError):
        once.no_such_setting  # noqa: B018  (the access is what raises)


def test_the_switch_picks_gunicorns_config_and_flasks_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from flask import Flask

    cfg = Config()
    monkeypatch.setenv(patches.ENV, "0")
    assert patches.worker_config(cfg) is cfg and patches.flask_class() is Flask
    monkeypatch.delenv(patches.ENV)
    assert isinstance(patches.worker_config(cfg), patches.ReadOnceConfig)
    assert patches.flask_class() is patches.ShortcutFlask


def answers(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> list[tuple[int, dict[str, str], object]]:
    """What the mock's app answers to a few requests (status, headers, body; ids and times masked)."""
    import re

    from mock_server.server import create_app

    monkeypatch.setenv(patches.ENV, setting)
    client = create_app().test_client()
    auth = {"Authorization": "Bearer k"}
    body = {"model": "llama-8b", "prompt": "The sky is", "max_tokens": 4, "temperature": 0}
    got = []
    for method, path, headers, payload in (
        ("POST", "/v1/completions", auth, body),
        ("POST", "/v1/completions", {**auth, "Host": "other.example:81"}, body),
        ("POST", "/v1/completions", {**auth, "Host": "bad host\x7f"}, body),
        ("GET", "/v1/completions", auth, None),
        ("POST", "/v1/nowhere", auth, body),
        ("GET", "/health", {}, None),
        ("GET", "/v1/models", auth, None),
    ):
        r = client.open(path, method=method, headers=headers, json=payload)
        masked = re.sub(rb"(cmpl|req)([-_])[0-9A-Za-z]+", rb"\1\2ID", r.data)
        # Two apps built a second apart stamp their models and answers a second apart.
        masked = re.sub(rb'"created":\d+', b'"created":0', masked).decode()
        kept = {k: v for k, v in r.headers.items() if k not in ("X-Request-Id", "Date")}
        got.append((r.status_code, kept, masked))
    return got


def test_the_app_answers_the_same_with_the_patches_off(monkeypatch: pytest.MonkeyPatch) -> None:
    on = answers(monkeypatch, "1")
    assert [status for status, _, _ in on] == [200, 200, 200, 405, 404, 200, 200]
    assert answers(monkeypatch, "0") == on


# -- reference_impl/vllm_server.py, in vLLM's interpreter -------------------------------
VLLM_NAMES = """
import os, sys
from reference_impl import vllm_server
from vllm.entrypoints.openai.completion.serving import OpenAIServingCompletion
from vllm_lens._activations_plugin import _serialize_activations_for
original = OpenAIServingCompletion.completion_stream_generator
vllm_server.install()
vllm_server.install()   # idempotent: one wrap
wrapped = OpenAIServingCompletion.completion_stream_generator
print(vllm_server.enabled(), wrapped is not original, getattr(wrapped, "_with_activations", False),
      callable(_serialize_activations_for))
"""


@pytest.mark.vllm
@pytest.mark.parametrize("switch", ["1", "0"])
def test_the_names_vllm_server_replaces_exist_and_the_switch_is_api_servers(switch: str) -> None:
    """What vllm_server.py replaces and calls is still in the pinned vLLM and vllm-lens;
    ACS_PATCHES is the switch patches.py reads, and =0 means main() installs nothing."""
    import os
    import subprocess

    from reference_impl import vllm_server
    from reference_impl.launcher import ROOT, default_python
    from tests.support.reference import missing

    assert vllm_server.SWITCH == patches.ENV
    reason = missing()
    if reason:
        pytest.skip(reason)
    env = {**os.environ, "PYTHONPATH": str(ROOT), patches.ENV: switch}
    run = subprocess.run(
        [default_python(), "-c", VLLM_NAMES],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == [str(switch == "1"), "True", "True", "True"]
