"""The reference engine without vLLM: what it sends, and how vLLM's answers and faults come back.

vLLM is replaced by handlers that answer as vLLM 0.32 does (bodies copied from
reference_impl/VLLM_NOTES.md), served on a loopback socket (tests/support/upstream.py), so
these run everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Iterator

import httpx
import numpy as np
import pytest

from api_server import create_app
from contract import InferenceUnavailable, encode_tensor, spec
from reference_impl.__main__ import api_config
from reference_impl.deployment import DeploymentError, deployment_models
from reference_impl.engine import VllmEngine
from reference_impl.upstream import STEERING_SALT, upstream_body
from tests.support.contract import CONTRACT
from tests.support.upstream import closed_port
from tests.support.vllm_stream import (
    AUTH,
    BODY,
    KEY,
    MODEL,
    SKY,
    ApiClient,
    Upstream,
    api,
    content,
    events,
    sse,
    streamed,
    usage,
)

# -- what the API sends vLLM ---------------------------------------------------------------


def test_explicit_max_tokens_and_every_spec_default() -> None:
    req = CONTRACT.validate_completion({"model": MODEL, "prompt": "The sky is", "stream": True})
    body = upstream_body(dataclasses.replace(req, max_tokens=7), "served", spec())
    props = spec().schema("CompletionRequest")["properties"]
    defaults = {k: p["x-default"] for k, p in props.items() if "x-default" in p}
    assert body["max_tokens"] == 7 and body["model"] == "served"
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "n",
        "min_tokens",
        "ignore_eos",
        "skip_special_tokens",
    ):
        assert body[name] == defaults[name], name
    assert body["prompt"] == [128000, 791, 13180, 374]  # the ids the core counted
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["return_token_ids"] is True
    assert "add_special_tokens" not in body and "vllm_xargs" not in body
    plain = upstream_body(
        CONTRACT.validate_completion({"model": MODEL, "prompt": "x", "max_tokens": 1}),
        MODEL,
        spec(),
    )
    assert plain["stream"] is False and "stream_options" not in plain  # one request, one answer


def test_only_spec_fields_and_vllm_xargs_go_to_vllm() -> None:
    hidden = spec().models[MODEL].hidden_size
    vector = {
        "activations": encode_tensor(np.zeros((1, hidden), np.float32), "torch.float32"),
        "layer_indices": [0],
        "scale": None,
    }
    req = CONTRACT.validate_completion(
        {
            "model": MODEL,
            "prompt": [[1, 2], [3]],
            "n": 2,
            "max_tokens": 3,
            "temperature": 0.5,
            "priority": "-3",
            "user": "u" * 100,
            "truncate_prompt_tokens": 1,
            "prompt_logprobs": 2,
        }
    )
    body = upstream_body(req, MODEL, spec())
    allowed = set(spec().schema("CompletionRequest")["properties"]) | {"vllm_xargs"}
    assert set(body) <= allowed
    assert body["prompt"] == [[2], [3]] and body["priority"] == -3 and "user" not in body
    assert (
        body["stream"] is False and "stream_options" not in body
    )  # prompt_logprobs: vLLM streams none
    assert "truncate_prompt_tokens" not in body  # applied by the core already
    lens = CONTRACT.validate_completion(
        {
            "model": MODEL,
            "prompt": "x",
            "max_tokens": 1,
            "output_residual_stream": [3, 1],
            "apply_steering_vectors": [vector],
        }
    )
    xargs = upstream_body(lens, MODEL, spec())["vllm_xargs"]
    assert xargs["output_residual_stream"] == [3, 1]
    (sent,) = json.loads(xargs["apply_steering_vectors"])  # vllm-lens reads a JSON string
    assert sent["scale"] == 1 and sent["norm_match"] is False and "position_indices" not in sent


def test_a_steered_request_is_salted_by_its_steering_and_no_other_is() -> None:
    """vLLM's block hash holds the salt, never the steering: so steering picks the salt."""
    hidden = spec().models[MODEL].hidden_size

    def body(values: float | None, capture: bool = False, **kw: bool) -> dict:
        fields: dict = {"output_residual_stream": [0]} if capture else {}
        if values is not None:
            tensor = encode_tensor(np.full((1, hidden), values, np.float32), "torch.float32")
            fields["apply_steering_vectors"] = [{"activations": tensor, "layer_indices": [1]}]
        req = CONTRACT.validate_completion(
            {"model": MODEL, "prompt": "x", "max_tokens": 1, **fields}
        )
        return upstream_body(req, MODEL, spec(), **kw)

    one, again, other = body(1.0)["cache_salt"], body(1.0)["cache_salt"], body(2.0)["cache_salt"]
    assert one == again != other
    assert one.startswith(STEERING_SALT) and len(one) <= 128 and not set(one) & set("@/\\\x00")
    assert body(1.0, capture=True)["cache_salt"] == one  # a capture changes no block
    assert "cache_salt" not in body(None) and "cache_salt" not in body(None, capture=True)
    assert "cache_salt" not in body(1.0, isolate_steering=False)


