"""The official openai SDK, sync and async, as a client developer would use it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from contract import ApiError, spec
from mock_server import MockConfig, create_app
from mock_server.hook.faults import STATUS, STREAM_ERROR_AFTER
from tests.support.contract import CONTRACT
from tests.support.mock import KEY

MODEL = spec().default_model


@pytest.fixture()
def client(mock_url: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=mock_url + "/v1", api_key=KEY, max_retries=0) as c:
        yield c


def test_create(client: OpenAI) -> None:
    c = client.completions.create(
        model=MODEL, prompt="The sky is", max_tokens=8, seed=1, logprobs=2
    )
    assert c.object == "text_completion" and c.model == MODEL
    assert len(c.choices) == 1 and c.choices[0].finish_reason in ("stop", "length")
    assert c.choices[0].logprobs is not None
    assert "".join(c.choices[0].logprobs.tokens or []) == c.choices[0].text
    assert (
        c.usage is not None
        and c.usage.total_tokens == c.usage.prompt_tokens + c.usage.completion_tokens
    )


def test_vllm_and_lens_fields_through_extra_body(client: OpenAI) -> None:
    c = client.completions.create(
        model=MODEL,
        prompt="The sky is",
        max_tokens=6,
        seed=3,
        extra_body={
            "return_token_ids": True,
            "min_tokens": 6,
            "ignore_eos": True,
            "top_k": 40,
            "prompt_logprobs": 1,
            "output_residual_stream": [0, 1],
        },
    )
    extra: dict[str, Any] = c.model_extra or {}
    choice = c.choices[0].model_extra or {}
    assert (
        len(choice["token_ids"]) == 6
        and choice["prompt_token_ids"][0] == spec().models[MODEL].bos_token_id
    )
    assert choice["prompt_logprobs"][0] is None
    assert extra["activations"]["layers"] == [0, 1]
    assert extra["activations"]["residual_stream"]["shape"][0] == 2


def test_stream(client: OpenAI) -> None:
    whole = client.completions.create(model=MODEL, prompt="Once", max_tokens=10, seed=9)
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt="Once",
            max_tokens=10,
            seed=9,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def expected(body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as info:
        CONTRACT.validate_completion(body)
    return info.value


@pytest.mark.parametrize(
    "fields,sdk_class",
    [
        ({"max_tokens": "2"}, openai.BadRequestError),
        ({"model": "nope"}, openai.NotFoundError),
        ({"max_tokens": 16001, "n": 2}, openai.BadRequestError),
    ],
)
def test_errors_are_the_sdks_own_classes(
    client: OpenAI, fields: dict[str, Any], sdk_class: type
) -> None:
    body = {"model": MODEL, "prompt": "The sky is", "max_tokens": 4, **fields}
    want = expected(body)
    with pytest.raises(sdk_class) as info:
        client.completions.create(
            **{k: v for k, v in body.items() if k in ("model", "prompt", "n")},
            max_tokens=body["max_tokens"],
        )
    e = info.value
    errors = CONTRACT.errors
    assert (e.status_code, e.code, e.param, e.type) == (
        errors.status(want),
        want.code,
        want.param,
        errors.type(want),
    )
    assert (
        e.body == CONTRACT.errors.body(want, e.request_id)["error"]
    )  # the SDK keeps the error object
    assert e.request_id is not None and CONTRACT.errors.message(want) in e.message


def test_a_bad_key_is_authentication_error(mock_url: str) -> None:
    with OpenAI(
        base_url=mock_url + "/v1",
        api_key=KEY,
        max_retries=0,
        default_headers={"Authorization": "Basic not-bearer"},
    ) as c:
        with pytest.raises(openai.AuthenticationError) as info:
            c.completions.create(model=MODEL, prompt="x", max_tokens=1)
    assert info.value.code == "invalid_api_key" and info.value.request_id


def sdk_class(status: int) -> type:
    """The SDK's class for a status (openai._client: 429 RateLimitError, 5xx InternalServerError)."""
    return (
        openai.RateLimitError if status == 429 else openai.InternalServerError
    )  # the SDK's own rule


