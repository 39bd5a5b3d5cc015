"""Every golden case over HTTP against a real `python -m mock_server` process.

Errors are compared as whole bodies (request id masked) and the X-Request-Id
header must equal the body's request_id. A 200 case must be a Completion (or
a stream of chunks) that the spec's schemas accept.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from conformance.golden import Case, load_cases, mask
from contract import spec
from tests.support.mock import KEY, RawResponse, parse_sse, raw_request

# One registration, so the session's server is shared by every module that uses it.
CASES = load_cases()
# Every case runs, even those that generate the most tokens a request may: the fake
# engine writes 32,000 tokens in well under a second, and the stream is a few MB.


def send(url: str, case: Case) -> RawResponse:
    headers = dict(case.headers)
    if case.auth == "default":
        headers["Authorization"] = f"Bearer {KEY}"
    elif case.auth != "none":
        headers["Authorization"] = case.auth
    return raw_request(url, case.method, case.path, headers, case.body)


def schema(name: str) -> dict[str, Any]:
    return spec().schema(name)


def check_success(case: Case, response: RawResponse) -> None:
    if case.path == "/v1/models":
        jsonschema.validate(response.json(), schema("ModelList"))
        return
    body = json.loads(case.body or b"{}")
    if body.get("stream"):
        stream = parse_sse(response.text)
        assert stream.events[-1] == "[DONE]"
        for event in stream.events[:-1]:
            jsonschema.validate(event, schema("StreamEvent"))
            assert "error" not in event
        return
    completion = response.json()
    jsonschema.validate(completion, schema("Completion"))
    assert completion["usage"]["completion_tokens"] <= case.generates or case.generates == 0


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden_case_over_http(mock_url: str, case: Case) -> None:
    response = send(mock_url, case)
    assert response.status == case.expect_status, response.text[:500]
    rid = response.headers["x-request-id"]
    if case.expect_body is not None:
        body = response.json()
        assert mask(body) == case.expect_body
        assert body["request_id"] == rid
    if case.expect_status == 200:
        check_success(case, response)
