"""The mock's faults for a client's own tests (issue 32), through a real server of two
workers and the openai SDK: fail the first N then succeed, a chosen Retry-After, a chosen
stream error code, a stall with nothing sent, and a dropped connection."""

from __future__ import annotations

import uuid

import httpx
import openai
import pytest
from openai import OpenAI

from conformance.wire.sse import parse_text
from contract import spec
from mock_server.hook.faults import (
    DROP_AFTER,
    FAIL_FIRST,
    FAIL_KEY,
    RETRY_AFTER,
    STALL_AFTER,
    STALL_MS,
    STATUS,
    STREAM_ERROR_AFTER,
    STREAM_ERROR_CODE,
    TPOT_MS,
    TTFT_MS,
    stream_error_codes,
)
from mock_server.testing import URL, transport
from tests.support.mock import AUTH, KEEPALIVE_S, KEY

MODEL = spec().default_model
FAULTS = spec().mock_faults
BODY = {"model": MODEL, "prompt": "x", "max_tokens": 6, "ignore_eos": True}


def fresh() -> str:
    return uuid.uuid4().hex  # a count of its own: the session's server outlives each test


def sdk(url: str, retries: int) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=retries)


def test_fail_first_two_then_the_sdks_third_try_succeeds(mock_url: str) -> None:
    headers = {FAIL_FIRST: "2", FAIL_KEY: fresh(), RETRY_AFTER: "0"}
    with sdk(mock_url, 2) as client:
        raw = client.completions.with_raw_response.create(
            model=MODEL,
            prompt="x",
            max_tokens=2,
            extra_headers=headers,
            extra_body={"ignore_eos": True},  # the end of text, drawn now and then, never ends it
        )
    assert raw.retries_taken == 2 and raw.parse().choices[0].finish_reason == "length"


def test_fail_first_counts_each_key_across_the_workers(mock_url: str) -> None:
    """Requests of one key land on both workers (a connection each); the count is the server's."""
    key, other = fresh(), fresh()
    statuses = []
    for _ in range(6):
        with httpx.Client(
            base_url=mock_url, headers=AUTH, timeout=30
        ) as client:  # a new connection each
            statuses.append(
                client.post(
                    "/v1/completions", json=BODY, headers={FAIL_FIRST: "3", FAIL_KEY: key}
                ).status_code
            )
    assert statuses == [FAULTS["fail_status"]] * 3 + [200] * 3
    with httpx.Client(base_url=mock_url, headers=AUTH, timeout=30) as client:
        assert (
            client.post(
                "/v1/completions", json=BODY, headers={FAIL_FIRST: "1", FAIL_KEY: other}
            ).status_code
            == FAULTS["fail_status"]
        )
        status = FAULTS["statuses"][0]
        forced = client.post(
            "/v1/completions",
            json=BODY,
            headers={FAIL_FIRST: "1", STATUS: str(status), FAIL_KEY: fresh()},
        )
        assert forced.status_code == status != FAULTS["fail_status"]
        assert forced.json()["error"]["code"] == next(
            c for c, v in spec().error_codes.items() if v["status"] == status
        )


def test_retry_after_is_the_one_asked_for_and_the_apis_without(mock_http: httpx.Client) -> None:
    asked = mock_http.post("/v1/completions", json=BODY, headers={STATUS: "503", RETRY_AFTER: "1"})
    plain = mock_http.post("/v1/completions", json=BODY, headers={STATUS: "503"})
    assert (asked.status_code, asked.headers["Retry-After"]) == (503, "1")
    assert (
        plain.headers["Retry-After"] == spec().error_headers("inference_unavailable")["Retry-After"]
    )
    assert asked.json()["error"] == plain.json()["error"]


def test_the_stream_error_code_is_the_one_asked_for(mock_url: str) -> None:
    for code in stream_error_codes(spec()):
        with sdk(mock_url, 0) as client:
            stream = client.completions.create(
                model=MODEL,
                prompt="x",
                max_tokens=6,
                stream=True,
                extra_body={"ignore_eos": True},
                extra_headers={STREAM_ERROR_AFTER: "1", STREAM_ERROR_CODE: code},
            )
            texts = []
            with pytest.raises(openai.APIError) as info:
                for chunk in stream:
                    texts.append(chunk.choices[0].text)
        assert (len(texts), info.value.code) == (1, code)