def test_the_request_id_is_the_apis() -> None:
    upstream = Upstream(streamed(SKY))
    with api(upstream) as c:
        r = c.post("/v1/completions", json=BODY)
    assert r.status_code == 200
    assert upstream.headers[0]["X-Request-Id"] == r.headers["X-Request-Id"]
    assert r.json()["id"] == "cmpl-" + r.headers["X-Request-Id"][4:]


# -- what comes back ---------------------------------------------------------------------------


def test_a_completion_from_vllms_stream() -> None:
    with api(Upstream(streamed(SKY))) as c:
        r = c.post("/v1/completions", json={**BODY, "model": MODEL})
    body = r.json()
    assert body["model"] == MODEL and body["object"] == "text_completion"
    assert body["choices"] == [
        {
            "index": 0,
            "text": " blue today",
            "logprobs": None,
            "finish_reason": "length",
            "stop_reason": None,
        }
    ]
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert set(body) == {"id", "object", "created", "model", "choices", "usage"}


def test_echo_adds_the_prompt_as_vllm_would() -> None:
    with api(Upstream(streamed(SKY))) as c:
        text = c.post("/v1/completions", json={**BODY, "echo": True}).json()["choices"][0]["text"]
        ids = c.post("/v1/completions", json={**BODY, "prompt": [128000, 791], "echo": True}).json()
    assert text == "The sky is blue today"
    assert (
        ids["choices"][0]["text"] == "<|begin_of_text|>The blue today"
    )  # vLLM decodes special tokens