@pytest.mark.parametrize("status", spec().mock_faults["statuses"])
def test_forced_statuses(client: OpenAI, status: int) -> None:
    with pytest.raises(sdk_class(status)) as info:
        client.completions.create(
            model=MODEL, prompt="x", max_tokens=1, extra_headers={STATUS: str(status)}
        )
    code = next(c for c, v in spec().error_codes.items() if v["status"] == status)
    assert (info.value.status_code, info.value.code) == (status, code)
    assert info.value.request_id and info.value.request_id.startswith(spec().request_id["prefix"])


def test_a_stream_error_raises_the_sdks_api_error(client: OpenAI) -> None:
    stream = client.completions.create(
        model=MODEL,
        prompt="x",
        max_tokens=50,
        stream=True,
        extra_body={"ignore_eos": True},
        extra_headers={STREAM_ERROR_AFTER: "2"},
    )
    texts = []
    with pytest.raises(openai.APIError) as info:
        for chunk in stream:
            texts.append(chunk.choices[0].text)
    assert len(texts) == 2
    assert info.value.code == spec().mock_faults["stream_error_code"]


def test_async_client(mock_url: str) -> None:
    quota = spec().error_codes["insufficient_quota"]["status"]

    async def main() -> tuple[list[str], str, int]:
        async with AsyncOpenAI(base_url=mock_url + "/v1", api_key=KEY, max_retries=0) as c:
            results = await asyncio.gather(
                *[
                    c.completions.create(model=MODEL, prompt="The sky is", max_tokens=5, seed=s)
                    for s in range(4)
                ]
            )
            stream = await c.completions.create(
                model=MODEL, prompt="The sky is", max_tokens=5, seed=0, stream=True
            )
            text = "".join([chunk.choices[0].text async for chunk in stream])
            try:
                await c.completions.create(
                    model=MODEL, prompt="x", max_tokens=1, extra_headers={STATUS: str(quota)}
                )
            except openai.RateLimitError as e:
                status = e.status_code
            return [r.choices[0].text for r in results], text, status

    texts, streamed, status = asyncio.run(main())
    assert streamed == texts[0] and status == quota


# -- retries: a spent Budget is not worth retrying ----------------------------------------------


def _attempts_on_a_spent_budget(
    tmp_path: Any, app_wrapper: Any = None
) -> tuple[int, openai.APIStatusError]:
    """Requests the SDK, with its default retry settings, sends for one call that the Budget
    cannot hold (the mock in process, through a real httpx transport)."""
    app = create_app(MockConfig(budget_tokens=1, budget_dir=str(tmp_path)))
    sent: list[httpx.Request] = []
    transport = httpx.WSGITransport(app=app_wrapper(app) if app_wrapper else app)
    with httpx.Client(transport=transport, event_hooks={"request": [sent.append]}) as http:
        with OpenAI(base_url="http://mock.test/v1", api_key=KEY, http_client=http) as c:
            with pytest.raises(openai.RateLimitError) as info:
                c.completions.create(model=MODEL, prompt="The sky is", max_tokens=4)
    return len(sent), info.value


def test_the_sdk_does_not_retry_insufficient_quota(tmp_path: Any) -> None:
    attempts, error = _attempts_on_a_spent_budget(tmp_path)
    assert (attempts, error.code) == (1, "insufficient_quota")
    assert (
        error.response.headers["x-should-retry"]
        == spec().error_headers("insufficient_quota")["x-should-retry"]
    )


def test_without_x_should_retry_the_sdk_would_retry_it(tmp_path: Any) -> None:
    """The header is what stops the SDK: without it, the same 429 is sent 1 + max_retries times."""

    def strip(app: Any) -> Any:
        def wsgi(environ: Any, start_response: Any) -> Any:
            def start(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
                return start_response(
                    status, [h for h in headers if h[0].lower() != "x-should-retry"], *exc
                )

            return app(environ, start)

        return wsgi

    attempts, error = _attempts_on_a_spent_budget(tmp_path, strip)
    assert (attempts, error.code) == (1 + openai.DEFAULT_MAX_RETRIES, "insufficient_quota")
