"""The app's edge through Flask's test client: every error in the API's shape,
X-Request-Id on every response, config, faults and the Budget's headers."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

import api_server
from api_server import Engine, ServerConfig
from api_server.config import ConfigError
from api_server.responses import KEEPALIVE
from api_server.state import state_of
from conformance.engine.shapes import schema_errors
from contract import ApiError, InferenceUnavailable, InternalError, hold, spec
from gallery.engines import BrokenEngine, BrokenFakeEngine, GatedEngine
from mock_server import MockConfig, create_app
from mock_server.engine.fake_engine import FakeEngine
from mock_server.hook.faults import STATUS, STREAM_ERROR_AFTER, TPOT_MS, TTFT_MS
from tests.support.contract import CONTRACT
from tests.support.mock import AUTH, completion_body, parse_sse

RID = re.compile(rf"{spec().request_id['prefix']}[0-9a-f]{{{spec().request_id['hex_digits']}}}")
MODEL = spec().models[spec().default_model]


@pytest.fixture(scope="module")
def app() -> Flask:
    return create_app(MockConfig())


@pytest.fixture()
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def error_of(call: Any) -> ApiError:
    """The error the core raises for `call`, to compare whole bodies against."""
    with pytest.raises(ApiError) as info:
        call()
    return info.value


def assert_error(response: Any, error: ApiError) -> None:
    body = response.get_json()
    assert response.status_code == CONTRACT.errors.status(error)
    assert body == CONTRACT.errors.body(error, body["request_id"])
    assert response.headers["X-Request-Id"] == body["request_id"]
    assert RID.fullmatch(body["request_id"])


def assert_code(response: Any, code: str) -> dict[str, Any]:
    body = response.get_json()
    assert response.status_code == spec().error_codes[code]["status"]
    assert (
        body["error"]["code"] == code and body["error"]["type"] == spec().error_codes[code]["type"]
    )
    assert response.headers["X-Request-Id"] == body["request_id"]
    return body


# -- routes ---------------------------------------------------------------------------
def test_health_needs_no_key(client: FlaskClient) -> None:
    r = client.get("/health")
    assert (r.status_code, r.get_json()) == (200, {"status": "ok"})
    assert RID.fullmatch(r.headers["X-Request-Id"])


def test_models_lists_every_model_with_its_numbers(client: FlaskClient) -> None:
    r = client.get("/v1/models", headers=AUTH)
    body = r.get_json()
    assert body["object"] == "list"
    assert [
        (m["id"], m["object"], m["root"], m["max_model_len"], m["num_layers"], m["hidden_size"])
        for m in body["data"]
    ] == [
        (name, "model", m.hf_id, m.max_model_len, m.num_layers, m.hidden_size)
        for name, m in spec().models.items()
    ]
    assert not schema_errors(body, spec().schema("ModelList"))
    assert RID.fullmatch(r.headers["X-Request-Id"])


def test_a_deployment_max_model_len_is_reported_and_enforced() -> None:
    short = 64
    client = create_app(MockConfig(max_model_len={MODEL.name: short})).test_client()
    assert client.get("/v1/models", headers=AUTH).get_json()["data"][0]["max_model_len"] == short
    body = completion_body(max_tokens=short)
    r = client.post("/v1/completions", json=body, headers=AUTH)
    models = {MODEL.name: dataclasses.replace(MODEL, max_model_len=short)}
    assert_error(r, error_of(lambda: CONTRACT.validate_completion(body, models=models)))


# Werkzeug would answer some of these itself: OPTIONS with an Allow header, a doubled
# slash with a redirect to the merged path; the spec knows neither.
@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/v1/nothing"),
        ("GET", "/v1/completions"),
        ("DELETE", "/v1/models"),
        ("POST", "/health"),
        ("PUT", "/v1/chat/completions"),
        ("OPTIONS", "/v1/completions"),
        ("POST", "/v1//completions"),
        ("GET", "/v1//models"),
        ("POST", "/v1/completions/"),
    ],
)
def test_unknown_routes_and_methods_get_the_api_error(
    client: FlaskClient, method: str, path: str
) -> None:
    error = error_of(lambda: CONTRACT.match_route(method, path))
    r = client.open(path, method=method, headers=AUTH)
    assert_error(r, error)
    if r.status_code == 405:
        assert r.headers["Allow"] == ", ".join(error.allow)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer "}, {"Authorization": "Basic x"}]
)
def test_a_missing_or_malformed_key_is_401(client: FlaskClient, headers: dict[str, str]) -> None:
    assert_code(
        client.post("/v1/completions", json=completion_body(), headers=headers), "invalid_api_key"
    )
    assert_code(client.get("/v1/models", headers=headers), "invalid_api_key")


def test_with_keys_configured_only_those_keys_pass() -> None:
    client = create_app(MockConfig(keys=("k1", "k2"))).test_client()
    assert_code(
        client.post("/v1/completions", json=completion_body(), headers=AUTH), "invalid_api_key"
    )
    r = client.post(
        "/v1/completions", json=completion_body(), headers={"Authorization": "Bearer k2"}
    )
    assert r.status_code == 200


def test_without_keys_configured_any_non_empty_key_passes(client: FlaskClient) -> None:
    r = client.post(
        "/v1/completions", json=completion_body(), headers={"Authorization": "Bearer anything"}
    )
    assert r.status_code == 200


def test_chat_is_refused(client: FlaskClient) -> None:
    r = client.post("/v1/chat/completions", json={"messages": []}, headers=AUTH)
    assert r.get_json()["error"]["message"] == spec().messages["chat_refused"]
    assert_code(r, "invalid_request")


def test_a_content_length_over_the_cap_is_413_before_reading(client: FlaskClient) -> None:
    cap = spec().caps["max_body_bytes"]
    r = client.post(
        "/v1/completions",
        data=b"x" * (cap + 1),
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert_code(r, "request_too_large")


def test_media_type_and_json(client: FlaskClient) -> None:
    assert_code(
        client.post("/v1/completions", data="{}", headers={**AUTH, "Content-Type": "text/plain"}),
        "unsupported_media_type",
    )
    for raw in (b"{nope", b"[1]", b'{"a": NaN}', b"\xff\xfe"):
        assert_code(
            client.post(
                "/v1/completions", data=raw, headers={**AUTH, "Content-Type": "application/json"}
            ),
            "invalid_json",
        )


@pytest.mark.parametrize(
    "fields",
    [
        {"max_tokens": "2"},
        {"best_of": 2},
        {"model": "nope"},
        {"max_tokens": 16001, "n": 2},
        {"temperature": 3},
    ],
)
def test_validation_errors_are_the_cores(client: FlaskClient, fields: dict[str, Any]) -> None:
    body = completion_body(**fields)
    assert_error(
        client.post("/v1/completions", json=body, headers=AUTH),
        error_of(lambda: CONTRACT.validate_completion(body)),
    )


# -- the engine's failures ------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "error",
    [RuntimeError("secret internals"), InferenceUnavailable.from_template("inference_unavailable")],
)
def test_an_engine_error_is_an_api_error_without_internals(error: Exception, stream: bool) -> None:
    """Before the engine's first event, a stream too gets the HTTP error, with its status."""
    client = create_app(MockConfig(), engine=BrokenEngine(error)).test_client()
    r = client.post("/v1/completions", json=completion_body(stream=stream), headers=AUTH)
    assert r.mimetype == "application/json"
    expected = (
        error if isinstance(error, ApiError) else InternalError.from_template("internal_error")
    )
    assert_error(r, expected)
    assert "secret" not in r.get_data(as_text=True)


