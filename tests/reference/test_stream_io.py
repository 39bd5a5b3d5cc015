"""How the reference reads vLLM's stream: the SSE events however they are cut, the JSON
as json reads it, and the stream read to its end so its connection is kept.

vLLM is a local HTTP/1.1 server here (the standard library's, chunked like uvicorn's),
or handlers served as in test_reference_engine.py.
"""

from __future__ import annotations

import http.server
import itertools
import json
import socket
import threading
from collections.abc import Iterable, Iterator

import httpx
import pytest

from api_server import ServerConfig, create_app
from contract import spec
from reference_impl.engine import VllmEngine, vllm_json
from reference_impl.errors import UpstreamError
from reference_impl.events import SseData
from tests.support.fake_vllm import ChunkedVllm
from tests.support.vllm_stream import AUTH, BODY, KEY, MODEL, SKY, ApiClient, events

# SKY's data lines, and SKY as vLLM sends it: one event per chunk of its body.
SKY_DATA = [
    line[len(b"data: ") :] for line in SKY.split(b"\n\n") if line and line != b"data: [DONE]"
]
SKY_EVENTS = [event + b"\n\n" for event in SKY.split(b"\n\n") if event]


def sse_data(chunks: Iterable[bytes]) -> tuple[list[bytes], bool]:
    """The data of each `data:` event fed through SseData, and whether `[DONE]` came."""
    sse, out = SseData(), []
    for chunk in chunks:
        out += sse.feed(chunk)
    return out, sse.done


@pytest.mark.parametrize("cut", ["whole", "events", "bytes", "pairs", "cr"])
def test_sse_data_is_the_same_however_the_body_is_cut(cut: str) -> None:
    chunks = {
        "whole": [SKY],
        "events": SKY_EVENTS,
        "bytes": [SKY[i : i + 1] for i in range(len(SKY))],
        "pairs": [b"".join(SKY_EVENTS[i : i + 2]) for i in range(0, len(SKY_EVENTS), 2)],
        "cr": [e.replace(b"\n\n", b"\r\n\n") for e in SKY_EVENTS],  # a line may end in \r\n
    }[cut]
    assert sse_data(chunks) == (SKY_DATA, True)


def test_sse_data_skips_comments_and_stops_at_done() -> None:
    chunks = [
        b": keepalive\n\n",
        SKY_EVENTS[0],
        b"event: x\ndata: {}\n\n",
        b"data: [DONE]\n\n",
        b"data: {}\n\n",
    ]
    assert sse_data(chunks) == ([SKY_DATA[0], b"{}"], True)
    assert sse_data(SKY_EVENTS[:2]) == (SKY_DATA[:2], False)  # no [DONE] (yet)


def test_vllms_json_reads_as_json_reads_it() -> None:
    """orjson first; what it refuses (NaN, lone surrogates, UTF-16) reads as json.loads
    reads it, and what neither reads is the upstream's fault."""
    for raw in (
        SKY_DATA[0],
        b'{"a": [1.5, -0.0, 1e300, "\\u00e9", 18446744073709551615, -9223372036854775808]}',
        b'{"s": "\\ud800"}',
        '{"u": "\u00e9"}'.encode("utf-16"),
    ):
        assert vllm_json(raw) == json.loads(raw)
    nan = vllm_json(b'{"x": NaN}')["x"]  # type: ignore[index]
    assert nan != nan
    with pytest.raises(UpstreamError, match="not JSON"):
        vllm_json(b"data: {")


class Finishing(httpx.SyncByteStream):
    """vLLM's body chunk by chunk; records whether it was read to its end, and closed."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.finished = self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        self.finished = True

    def close(self) -> None:
        self.closed = True


def api_over(stream: Finishing) -> httpx.Client:
    return ApiClient(
        lambda r: httpx.Response(200, stream=stream, headers={"content-type": "text/event-stream"})
    )


def test_a_finished_stream_is_read_to_its_end() -> None:
    """After [DONE] the engine reads the body's end, so that its connection is kept."""
    upstream = Finishing(iter(SKY_EVENTS))
    with api_over(upstream) as c:
        got = events(c.post("/v1/completions", json={**BODY, "stream": True}).text)
    assert [e["choices"][0]["text"] for e in got[:2]] == [" blue", " today"] and got[-1] == "[DONE]"
    assert upstream.finished and upstream.closed


def test_an_upstream_that_goes_on_after_done_is_cut_off() -> None:
    upstream = Finishing(itertools.chain(SKY_EVENTS, itertools.repeat(b": more\n\n")))
    with api_over(upstream) as c:
        got = events(c.post("/v1/completions", json={**BODY, "stream": True}).text)
    assert got[-1] == "[DONE]" and not upstream.finished and upstream.closed


def test_streams_one_after_another_share_one_connection_to_vllm() -> None:
    ChunkedVllm.connections = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ChunkedVllm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    engine = VllmEngine(f"http://127.0.0.1:{server.server_address[1]}", MODEL, api=spec())
    app = create_app(ServerConfig(keys=(KEY,)), engine)
    texts: list[object] = []
    try:
        with httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
        ) as c:
            for stream in (True, True, False, True):
                r = c.post("/v1/completions", json={**BODY, "stream": stream})
                texts.append(
                    [e["choices"][0]["text"] for e in events(r.text)[:2]]
                    if stream
                    else r.json()["choices"][0]["text"]
                )
    finally:
        engine.close()
        server.shutdown()
        server.server_close()
    assert texts == [[" blue", " today"]] * 2 + [" blue today"] + [[" blue", " today"]]
    assert ChunkedVllm.connections == 1


def test_each_request_to_vllm_leaves_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request's head and body leave in one send (each send wakes vLLM's server)."""
    sent: list[bytes] = []
    real_sendall, real_send = socket.socket.sendall, socket.socket.send

    def sendall(self: socket.socket, data: bytes, *args: object) -> None:
        sent.append(bytes(data))
        real_sendall(self, data, *args)

    def send(self: socket.socket, data: bytes, *args: object) -> int:
        sent.append(bytes(data))
        return real_send(self, data, *args)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ChunkedVllm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    engine = VllmEngine(url, MODEL, api=spec())
    app = create_app(ServerConfig(keys=(KEY,)), engine)
    monkeypatch.setattr(socket.socket, "sendall", sendall)
    monkeypatch.setattr(socket.socket, "send", send)
    try:
        with httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
        ) as c:
            for stream in (False, True):
                assert c.post("/v1/completions", json={**BODY, "stream": stream}).status_code == 200
    finally:
        monkeypatch.undo()
        engine.close()
        server.shutdown()
        server.server_close()
    requests = [data for data in sent if data.startswith(b"POST ")]
    assert len(requests) == 2
    for request in requests:
        head, body = request.split(b"\r\n\r\n", 1)
        assert (
            head.startswith(b"POST /v1/completions HTTP/1.1") and json.loads(body)["model"] == MODEL
        )
