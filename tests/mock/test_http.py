"""The mock over real HTTP (gunicorn, two workers): streams, determinism across
calls and restarts, chunked bodies, keepalive and faults."""

from __future__ import annotations

import base64
import json
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import zstandard

from api_server.serve import IDLE_CONNECTION_S
from conformance.golden import padded_body
from contract import (
    InferenceUnavailable,
    InvalidRequest,
    RequestTooLarge,
    UnsupportedTransferCoding,
    spec,
)
from mock_server.hook.faults import STREAM_ERROR_AFTER, TTFT_MS
from tests.support.contract import CONTRACT
from tests.support.mock import (
    AUTH,
    KEEPALIVE_S,
    MockProcess,
    RawResponse,
    completion_body,
    parse_sse,
    raw_request,
    read_http_response,
    strip_volatile,
)

MODEL = spec().models[spec().default_model]
CAP = spec().caps["max_body_bytes"]


def post(client: httpx.Client, body: dict[str, Any], **headers: str) -> httpx.Response:
    return client.post("/v1/completions", json=body, headers=headers)


# -- streams --------------------------------------------------------------------------
def test_stream_shape(mock_http: httpx.Client) -> None:
    body = completion_body(
        seed=3,
        n=2,
        temperature=1,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    r = post(mock_http, body)
    assert r.headers["content-type"].startswith("text/event-stream")
    stream = parse_sse(r.text)
    rid = r.headers["X-Request-Id"]
    assert stream.events[-1] == "[DONE]"
    usage_chunk = stream.events[-2]
    assert usage_chunk["choices"] == []
    assert set(usage_chunk["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    for chunk in stream.chunks:
        assert len(chunk["choices"]) == 1
        assert (chunk["object"], chunk["model"], chunk["id"]) == (
            "text_completion",
            body["model"],
            "cmpl-" + rid[4:],
        )
    for index in (0, 1):
        mine = [c["choices"][0] for c in stream.chunks if c["choices"][0]["index"] == index]
        assert all(c["finish_reason"] is None and c["stop_reason"] is None for c in mine[:-1])
        assert mine[-1]["finish_reason"] in ("stop", "length")
    assert usage_chunk["usage"]["completion_tokens"] == len(stream.chunks)


def test_stream_text_equals_non_stream_text(mock_http: httpx.Client) -> None:
    body = completion_body(
        prompt=["Once upon", "a time"],
        n=2,
        seed=12,
        temperature=0.7,
        max_tokens=30,
        logprobs=2,
        echo=True,
        stop=[" the"],
        return_token_ids=True,
    )
    whole = post(mock_http, body).json()
    stream = parse_sse(post(mock_http, {**body, "stream": True}).text)
    for choice in whole["choices"]:
        i = choice["index"]
        parts = [c["choices"][0] for c in stream.chunks if c["choices"][0]["index"] == i]
        assert "".join(p["text"] for p in parts) == choice["text"]
        assert sum((p["logprobs"]["tokens"] for p in parts), []) == choice["logprobs"]["tokens"]
        assert (
            sum((p["logprobs"]["text_offset"] for p in parts), [])
            == choice["logprobs"]["text_offset"]
        )
        assert sum((p["token_ids"] for p in parts), []) == choice["token_ids"]
        assert parts[0]["prompt_token_ids"] == choice["prompt_token_ids"]
        last = parts[-1]
        assert (last["finish_reason"], last["stop_reason"]) == (
            choice["finish_reason"],
            choice["stop_reason"],
        )


def test_continuous_usage_stats(mock_http: httpx.Client) -> None:
    body = completion_body(
        seed=1,
        max_tokens=5,
        stream=True,
        ignore_eos=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    stream = parse_sse(post(mock_http, body).text)
    assert [c["usage"]["completion_tokens"] for c in stream.chunks] == [1, 2, 3, 4, 5]


def decode_tensor(wire: dict[str, Any]) -> np.ndarray:
    raw = zstandard.ZstdDecompressor().decompress(base64.b64decode(wire["data"]))
    return np.frombuffer(raw, dtype=np.dtype(wire["dtype"]).newbyteorder("<")).reshape(
        wire["shape"]
    )


@pytest.mark.parametrize("stream", [False, True])
def test_activations_decode_to_the_declared_shape(mock_http: httpx.Client, stream: bool) -> None:
    layers = [0, 7, MODEL.num_layers - 1]
    body = completion_body(
        seed=5,
        max_tokens=9,
        output_residual_stream=layers,
        stream=stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    )
    r = post(mock_http, body)
    if stream:
        events = parse_sse(r.text).events
        assert (
            events[-1] == "[DONE]" and events[-2]["choices"] == [] and events[-3]["choices"] == []
        )
        usage, acts = events[-3]["usage"], events[-2]["activations"]
    else:
        usage, acts = r.json()["usage"], r.json()["activations"]
    wire = acts["residual_stream"]
    values = decode_tensor(wire)
    assert acts["layers"] == layers
    assert values.shape == (
        len(layers),
        usage["prompt_tokens"] + usage["completion_tokens"] - 1,
        MODEL.hidden_size,
    )
    assert (values.dtype, wire["original_dtype"]) == (np.dtype("<i2"), "torch.bfloat16")


def test_keepalive_while_nothing_else_is_sent(mock_http: httpx.Client) -> None:
    delay_ms = int(KEEPALIVE_S * 1000 * 5)
    r = post(
        mock_http, completion_body(seed=1, max_tokens=3, stream=True), **{TTFT_MS: str(delay_ms)}
    )
    stream = parse_sse(r.text)
    assert stream.comments and set(stream.comments) == {"keepalive"}
    assert stream.events[-1] == "[DONE]" and stream.chunks


def test_stream_error_after_n_chunks(mock_http: httpx.Client) -> None:
    r = post(
        mock_http,
        completion_body(seed=1, stream=True, ignore_eos=True),
        **{STREAM_ERROR_AFTER: "3"},
    )
    stream = parse_sse(r.text)
    rid = r.headers["X-Request-Id"]
    assert len(stream.chunks) == 3
    assert stream.events[-2:] == [
        CONTRACT.errors.body(InferenceUnavailable.from_template("inference_unavailable"), rid),
        "[DONE]",
    ]


# -- determinism ----------------------------------------------------------------------
DETERMINISTIC = [
    completion_body(
        seed=42, temperature=0.9, max_tokens=20, logprobs=3, echo=True, n=2, return_token_ids=True
    ),
    completion_body(temperature=0, max_tokens=12, prompt_logprobs=2, output_residual_stream=[1, 2]),
]


@pytest.mark.parametrize("body", DETERMINISTIC)
def test_the_same_request_twice_gives_the_same_body(
    mock_http: httpx.Client, body: dict[str, Any]
) -> None:
    first, second = post(mock_http, body).json(), post(mock_http, body).json()
    assert strip_volatile(first) == strip_volatile(second)
    assert first["id"] != second["id"]


@pytest.fixture(scope="module")
def restarted() -> Iterator[MockProcess]:
    server = MockProcess("--workers", "1").start()
    yield server
    server.close()


def test_the_same_request_after_a_restart_gives_the_same_body(
    mock_http: httpx.Client, restarted: MockProcess
) -> None:
    with httpx.Client(base_url=restarted.url, headers=AUTH, timeout=60) as other:
        for body in DETERMINISTIC:
            assert strip_volatile(post(mock_http, body).json()) == strip_volatile(
                post(other, body).json()
            )


# -- bodies ---------------------------------------------------------------------------
def chunked(url: str, body: bytes) -> RawResponse:
    def pieces() -> Iterator[bytes]:
        for i in range(0, len(body), 1 << 16):
            yield body[i : i + (1 << 16)]

    headers = {**AUTH, "Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    return raw_request(url, "POST", "/v1/completions", headers, pieces())  # type: ignore[arg-type]


def test_a_chunked_body_is_cut_off_at_the_cap(mock_url: str) -> None:
    small = completion_body(max_tokens=1)
    assert chunked(mock_url, padded_body(small, CAP)).status == 200
    r = chunked(mock_url, padded_body(small, CAP + 1))
    assert r.status == 413 and r.json()["error"]["code"] == "request_too_large"
    assert r.headers["x-request-id"] == r.json()["request_id"]


def test_a_declared_length_over_the_cap_gets_413_and_the_client_reads_it(mock_url: str) -> None:
    r = raw_request(
        mock_url,
        "POST",
        "/v1/completions",
        {**AUTH, "Content-Type": "application/json"},
        padded_body(completion_body(max_tokens=1), CAP + 1),
    )
    assert r.status == 413 and r.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/health"),
        ("GET", "/v1/models"),
        ("GET", "/nope"),
        ("POST", "/v1/models"),
        ("POST", "/v1/chat/completions"),
    ],
)
def test_x_request_id_on_every_response(mock_url: str, method: str, path: str) -> None:
    r = raw_request(mock_url, method, path, {**AUTH, "Content-Type": "application/json"}, b"{}")
    rid = r.headers["x-request-id"]
    if r.status != 200:
        assert r.json()["request_id"] == rid


def raw_exchange(url: str, data: bytes) -> tuple[bytes, bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(data)
        return read_http_response(s)


@pytest.mark.parametrize(
    "data",
    [
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GET /" + b"a" * 10000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
        b"POST  /v1/completions  HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"{" * 10000
        + b"\r\n",
    ],
    ids=["content_length", "long_line", "not_http", "two_spaces", "chunk_framing"],
)
def test_malformed_http_gets_the_api_error_not_html_or_500(mock_url: str, data: bytes) -> None:
    head, body = raw_exchange(mock_url, data)
    rid = re.search(rb"X-Request-Id: (\S+)", head)
    assert head.startswith(b"HTTP/1.1 400 ") and rid is not None
    error = InvalidRequest(spec().messages["malformed_http"])
    assert json.loads(body) == CONTRACT.errors.body(error, rid.group(1).decode())


def test_a_first_request_slower_than_the_idle_bound_is_still_answered(mock_url: str) -> None:
    # gunicorn closes a connection whose next request takes longer than its keepalive
    # setting, with no answer; the first request of a connection gets body_read_seconds.
    assert spec().caps["body_read_seconds"] > IDLE_CONNECTION_S + 1
    host, port = mock_url.rsplit("//", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\n")
        time.sleep(IDLE_CONNECTION_S + 1)
        s.sendall(b"Host: x\r\n\r\n")
        head, body = read_http_response(s)
    assert head.startswith(b"HTTP/1.1 200 ") and json.loads(body) == {"status": "ok"}


def held_open(url: str, data: bytes, timeout: float) -> tuple[bytes, bytes]:
    """`data` sent and the connection held open (nothing more sent): the answer, read within
    `timeout`, or socket.timeout."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        return read_http_response(s)


def chunked_head(transfer_encoding: str = "chunked") -> bytes:
    return (
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
        f"Content-Type: application/json\r\nTransfer-Encoding: {transfer_encoding}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize(
    "chunks",
    [
        b'FFFFFFFFFFFFFFFF\r\n{"model":',
        f"{CAP + 1:x}\r\n".encode() + b'{"model":',
        f"{CAP // 2:x}\r\n".encode() + b" " * (CAP // 2) + f"\r\n{CAP // 2 + 2:x}\r\n".encode(),
    ],
    ids=["2**64-1", "cap+1", "two chunks past the cap"],
)
def test_a_chunk_declared_past_the_cap_is_413_at_its_size_line(
    mock_url: str, chunks: bytes
) -> None:
    """The body's bytes never come: the answer must not wait for them (the server's body-read
    timeout, x-caps.body_read_seconds, would answer 400 after it; this socket gives up at a third)."""
    head, body = held_open(mock_url, chunked_head() + chunks, spec().caps["body_read_seconds"] / 3)
    data = json.loads(body)
    assert head.startswith(b"HTTP/1.1 413 ")
    assert data == CONTRACT.errors.body(
        RequestTooLarge.from_template("request_too_large", limit=CAP), data["request_id"]
    )


@pytest.mark.parametrize("coding", ["gzip, chunked", "br, chunked", "identity, chunked"])
def test_a_transfer_coding_other_than_chunked_is_501_and_the_body_is_not_read(
    mock_url: str, coding: str
) -> None:
    """A valid body under a coding the server does not decode: a server that undid the chunking
    alone would answer it 200."""
    body = json.dumps(completion_body(max_tokens=1)).encode()
    data = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    head, answer = held_open(mock_url, chunked_head(coding) + data, 30)
    error = json.loads(answer)
    assert head.startswith(b"HTTP/1.1 501 ")
    assert error == CONTRACT.errors.body(
        UnsupportedTransferCoding.from_template("unsupported_transfer_coding"),
        error["request_id"],
    )
