"""A client developer's tests of timeouts and retries, each run the same way in process
(mock_server.testing's transports, sync and async) and against the live `acs_mock` (issue 44,
points 1 and 3): a read timeout fires where a socket's would, and X-Mock-Fail-First scopes every
fault of the mock's headers to the first attempts, so that "the first try fails, the retry
succeeds" holds for a stalled, dropped or slow answer as for a forced status."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from contract import spec
from mock_server.hook.faults import DROP_AFTER, FAIL_FIRST, FAIL_KEY, STALL_AFTER, STALL_MS, TTFT_MS
from mock_server.testing import BASE_URL, LiveMock, acs_mock, async_transport, transport

__all__ = ["acs_mock"]

MODEL = spec().default_model
REQUEST = {"model": MODEL, "prompt": "Once", "max_tokens": 6, "seed": 3}
SLOW_MS = "3000"  # a stall or first token far past the client's timeout
TIMEOUT_S = 0.5
Where = Callable[..., Any]


@contextmanager
def sync_client(where: str, live: LiveMock, **options: Any) -> Iterator[OpenAI]:
    if where == "live":
        with OpenAI(base_url=live.base_url, api_key="k", **options) as client:
            yield client
        return
    with httpx.Client(transport=transport()) as http:
        yield OpenAI(base_url=BASE_URL, api_key="k", http_client=http, **options)


def streamed(client: OpenAI, headers: dict[str, str]) -> str:
    chunks = client.completions.create(**REQUEST, stream=True, extra_headers=headers)
    return "".join(c.choices[0].text for c in chunks)


@pytest.fixture(scope="module")
def plain_text(acs_mock: LiveMock) -> str:
    with OpenAI(base_url=acs_mock.base_url, api_key="k", max_retries=0) as client:
        return str(client.completions.create(**REQUEST).choices[0].text)


WHERE = ["in process", "live"]


@pytest.mark.parametrize("where", WHERE)
def test_a_stalled_stream_times_out_at_the_clients_read_timeout(
    where: str, acs_mock: LiveMock
) -> None:
    headers = {STALL_AFTER: "1", STALL_MS: SLOW_MS}
    with sync_client(where, acs_mock, timeout=TIMEOUT_S, max_retries=0) as client:
        with pytest.raises(openai.APITimeoutError):
            streamed(client, headers)
        # the same stream with a timeout past the stall completes
        assert streamed(client.with_options(timeout=10.0), {STALL_AFTER: "1", STALL_MS: "600"})


@pytest.mark.parametrize("where", WHERE)
def test_a_slow_first_token_times_out_without_stream(where: str, acs_mock: LiveMock) -> None:
    with sync_client(where, acs_mock, timeout=TIMEOUT_S, max_retries=0) as client:
        with pytest.raises(openai.APITimeoutError):
            client.completions.create(**REQUEST, extra_headers={TTFT_MS: SLOW_MS})


@pytest.mark.parametrize("where", WHERE)
def test_the_sdk_retries_a_timeout_and_the_second_try_is_answered(
    where: str, acs_mock: LiveMock, plain_text: str
) -> None:
    """X-Mock-Fail-First scopes X-Mock-Ttft-Ms: the first try is slow, the SDK's retry is not."""
    key = f"slow-first-{where}"
    headers = {FAIL_FIRST: "1", FAIL_KEY: key, TTFT_MS: SLOW_MS}
    with sync_client(where, acs_mock, timeout=TIMEOUT_S, max_retries=1) as client:
        answer = client.completions.create(**REQUEST, extra_headers=headers)
    assert answer.choices[0].text == plain_text


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("fault", [DROP_AFTER, STALL_AFTER])
def test_the_stream_fails_on_the_first_attempt_and_the_retry_succeeds(
    where: str, fault: str, acs_mock: LiveMock, plain_text: str
) -> None:
    """A client's own retry loop around a stream (the SDK does not retry a started stream),
    with the same headers on every attempt."""
    headers = {FAIL_FIRST: "1", FAIL_KEY: f"{fault}-{where}", fault: "2", STALL_MS: SLOW_MS}
    if fault == DROP_AFTER:
        del headers[STALL_MS]
    errors: list[type[Exception]] = []
    with sync_client(where, acs_mock, timeout=TIMEOUT_S, max_retries=0) as client:
        for _ in range(3):
            try:
                text = streamed(client, headers)
                break
            except (openai.APIConnectionError, httpx.RemoteProtocolError) as error:
                errors.append(type(error))
    expected = openai.APITimeoutError if fault == STALL_AFTER else openai.APIConnectionError
    assert errors == [expected] and text == plain_text


@pytest.mark.parametrize("where", WHERE)
def test_a_reset_starts_the_counts_anew(where: str, acs_mock: LiveMock) -> None:
    """A session's mock counts by the API key: a test resets the counts instead of inheriting
    the attempts of the tests before it."""
    headers = {FAIL_FIRST: "1"}
    shared = transport()
    reset = acs_mock.reset_fail_counts if where == "live" else shared.reset_fail_counts

    def statuses() -> list[int]:
        got = []
        for _ in range(2):
            try:
                client.completions.create(**REQUEST, extra_headers=headers)
                got.append(200)
            except openai.APIStatusError as error:
                got.append(error.status_code)
        return got

    if where == "live":
        client = OpenAI(base_url=acs_mock.base_url, api_key="reset-test", max_retries=0)
    else:
        client = OpenAI(
            base_url=BASE_URL,
            api_key="reset-test",
            http_client=httpx.Client(transport=shared),
            max_retries=0,
        )
    with client:
        reset()
        first = statuses()
        reset()
        again = statuses()
    assert first == again == [spec().mock_faults["fail_status"], 200]


def test_the_reset_route_answers_204_without_a_key(acs_mock: LiveMock) -> None:
    response = httpx.delete(acs_mock.url + spec().mock_faults["reset_path"])
    assert (response.status_code, response.content) == (204, b"")


def test_the_async_sdk_times_out_in_process_and_live(acs_mock: LiveMock) -> None:
    async def attempt(client: AsyncOpenAI) -> type[Exception] | str:
        try:
            chunks = await client.completions.create(
                **REQUEST, stream=True, extra_headers={STALL_AFTER: "1", STALL_MS: SLOW_MS}
            )
            return "".join([c.choices[0].text async for c in chunks])
        except openai.APIError as error:
            return type(error)

    async def run() -> list[type[Exception] | str]:
        async with httpx.AsyncClient(transport=async_transport()) as http:
            local = AsyncOpenAI(
                base_url=BASE_URL, api_key="k", http_client=http, timeout=TIMEOUT_S, max_retries=0
            )
            live = AsyncOpenAI(
                base_url=acs_mock.base_url, api_key="k", timeout=TIMEOUT_S, max_retries=0
            )
            async with live:
                return [await attempt(local), await attempt(live)]

    assert asyncio.run(run()) == [openai.APITimeoutError, openai.APITimeoutError]