def test_a_stall_sends_nothing_so_a_read_timeout_fires(mock_url: str) -> None:
    """Stalled past two keepalive intervals: no keepalive comes, so a read timeout of one fires."""
    headers = {**AUTH, STALL_AFTER: "2", STALL_MS: str(int(4 * KEEPALIVE_S * 1000))}
    timeout = httpx.Timeout(30, read=1.5 * KEEPALIVE_S)
    lines: list[str] = []
    with httpx.Client(base_url=mock_url, timeout=timeout) as client:
        with client.stream(
            "POST", "/v1/completions", json={**BODY, "stream": True}, headers=headers
        ) as reply:
            with pytest.raises(httpx.ReadTimeout):
                for line in reply.iter_lines():
                    lines.append(line)
    assert [event.kind for event in parse_text("\n".join(lines)).events] == ["content", "content"]


def test_a_stall_then_goes_on_to_the_end(mock_http: httpx.Client) -> None:
    reply = mock_http.post(
        "/v1/completions",
        json={**BODY, "stream": True},
        headers={STALL_AFTER: "1", STALL_MS: "200"},
    )
    assert reply.status_code == 200 and reply.text.endswith("data: [DONE]\n\n")
    assert reply.text.count("data: {") == BODY["max_tokens"]


def test_a_dropped_stream_ends_without_done_and_the_sdk_raises(mock_url: str) -> None:
    with sdk(mock_url, 0) as client:
        stream = client.completions.create(
            model=MODEL,
            prompt="x",
            max_tokens=6,
            stream=True,
            extra_body={"ignore_eos": True},
            extra_headers={DROP_AFTER: "2"},
        )
        texts = []
        with pytest.raises(openai.APIConnectionError) as info:
            for chunk in stream:
                texts.append(chunk.choices[0].text)
    # the chunked body cut off mid-way, as when a server dies: not an error event
    assert len(texts) == 2 and "incomplete chunked read" in str(info.value.__cause__)


def test_the_server_goes_on_after_drops_and_stalls(mock_http: httpx.Client) -> None:
    for header in (DROP_AFTER, STALL_AFTER):
        try:
            mock_http.post(
                "/v1/completions",
                json={**BODY, "stream": True},
                headers={header: "0", STALL_MS: "100"},
            )
        except httpx.RemoteProtocolError:
            pass
    assert mock_http.post("/v1/completions", json=BODY).status_code == 200


def invalid(header: str, expected: str) -> str:
    text = FAULTS["expected"][expected].format(
        statuses=", ".join(map(str, FAULTS["statuses"])),
        codes=", ".join(stream_error_codes(spec())),
        max_retry_after=FAULTS["max_retry_after"],
        max_stall_ms=FAULTS["max_stall_ms"],
    )
    return FAULTS["invalid_header"].format(header=header, expected=text)


@pytest.mark.parametrize(
    ("header", "value", "expected"),
    [
        (RETRY_AFTER, str(FAULTS["max_retry_after"] + 1), "seconds"),
        (RETRY_AFTER, "-1", "seconds"),
        (FAIL_FIRST, "two", "count"),
        (STREAM_ERROR_CODE, "invalid_request", "code"),
        (STALL_MS, str(FAULTS["max_stall_ms"] + 1), "stall"),
        (DROP_AFTER, "1.5", "count"),
        # hostile values: each was a 500 (int of 5,000 digits, of "\xb2") or taken ("1_0")
        (STATUS, "9" * 5000, "status"),
        (STATUS, "\xb2".encode("latin-1"), "status"),  # isdigit(), yet not int()
        (STATUS, "+" + str(FAULTS["statuses"][0]), "status"),
        (FAIL_FIRST, "9" * 5000, "count"),
        (FAIL_FIRST, "1_0", "count"),
        (FAIL_FIRST, "+1", "count"),
        (TTFT_MS, "1e3", "milliseconds"),
        (TTFT_MS, "nan", "milliseconds"),
        (TTFT_MS, "9" * 5000, "milliseconds"),
        (TPOT_MS, "1_000", "milliseconds"),
    ],
)
def test_a_bad_value_is_400_saying_what_is_expected(
    mock_http: httpx.Client, header: str, value: str | bytes, expected: str
) -> None:
    headers = (
        {header: value, STALL_AFTER: "1"}
        if header == STALL_MS
        else {header: value, STREAM_ERROR_AFTER: "1"}
        if header == STREAM_ERROR_CODE
        else {header: value}
    )
    reply = mock_http.post("/v1/completions", json={**BODY, "stream": True}, headers=headers)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["message"], error["param"]) == (
        "invalid_request",
        invalid(header, expected),
        None,
    )


