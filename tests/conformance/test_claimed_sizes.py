"""Sizes a server claims, which the gate sizes its requests and buffers by: the model's numbers in
GET /v1/models and a capture's shape. A liar's number past what the API can carry was believed
(bytes(4 * hidden) of a 4,000-digit hidden_size: four checks ended in the suite's own error; a
capture declaring 32 GiB was decompressed up to its claim)."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import zstandard

from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome
from conformance.engine.runner import DEPLOYMENT_NUMBERS, run
from conformance.wire import tensors
from conformance.wire.client import Client, answer_bounds
from conformance.wire.sdk import client_headers
from contract import spec
from gallery.answers import ClaimsPast, Coded, Endless
from tests.support.mock import KEY
from tests.support.wsgi import serve

MODEL = spec().default_model
MOST = spec().caps["capture_elements"]


@pytest.mark.parametrize("past", [1, 10**4000], ids=["one past", "4,000 digits past"])
def test_model_numbers_past_their_bounds_are_a_finding_and_not_used(past: int) -> None:
    with serve(ClaimsPast(past)) as url:  # served: the robust: checks write raw HTTP
        config = RunConfig(
            base_url=url,
            api_key=KEY,
            model=MODEL,
            profile="full",
            select=("routes:models", "robust:steering.*", "robust:lists.*", "caps:capture*"),
        ).validate()
        report = run(config, select(REGISTRY, config))
    outcomes = {r.id: r for r in report.results}
    assert outcomes["routes:models"].outcome is Outcome.FAILED
    # past by one: the schema's bound; by 4,000 digits: no JSON the gate reads (wire.jsontext)
    unread = [] if past == 1 else [f"the model {MODEL!r} is not listed"]
    assert [f.message for f in outcomes["routes:models"].findings] == [
        "the models list does not match ModelList",
        *unread,
    ]
    # the steering and list checks ran on the spec's hidden_size, as against the mock itself (they
    # were the suite's own errors); a check sized by max_model_len is unproven, saying why
    others = {i: (r.outcome, r.reason) for i, r in outcomes.items() if i != "routes:models"}
    unproven = {i for i, (o, _) in others.items() if o is Outcome.UNPROVEN}
    assert {i for i, (o, _) in others.items() if o is Outcome.PASSED} == set(others) - unproven
    assert {i for i in others if i.startswith("robust:")} - unproven == {
        i for i in others if i.startswith("robust:")
    }
    len_ = spec().models[MODEL].max_model_len
    assert unproven and all(
        others[i][1].endswith(
            f"max_model_len, which GET /v1/models does not give within the Model schema's bounds "
            f"(the spec's is {len_}; routes:models reports it)"
        )
        for i in unproven
    ), {i: others[i] for i in unproven}
    assert report.assumed == {n: getattr(spec().models[MODEL], n) for n in DEPLOYMENT_NUMBERS}


def _capture(shape: list[Any], frame: bytes, dtype: str = "float32") -> dict[str, Any]:
    return tensors.wire(frame, shape, dtype)


def test_a_shape_past_the_capture_cap_is_refused_before_its_frame_is_decompressed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hidden = spec().models[MODEL].hidden_size
    positions = MOST // hidden + 1  # one position of one layer past the cap
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(4 * hidden))
    decompressed: list[int] = []
    real = zstandard.ZstdDecompressor.decompress

    def counting(self: Any, data: bytes, *args: Any, **kw: Any) -> bytes:
        decompressed.append(kw.get("max_output_size", 0))
        return real(self, data, *args, **kw)

    monkeypatch.setattr(zstandard.ZstdDecompressor, "decompress", counting)
    with pytest.raises(tensors.TensorError, match=f"^the shape declares more than {MOST} values$"):
        tensors.values(_capture([1, positions, hidden], frame), MOST)
    assert decompressed == []
    # at the cap it decodes (the frame holds fewer bytes than the shape: the caller's to hold)
    shape, values = tensors.values(_capture([1, MOST // hidden, hidden], frame), MOST)
    assert (shape, len(values), decompressed) == (
        [1, MOST // hidden, hidden],
        hidden,
        [4 * math.prod(shape)],
    )


@pytest.mark.parametrize(
    "shape",
    [["2", 3, 4], [2.0, 3, 4], [2, -3, -4], [True, 3, 4], "2,3,4", None, [10**4000, 10**4000, 0]],
)
def test_a_shape_that_is_not_counts_is_refused(shape: Any) -> None:
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(4))
    with pytest.raises(tensors.TensorError):
        tensors.values(_capture(shape, frame), MOST)


@pytest.mark.parametrize("dtype", ["float99999999", "float32x", "x" * 100_000, "bfloat", 32])
def test_a_dtype_that_is_not_a_number_type_is_refused_without_quoting_it(dtype: Any) -> None:
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(4))
    with pytest.raises(tensors.TensorError) as info:
        tensors.values(_capture([1], frame, dtype), MOST)
    assert (
        str(info.value) == "the dtype is not a number type with its bit width (float32, int16, ...)"
    )


# -- answers that never end ------------------------------------------------------------------
def test_an_endless_answer_is_a_finding_of_its_check_read_to_the_bound() -> None:
    most_bytes, _ = answer_bounds(spec().caps, RunConfig("http://x", "k").timeout)
    with serve(Endless(b"a" * (1 << 20))) as url:
        config = RunConfig(
            base_url=url, api_key=KEY, model=MODEL, profile="full", select=("usage:arithmetic",)
        ).validate()
        report = run(config, select(REGISTRY, config))
    (result,) = [r for r in report.results if r.id == "usage:arithmetic"]
    assert result.outcome is Outcome.FAILED, (result.outcome, result.reason)
    assert any(
        f"the answer went past {most_bytes} bytes; the suite stopped reading" in f.message
        for f in result.findings
    ), [f.message for f in result.findings]


def test_the_bounds_are_the_largest_capture_asked_and_the_apis_wait() -> None:
    caps = spec().caps
    most_bytes, most_seconds = answer_bounds(spec().caps, 7.0)
    assert most_bytes == math.ceil(4 * caps["capture_elements"] / 3) * 4 + caps["max_body_bytes"]
    assert most_seconds == caps["wait_seconds"] + 7.0


@pytest.mark.parametrize("stream", [False, True])
def test_a_trickling_answer_is_cut_at_the_deadline_and_a_flood_at_the_byte_bound(
    stream: bool,
) -> None:
    body = {"model": MODEL, "prompt": "a", "max_tokens": 1, "stream": stream}
    for app, bounds, words in [
        (Endless(b"a", pause=0.05, streams=True), (1 << 30, 0.5), "past the suite's wait"),
        (Endless(b"data: {}\n\n" * 1000, streams=True), (1 << 20, 60.0), f"past {1 << 20} bytes"),
    ]:
        with serve(app) as url, Client(url, KEY, timeout=5, bounds=bounds) as client:
            started = time.monotonic()
            reply = (
                client.stream(spec().completions_path, body)
                if stream
                else client.post(spec().completions_path, body)
            )
            assert reply.error is not None and words in reply.error, reply.error
            assert time.monotonic() - started < bounds[1] + 5  # cut, not read to the timeout


def _post_to(app: Coded) -> Any:
    body = {"model": MODEL, "prompt": "a", "max_tokens": 1}
    with serve(app) as url, Client(url, KEY, bounds=answer_bounds(spec().caps, 5.0)) as client:
        return client.post(spec().completions_path, body)


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_the_suite_accepts_what_the_sdk_accepts_and_reads_it_decoded(coding: str) -> None:
    """The SDK's Accept-Encoding (issue 53, item 2): a gzip or deflate answer is read as the SDK
    reads it, decoded."""
    app = Coded(coding)
    reply = _post_to(app)
    assert app.accepted == [client_headers()["accept-encoding"]] == ["gzip, deflate"]
    assert (reply.status, reply.error) == (200, None)
    assert reply.data["object"] == "text_completion"
    assert "content-encoding" not in reply.headers


def test_a_compression_bomb_is_read_no_further_than_the_bound() -> None:
    """A gzip bomb under the byte bound decodes a thousandfold: the gate decodes it within the
    bound and stops there, never holding what it decodes to."""
    most = answer_bounds(spec().caps, 5.0)[0]
    app = Coded("gzip", pad=4 * most)
    reply = _post_to(app)
    assert (reply.status, reply.error) == (
        None,
        f"AnswerPastBounds: the answer went past {most} bytes; the suite stopped reading",
    )


def test_an_answer_in_a_coding_not_accepted_is_not_read() -> None:
    reply = _post_to(Coded("zstd"))
    assert (reply.status, reply.error) == (
        None,
        "AnswerPastBounds: the answer is compressed (zstd) though the suite asked for "
        "Accept-Encoding: gzip, deflate; the suite did not read it",
    )
