"""Two apps over two Specs in one process, each checked by its own (issue 24).

The second spec is a copy of openapi.yaml with smaller caps and its own words for
two errors, loaded from a file as any spec is: no global is swapped, and each app
answers with its own spec's caps, statuses and messages.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from flask.testing import FlaskClient

from api_server.state import state_of
from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome
from conformance.engine.runner import run
from conformance.golden import padded_body
from contract import ApiError, Contract, Spec
from tests.support.contract import TOKEN_RULE
from tests.support.mock import AUTH, KEY, completion_body


def post(client: FlaskClient, data: bytes) -> Any:
    return client.post(
        "/v1/completions", data=data, headers={**AUTH, "Content-Type": "application/json"}
    )


def error_body(
    api: Spec, code: str, message: str, param: str | None, request_id: str
) -> dict[str, Any]:
    """The API's error shape, from the raw spec `s`: its code's type, the given words."""
    return {
        "error": {
            "message": message,
            "type": api.error_codes[code]["type"],
            "param": param,
            "code": code,
        },
        "request_id": request_id,
    }


def test_the_small_spec_differs_where_the_tests_look(specs: tuple[Spec, Spec]) -> None:
    default, small = specs
    assert small.caps["max_body_bytes"] < default.caps["max_body_bytes"]
    assert small.caps["max_generated_tokens"] < default.caps["max_generated_tokens"]
    assert small.messages["request_too_large"] != default.messages["request_too_large"]
    assert small.caps["keepalive_seconds"] != default.caps["keepalive_seconds"]
    assert small.caps["body_read_seconds"] != default.caps["body_read_seconds"]


def test_each_app_takes_the_defaults_its_config_leaves_from_its_own_spec(
    specs: tuple[Spec, Spec], clients: tuple[FlaskClient, FlaskClient]
) -> None:
    for s, client in zip(specs, clients):
        config = state_of(client.application).config
        assert (config.keepalive_seconds, config.body_read_seconds) == (
            s.caps["keepalive_seconds"],
            s.caps["body_read_seconds"],
        )


@pytest.mark.parametrize("which", [0, 1], ids=["default", "small"])
def test_each_app_takes_a_body_of_its_own_cap_and_refuses_one_byte_more(
    specs: tuple[Spec, Spec], clients: tuple[FlaskClient, FlaskClient], which: int
) -> None:
    s, client = specs[which], clients[which]
    cap = s.caps["max_body_bytes"]
    body = completion_body(max_tokens=1)
    assert post(client, padded_body(body, cap)).status_code == 200
    r = post(client, padded_body(body, cap + 1))
    code = "request_too_large"
    assert r.status_code == s.error_codes[code]["status"]
    rid = r.headers["X-Request-Id"]
    assert r.get_json() == error_body(s, code, s.messages[code].format(limit=cap), None, rid)


def test_a_body_over_the_small_cap_is_refused_by_the_small_app_alone(
    specs: tuple[Spec, Spec], clients: tuple[FlaskClient, FlaskClient]
) -> None:
    default, small = specs
    data = padded_body(completion_body(max_tokens=1), small.caps["max_body_bytes"] + 1)
    assert len(data) < default.caps["max_body_bytes"]
    assert post(clients[0], data).status_code == 200
    r = post(clients[1], data)
    assert r.get_json() == error_body(
        small,
        "request_too_large",
        small.messages["request_too_large"].format(limit=small.caps["max_body_bytes"]),
        None,
        r.headers["X-Request-Id"],
    )


def test_each_app_caps_generated_tokens_by_its_own_spec(
    specs: tuple[Spec, Spec], clients: tuple[FlaskClient, FlaskClient]
) -> None:
    default, small = specs
    max_tokens = small.caps["max_generated_tokens"] + 1
    assert max_tokens <= min(
        default.caps["max_generated_tokens"], default.caps["max_tokens_without_stream"]
    )
    data = json.dumps(completion_body(max_tokens=max_tokens)).encode()
    assert post(clients[0], data).status_code == 200
    r = post(clients[1], data)
    rule = small.token_rules[TOKEN_RULE]
    message = rule["message"].format(cap=small.caps["max_generated_tokens"], total=max_tokens)
    assert r.status_code == small.error_codes[rule["code"]]["status"]
    assert r.get_json() == error_body(
        small, rule["code"], message, rule["param"], r.headers["X-Request-Id"]
    )


def test_two_contracts_word_the_same_error_each_by_its_own_spec(specs: tuple[Spec, Spec]) -> None:
    default, small = specs
    body = completion_body(max_tokens=default.caps["max_generated_tokens"] + 1)
    for s in specs:
        contract = Contract(s)
        with pytest.raises(ApiError) as info:
            contract.validate_completion(body)
        rule = s.token_rules[TOKEN_RULE]
        assert contract.errors.message(info.value) == rule["message"].format(
            cap=s.caps["max_generated_tokens"],
            n=1,
            max_tokens=body["max_tokens"],
            prompts=1,
            total=body["max_tokens"],
        )


@pytest.mark.parametrize("which", [0, 1], ids=["default", "small"])
def test_the_suite_passes_against_each_app_checked_by_its_own_spec(
    specs: tuple[Spec, Spec], clients: tuple[FlaskClient, FlaskClient], which: int
) -> None:
    """The full profile (less golden, whose cases are openapi.yaml's data, and robust, which
    needs sockets, as schemathesis does: over the in-process transport those skip, saying so)
    from RunConfig.api: each app's caps and words are what the suite expects."""
    s, app = specs[which], clients[which].application
    config = RunConfig(
        "http://mock.test", KEY, profile="full", api=s, skip=("golden", "robust")
    ).validate()
    report = run(config, select(REGISTRY, config), transport=httpx.WSGITransport(app=app))
    bad = {
        r.id: (r.reason, [f.message for f in r.findings])
        for r in report.results
        if r.outcome in (Outcome.FAILED, Outcome.ERROR)
    }
    assert report.results and not bad, bad
    schema = [r for r in report.results if r.group == "schema"]
    assert schema and all(r.outcome is Outcome.SKIPPED for r in schema)
    assert all("in-process transport" in r.reason for r in schema if r.id != "schema:ignored_auth")