def _idle(header: str, why: str) -> str:
    carrying = [s for s in FAULTS["statuses"] if "Retry-After" in spec().error_headers(_code_of(s))]
    return FAULTS["idle_header"].format(
        header=header, why=FAULTS["idle"][why].format(statuses=", ".join(map(str, carrying)))
    )


def _code_of(status: int) -> str:
    return next(c for c, v in spec().error_codes.items() if v["status"] == status)


@pytest.mark.parametrize(
    ("headers", "header", "why"),
    [
        ({RETRY_AFTER: "0"}, RETRY_AFTER, "retry_after"),
        ({STATUS: "500", RETRY_AFTER: "0"}, RETRY_AFTER, "retry_after"),
        ({STATUS: "504", RETRY_AFTER: "1"}, RETRY_AFTER, "retry_after"),
        ({STREAM_ERROR_CODE: "internal_error"}, STREAM_ERROR_CODE, "stream_error_code"),
    ],
)
def test_a_header_that_would_change_nothing_is_400_saying_why(
    mock_http: httpx.Client, headers: dict[str, str], header: str, why: str
) -> None:
    """Issue 44: X-Mock-Retry-After without a forced status that carries Retry-After, and
    X-Mock-Stream-Error-Code without X-Mock-Stream-Error-After, did nothing, silently; like a
    typo they now fail the test that sent them."""
    reply = mock_http.post("/v1/completions", json={**BODY, "stream": True}, headers=headers)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["message"], error["param"]) == (
        "invalid_request",
        _idle(header, why),
        None,
    )


def test_retry_after_on_the_statuses_that_carry_it_is_taken() -> None:
    """The same header where it applies: X-Mock-Status 503, and X-Mock-Fail-First's 503."""
    with httpx.Client(transport=transport(), base_url=URL) as client:
        for headers in ({STATUS: "503"}, {FAIL_FIRST: "1", FAIL_KEY: fresh()}):
            reply = client.post(
                "/v1/completions", json=BODY, headers={**AUTH, **headers, RETRY_AFTER: "7"}
            )
            assert (reply.status_code, reply.headers["Retry-After"]) == (503, "7")


def test_a_fault_at_the_streams_end_happens_after_its_last_token_and_one_past_it_is_refused() -> (
    None
):
    """Issue 55, item 6: a drop or error asked after as many deltas as the stream has happens
    after the last one, before [DONE] (a drop: no [DONE]; an error: its event); a count past
    the most deltas the stream can have (max_tokens x n x prompts) changes nothing and is refused."""
    body = {**BODY, "stream": True, "n": 2}
    most = BODY["max_tokens"] * 2
    with httpx.Client(transport=transport(), base_url=URL, headers=AUTH) as http:
        with (
            pytest.raises(httpx.RemoteProtocolError),
            http.stream(
                "POST", "/v1/completions", json=body, headers={DROP_AFTER: str(most)}
            ) as reply,
        ):
            got = []
            for line in reply.iter_lines():
                got.append(line)
        events = parse_text("\n".join(got) + "\n").events
        assert [e.kind for e in events].count("content") == most and "[DONE]" not in got
        errored = http.post(
            "/v1/completions", json=body, headers={STREAM_ERROR_AFTER: str(most)}
        ).text
        kinds = [e.kind for e in parse_text(errored).events]
        assert kinds[-2:] == ["error", "done"] and kinds.count("content") == most
        for header in (DROP_AFTER, STREAM_ERROR_AFTER, STALL_AFTER):
            refused = http.post("/v1/completions", json=body, headers={header: str(most + 1)})
            why = FAULTS["idle"]["past_the_end"].format(after=most + 1, deltas=most)
            assert (refused.status_code, refused.json()["error"]["message"]) == (
                400,
                FAULTS["idle_header"].format(header=header, why=why),
            )