def test_a_stream_that_fails_at_once_settles_its_hold(tmp_path: Any) -> None:
    body = completion_body(stream=True, max_tokens=20)
    prompt_tokens = sum(CONTRACT.validate_completion(body).prompt_token_counts)
    app = create_app(
        MockConfig(budget_tokens=1000, budget_dir=str(tmp_path)),
        engine=BrokenEngine(InferenceUnavailable.from_template("inference_unavailable")),
    )
    r = app.test_client().post("/v1/completions", json=body, headers=AUTH)
    assert_error(r, InferenceUnavailable.from_template("inference_unavailable"))
    assert state_of(app).budget.remaining(AUTH["Authorization"].split()[1]) == 1000 - prompt_tokens


def test_a_slow_first_token_still_gets_its_keepalive_first() -> None:
    """The route waits for the first event at most one keepalive interval: then it answers
    200 and the stream's first write is the keepalive comment, while the engine still waits."""
    engine = GatedEngine()
    client = create_app(MockConfig(keepalive_seconds=0.01), engine=engine).test_client()
    r = client.post(
        "/v1/completions",
        json=completion_body(stream=True, max_tokens=2, ignore_eos=True),
        headers=AUTH,
        buffered=False,
    )
    body = iter(r.response)
    assert (r.status_code, next(body)) == (200, KEEPALIVE)
    engine.go.set()
    rest = b"".join(body).decode()
    r.close()
    stream = parse_sse(rest)
    assert len(stream.chunks) == 2 and stream.events[-1] == "[DONE]"
    assert set(stream.comments) <= {"keepalive"}