def test_activations_chunk_and_layers_in_vllms_order() -> None:
    tensor = {
        "data": "KLUv",
        "dtype": "int16",
        "original_dtype": "torch.bfloat16",
        "shape": [2, 5, 4096],
        "compression": "zstd",
    }
    body = sse(
        content(0, "x", [1], "length"), usage(4, 1), {"activations": {"residual_stream": tensor}}
    )
    with api(Upstream(streamed(body))) as c:
        r = c.post(
            "/v1/completions",
            json={
                **BODY,
                "max_tokens": 1,
                "output_residual_stream": [5, 2],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        )
    kinds = events(r.text)
    assert kinds[-1] == "[DONE]" and kinds[-2]["activations"] == {
        "layers": [2, 5],
        "residual_stream": tensor,
    }
    assert "usage" in kinds[-3]


def test_vllms_400_keeps_its_message_with_the_public_param() -> None:
    answers = {
        "oov": (
            {
                "error": {
                    "message": "Token id 128256 is out of vocabulary",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                }
            },
            ("invalid_request", None),
        ),
        "pydantic": (
            {
                "error": {
                    "message": "1 validation error",
                    "type": "BadRequestError",
                    "param": "body.prompt.1",
                    "code": 400,
                }
            },
            ("invalid_request", "prompt"),
        ),
        "context": (
            {
                "error": {
                    "message": "This model's maximum context length is 2048 tokens. However, your "
                    "prompt contains 2100 input tokens. (parameter=input_tokens, value=2100)",
                    "type": "BadRequestError",
                    "param": "input_tokens",
                    "code": 400,
                }
            },
            ("context_length_exceeded", "prompt"),
        ),
    }
    for name, (payload, (code, param)) in answers.items():
        with api(Upstream(lambda r, p=payload: httpx.Response(400, json=p))) as c:
            error = c.post("/v1/completions", json=BODY).json()["error"]
        assert (error["code"], error["param"]) == (code, param), name
        assert error["message"] == payload["error"]["message"].split(" (parameter=")[0], name


@pytest.mark.parametrize(
    "answer",
    [
        lambda r: httpx.Response(
            500,
            json={
                "error": {
                    "message": "EngineCore died",
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            },
        ),
        lambda r: httpx.Response(
            404,
            json={
                "error": {
                    "message": "The model `x` does not exist.",
                    "type": "NotFoundError",
                    "param": "model",
                    "code": 404,
                }
            },
        ),
        lambda r: httpx.Response(200, content=b"<html>proxy</html>"),
    ],
)
def test_vllm_failing_is_503_and_its_words_stay_in_the_log(
    answer: Callable[[httpx.Request], httpx.Response],
) -> None:
    with api(answer) as c:
        r = c.post("/v1/completions", json=BODY)
    assert r.status_code == 503
    assert r.json()["error"] == {
        "message": spec().messages["inference_unavailable"],
        "type": "api_error",
        "param": None,
        "code": "inference_unavailable",
    }


def test_a_stream_that_vllm_cuts_off_ends_with_a_503_event() -> None:
    with api(streamed(sse(content(0, " blue", [6437]), done=False))) as c:
        got = events(c.post("/v1/completions", json={**BODY, "stream": True}).text)
    assert got[0]["choices"][0]["text"] == " blue"
    assert got[1]["error"]["code"] == "inference_unavailable" and got[2] == "[DONE]"


def test_the_reference_ignores_the_mocks_headers() -> None:
    """reference_impl's app has no fault hook: the X-Mock-* headers mean nothing there."""
    with ApiClient(streamed(SKY), api_config(KEY)) as c:
        r = c.post("/v1/completions", json=BODY, headers={"X-Mock-Status": "503"})
        stream = c.post(
            "/v1/completions",
            json={**BODY, "stream": True},
            headers={"X-Mock-Stream-Error-After": "0"},
        )
    assert (r.status_code, r.json()["choices"][0]["text"]) == (200, " blue today")
    assert (
        stream.status_code == 200
        and "error" not in stream.text
        and events(stream.text)[-1] == "[DONE]"
    )


def test_vllm_down_is_503() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with api(refuse) as c:
        assert (
            c.post("/v1/completions", json=BODY).json()["error"]["code"] == "inference_unavailable"
        )
        stream = c.post("/v1/completions", json={**BODY, "stream": True})
    # before the first event, a stream's failure is the HTTP error, with its status
    assert (stream.status_code, stream.json()["error"]["code"]) == (503, "inference_unavailable")
    # Retry-After, with the spec's value (x-error-codes, components/headers)
    assert (
        stream.headers["Retry-After"]
        == spec().error_headers("inference_unavailable")["Retry-After"]
    )


def test_vllm_on_a_closed_port_is_503_with_the_apis_body_stream_or_not() -> None:
    """A real connection refused (nothing listens on the port): 503 inference_unavailable,
    the API's whole body and X-Request-Id, for a stream too (no 200 with an error event)."""
    engine = VllmEngine(f"http://127.0.0.1:{closed_port()}", MODEL, api=spec())
    app = create_app(api_config(KEY), engine)
    expected = InferenceUnavailable.from_template("inference_unavailable")
    try:
        with httpx.Client(
            transport=httpx.WSGITransport(app=app), base_url="http://api.test", headers=AUTH
        ) as c:
            for stream in (False, True):
                r = c.post("/v1/completions", json={**BODY, "stream": stream})
                assert (r.status_code, r.headers["content-type"]) == (503, "application/json"), (
                    stream
                )
                assert r.json() == CONTRACT.errors.body(expected, r.headers["X-Request-Id"])
    finally:
        engine.close()


def test_no_answer_within_the_wait_is_504() -> None:
    def silent(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with api(silent, wait_seconds=2) as c:
        r = c.post("/v1/completions", json=BODY)
        stream = c.post("/v1/completions", json={**BODY, "stream": True})
    assert r.status_code == 504
    assert r.json()["error"]["message"] == spec().messages["deadline_exceeded"].format(seconds=2)
    # This fake times out at once, before the first event, so the stream gets the HTTP error
    # too (a real wait passes keepalive intervals first: then it is an error event).
    assert (stream.status_code, stream.json()["error"]) == (r.status_code, r.json()["error"])


def test_an_error_in_vllms_stream_becomes_the_apis_error_event() -> None:
    body = sse(
        content(0, " blue", [6437]),
        {
            "error": {
                "message": "Expecting value: line 1 column 1 (char 0)",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        },
    )
    with api(Upstream(streamed(body))) as c:
        got = events(c.post("/v1/completions", json={**BODY, "stream": True}).text)
    assert got[0]["choices"][0]["text"] == " blue"
    assert got[1]["error"]["code"] == "invalid_request" and got[1]["request_id"].startswith("req_")
    assert got[2] == "[DONE]" and len(got) == 3


# -- streams: keepalive and a client that goes away ----------------------------------------------


class SlowStream(httpx.SyncByteStream):
    """vLLM streaming one chunk every `pause` seconds; records when it is closed."""

    def __init__(self, chunks: list[bytes], pause: float) -> None:
        self.chunks, self.pause = chunks, pause
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            if self.closed.wait(self.pause):
                return
            yield chunk

    def close(self) -> None:
        self.closed.set()


def test_keepalive_while_vllm_is_quiet() -> None:
    stream = SlowStream([sse(content(0, " blue", [6437], "length"), usage(4, 1))], pause=0.5)
    with api(lambda r: httpx.Response(200, stream=stream), keepalive_seconds=0.1) as c:
        text = c.post("/v1/completions", json={**BODY, "stream": True}).text
    assert text.startswith(": keepalive\n\n") and text.endswith("data: [DONE]\n\n")


def test_a_client_that_goes_away_closes_the_vllm_request() -> None:
    chunks = [sse(content(0, f" t{i}", [i]), done=False) for i in range(1000)]
    stream = SlowStream(chunks, pause=0.01)
    with api(lambda r: httpx.Response(200, stream=stream)) as c:
        with c.stream(
            "POST", "/v1/completions", json={**BODY, "max_tokens": 1000, "stream": True}
        ) as r:
            next(r.iter_lines())
    assert stream.closed.wait(5), "the engine kept reading vLLM after the client left"


# -- the deployment's model ---------------------------------------------------------------------


def test_the_deployments_numbers_replace_the_specs() -> None:
    config = {
        "num_hidden_layers": 4,
        "hidden_size": 128,
        "vocab_size": spec().models[MODEL].vocab_size,
    }
    info = deployment_models(MODEL, 4096, config, spec())[MODEL]
    assert (info.num_layers, info.hidden_size, info.max_model_len) == (4, 128, 4096)
    assert info.capture_cap == spec().caps["capture_elements"] // 128
    with pytest.raises(DeploymentError):
        deployment_models(MODEL, 4096, {**config, "vocab_size": config["vocab_size"] - 1}, spec())
    with pytest.raises(DeploymentError):
        deployment_models("no-such-model", 4096, None, spec())


def test_requests_are_checked_against_the_deployments_model() -> None:
    models = deployment_models(
        MODEL,
        4096,
        {"num_hidden_layers": 4, "hidden_size": 128, "vocab_size": spec().models[MODEL].vocab_size},
        spec(),
    )
    upstream = Upstream(streamed(SKY))
    with ApiClient(upstream, models=models) as c:
        error = c.post("/v1/completions", json={**BODY, "output_residual_stream": [4]}).json()[
            "error"
        ]
        listed = c.get("/v1/models").json()["data"]
    assert (
        error["param"] == "output_residual_stream" and "the model has 4 layers" in error["message"]
    )
    assert [(m["id"], m["max_model_len"], m["num_layers"], m["hidden_size"]) for m in listed] == [
        (MODEL, 4096, 4, 128)
    ]
    assert upstream.sent == []
