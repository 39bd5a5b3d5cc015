"""Every golden case, run in-process through the core (no server)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from conformance.golden import Case, load_cases, mask
from conformance.golden.generate import GENERATED_FILES, generate, render
from contract import ApiError, hold, parse_json, spec
from tests.support.contract import CONTRACT

CASES = load_cases()


def run_in_process(case: Case) -> tuple[int, dict[str, Any] | None]:
    headers = dict(case.headers)
    if case.auth == "default":
        headers["Authorization"] = "Bearer golden-key"
    elif case.auth != "none":
        headers["Authorization"] = case.auth
    rid = CONTRACT.errors.new_request_id()
    try:
        admitted = CONTRACT.preflight(
            case.method, case.path, headers, case.content_length, keys=None
        )
        if admitted.route.has_body:
            req = CONTRACT.validate_completion(parse_json(case.body or b""))
            hold(req.prompt_token_counts, req.n, req.max_tokens, remaining=None)
    except ApiError as exc:
        return CONTRACT.errors.status(exc), CONTRACT.errors.body(exc, rid)
    return 200, None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden_case_through_core(case: Case) -> None:
    status, body = run_in_process(case)
    assert status == case.expect_status
    if case.expect_body is not None:
        assert body is not None and mask(body) == case.expect_body
        rid = spec().request_id
        assert re.fullmatch(rf"{rid['prefix']}[0-9a-f]{{{rid['hex_digits']}}}", body["request_id"])


@pytest.mark.parametrize("name", GENERATED_FILES)
def test_generated_cases_agree_with_the_spec(name: str) -> None:
    """The committed files are what the spec gives today (rerun `python -m conformance.golden`)."""
    from conformance.golden import HERE

    assert (HERE / name).read_text(encoding="utf-8") == render(generate()[name])


def test_every_rule_of_the_spec_has_a_golden_case() -> None:
    ids = " ".join(c.id for c in CASES)
    for rule in spec().rules:
        assert f"rule.{rule['id']}" in ids
    for rule in spec().token_rules.values():
        assert any(c.expect_body and c.expect_body["error"]["code"] == rule["code"] for c in CASES)
    for name in spec().schema("CompletionRequest")["properties"]:
        assert f"type.{name}." in ids


def test_docs_examples_are_verbatim_and_agree_with_the_spec() -> None:
    docs = {c.id: c for c in CASES if "docs" in c.tags}
    assert len(docs) == 3
    assert (
        docs["docs.chat_refused"].expect_body["error"]["message"] == spec().messages["chat_refused"]
    )