def test_an_engine_error_mid_stream_is_an_error_event_then_done() -> None:
    client = create_app(
        MockConfig(), engine=BrokenEngine(RuntimeError("boom"), after=3)
    ).test_client()
    r = client.post(
        "/v1/completions", json=completion_body(stream=True, ignore_eos=True), headers=AUTH
    )
    stream = parse_sse(r.get_data(as_text=True))
    rid = r.headers["X-Request-Id"]
    assert len(stream.chunks) == 3
    assert stream.events[-2:] == [
        CONTRACT.errors.body(InternalError.from_template("internal_error"), rid),
        "[DONE]",
    ]


def test_the_in_thread_engine_fails_at_once_with_an_http_error() -> None:
    error = InferenceUnavailable.from_template("inference_unavailable")
    client = create_app(MockConfig(), engine=BrokenFakeEngine(error)).test_client()
    r = client.post("/v1/completions", json=completion_body(stream=True), headers=AUTH)
    assert_error(r, error)


def test_the_in_thread_engine_fails_mid_stream_with_an_error_event() -> None:
    client = create_app(
        MockConfig(), engine=BrokenFakeEngine(RuntimeError("boom"), after=3)
    ).test_client()
    r = client.post(
        "/v1/completions", json=completion_body(stream=True, ignore_eos=True), headers=AUTH
    )
    stream = parse_sse(r.get_data(as_text=True))
    rid = r.headers["X-Request-Id"]
    assert r.status_code == 200 and len(stream.chunks) == 3
    assert stream.events[-2:] == [
        CONTRACT.errors.body(InternalError.from_template("internal_error"), rid),
        "[DONE]",
    ]


# -- faults ---------------------------------------------------------------------------
@pytest.mark.parametrize("status", spec().mock_faults["statuses"])
def test_x_mock_status_forces_the_status_with_its_code(client: FlaskClient, status: int) -> None:
    r = client.post(
        "/v1/completions", json=completion_body(), headers={**AUTH, STATUS: str(status)}
    )
    code = next(c for c, v in spec().error_codes.items() if v["status"] == status)
    body = assert_code(r, code)
    assert r.status_code == status and body["error"]["param"] is None
    # x-should-retry on 429, Retry-After on 503 (x-error-codes), with the spec's values.
    assert {
        name: r.headers.get(name) for name in spec().error_headers(code)
    } == spec().error_headers(code)
    assert bool(spec().error_headers(code)) == (
        code in ("insufficient_quota", "inference_unavailable")
    )
    # (a forced 429 tells no Budget's count it never kept: issue 55, item 11)
    forced = spec().mock_faults["forced_messages"].get(code)
    if forced is not None:
        assert body["error"]["message"] == forced and "Budget of" not in forced


def test_x_mock_status_comes_after_validation(client: FlaskClient) -> None:
    r = client.post(
        "/v1/completions", json=completion_body(max_tokens="2"), headers={**AUTH, STATUS: "503"}
    )
    assert r.status_code == 400


@pytest.mark.parametrize(
    "header,value,expected",
    [
        (STATUS, "418", "status"),
        (STATUS, "x", "status"),
        (TTFT_MS, "-1", "milliseconds"),
        (TPOT_MS, "nan", "milliseconds"),
        (STREAM_ERROR_AFTER, "1.5", "count"),
    ],
)
def test_a_bad_mock_header_is_400_with_the_specs_message(
    client: FlaskClient, header: str, value: str, expected: str
) -> None:
    faults = spec().mock_faults
    want = faults["invalid_header"].format(
        header=header,
        expected=faults["expected"][expected].format(
            statuses=", ".join(map(str, faults["statuses"]))
        ),
    )
    r = client.post("/v1/completions", json=completion_body(), headers={**AUTH, header: value})
    assert assert_code(r, "invalid_request")["error"]["message"] == want


@pytest.mark.parametrize("header", ["X-Mock-Ttft", "x-mock-stauts", "X-Mock-" + "a" * 300])
def test_an_unknown_mock_header_is_400_naming_it_cut_and_the_ones_the_mock_reads(
    client: FlaskClient, header: str
) -> None:
    """A typo must fail the test that sent it, not pass unread (issue 32)."""
    faults = spec().mock_faults
    known = ", ".join(sorted(spec().mock_headers))
    r = client.post("/v1/completions", json=completion_body(), headers={**AUTH, header: "5"})
    sent = "-".join(w.capitalize() for w in header.split("-"))  # as werkzeug's environ names it
    quoted = CONTRACT.errors.cut(sent)
    assert assert_code(r, "invalid_request")["error"]["message"] == faults["unknown_header"].format(
        header=quoted, known=known
    )
    assert len(quoted) < len(header) or len(header) <= spec().caps["quoted_chars"]


def test_x_mock_stream_error_after(client: FlaskClient) -> None:
    r = client.post(
        "/v1/completions",
        json=completion_body(stream=True, ignore_eos=True),
        headers={**AUTH, STREAM_ERROR_AFTER: "2"},
    )
    stream = parse_sse(r.get_data(as_text=True))
    rid = r.headers["X-Request-Id"]
    assert r.status_code == 200 and len(stream.chunks) == 2
    assert stream.events[-2:] == [
        CONTRACT.errors.body(InferenceUnavailable.from_template("inference_unavailable"), rid),
        "[DONE]",
    ]


@pytest.mark.parametrize(
    "engine",
    [FakeEngine(spec()), BrokenEngine(RuntimeError("never reached"), after=10**6)],
    ids=["in the request's thread", "in a pump"],
)
def test_x_mock_stream_error_after_0_is_the_http_error_before_any_content(engine: Engine) -> None:
    """Issue 44: an error before any content is answered with its status, as the API answers
    every error before a stream's first write; it was a 200 with an error event."""
    client = create_app(MockConfig(), engine=engine).test_client()
    r = client.post(
        "/v1/completions",
        json=completion_body(stream=True, ignore_eos=True),
        headers={**AUTH, STREAM_ERROR_AFTER: "0"},
    )
    error = InferenceUnavailable.from_template("inference_unavailable")
    assert r.status_code == CONTRACT.errors.status(error)
    assert r.get_json() == CONTRACT.errors.body(error, r.headers["X-Request-Id"])


def test_without_the_mocks_hook_the_mock_headers_are_ignored_entirely() -> None:
    """A server of the real API (api_server without a hook, as reference_impl builds it)
    reads none of them: no forced status, no error event, and not even a bad value is
    refused (it is never read)."""
    client = api_server.create_app(
        ServerConfig(), FakeEngine(spec(), spec().models.values())
    ).test_client()
    mock_headers = {STATUS: "503", STREAM_ERROR_AFTER: "0", TTFT_MS: "-1", TPOT_MS: "nan"}
    body = completion_body(max_tokens=3, ignore_eos=True, seed=7)
    plain = client.post("/v1/completions", json=body, headers=AUTH)
    r = client.post("/v1/completions", json=body, headers={**AUTH, **mock_headers})
    assert (r.status_code, r.get_json()["choices"]) == (200, plain.get_json()["choices"])
    r = client.post(
        "/v1/completions", json={**body, "stream": True}, headers={**AUTH, **mock_headers}
    )
    stream = parse_sse(r.get_data(as_text=True))
    assert r.status_code == 200 and len(stream.chunks) == 3 and stream.events[-1] == "[DONE]"
    assert (
        "".join(c["choices"][0]["text"] for c in stream.chunks)
        == plain.get_json()["choices"][0]["text"]
    )


def test_configured_fault_rates() -> None:
    client = create_app(MockConfig(fault_rate=1.0)).test_client()
    statuses = {
        client.post("/v1/completions", json=completion_body(), headers=AUTH).status_code
        for _ in range(100)
    }
    assert statuses == set(spec().mock_faults["statuses"])
    client = create_app(MockConfig(stream_error_rate=1.0)).test_client()
    code, kinds = spec().mock_faults["stream_error_code"], set()
    for _ in range(20):  # the error's place is drawn: before the first chunk it is the answer
        r = client.post(
            "/v1/completions", json=completion_body(stream=True, ignore_eos=True), headers=AUTH
        )
        if r.status_code == 200:
            assert parse_sse(r.get_data(as_text=True)).events[-2]["error"]["code"] == code
        else:
            assert (r.status_code, r.get_json()["error"]["code"]) == (503, code)
        kinds.add(r.status_code)
    assert 200 in kinds


# -- the Budget's headers -------------------------------------------------------------
def test_clamped_max_tokens_header_and_429(tmp_path: Any) -> None:
    body = completion_body(max_tokens=50, ignore_eos=True)
    req = CONTRACT.validate_completion(body)
    budget = sum(req.prompt_token_counts) + 10
    client = create_app(MockConfig(budget_tokens=budget, budget_dir=str(tmp_path))).test_client()
    r = client.post("/v1/completions", json=body, headers=AUTH)
    held = hold(req.prompt_token_counts, req.n, req.max_tokens, budget)
    assert held.clamped and r.headers["X-Acs-Max-Tokens-Clamped"] == str(held.max_tokens)
    assert r.get_json()["usage"]["completion_tokens"] == held.max_tokens
    r = client.post("/v1/completions", json=body, headers=AUTH)
    assert_error(r, error_of(lambda: hold(req.prompt_token_counts, req.n, req.max_tokens, 0)))
    assert r.headers["x-should-retry"] == "false"  # the Budget is spent: a retry cannot help
    other = client.post("/v1/completions", json=body, headers={"Authorization": "Bearer other"})
    assert other.status_code == 200  # each key has its own Budget


def test_unclamped_responses_have_no_clamp_header(client: FlaskClient) -> None:
    r = client.post("/v1/completions", json=completion_body(), headers=AUTH)
    assert "X-Acs-Max-Tokens-Clamped" not in r.headers


def test_non_stream_body_is_compact_json(client: FlaskClient) -> None:
    r = client.post("/v1/completions", json=completion_body(seed=1), headers=AUTH)
    assert r.mimetype == "application/json"
    assert json.loads(r.get_data()) == r.get_json()


def test_a_server_may_serve_other_models() -> None:
    """The reference implementation passes the models its vLLM serves."""
    other = dataclasses.replace(MODEL, name="tiny", max_model_len=128)
    client = create_app(MockConfig(), models={"tiny": other}).test_client()
    assert [m["id"] for m in client.get("/v1/models", headers=AUTH).get_json()["data"]] == ["tiny"]
    assert (
        client.post("/v1/completions", json=completion_body(model="tiny"), headers=AUTH).status_code
        == 200
    )
    body = completion_body()
    assert_error(
        client.post("/v1/completions", json=body, headers=AUTH),
        error_of(lambda: CONTRACT.validate_completion(body, models={"tiny": other})),
    )


def test_the_app_compiles_the_request_schema_before_any_request() -> None:
    """Built in gunicorn's master (preload), so no worker's first request compiles it."""
    contract = state_of(create_app(MockConfig())).contract
    assert {"request_schema", "rules"} <= set(vars(contract))  # its cached validators, built


def _fault_run(**settings: Any) -> list[int]:
    client = create_app(MockConfig(fault_rate=0.5, **settings)).test_client()
    return [
        client.post("/v1/completions", json=completion_body(), headers=AUTH).status_code
        for _ in range(40)
    ]


def test_faults_repeat_with_a_seed_and_keep_to_the_statuses_chosen() -> None:
    """Issue 32: two identical runs gave different sequences, and a quarter were 429s."""
    first, again, other = (_fault_run(fault_seed=s, fault_statuses="500,503") for s in (7, 7, 8))
    assert first == again and first != other
    assert set(first) == {200, 500, 503}


@pytest.mark.parametrize("statuses", ["418", "500,x", ""])
def test_fault_statuses_outside_the_specs_are_refused_at_start(statuses: str) -> None:
    with pytest.raises(ConfigError, match="fault-statuses"):
        create_app(MockConfig(fault_statuses=statuses))
