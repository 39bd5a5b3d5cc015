"""Spec coverage: its universe is the spec's, and the full profile covers every rule,
error code and status against the mock, so a rule added to openapi.yaml without a
check that provokes it fails here."""

from __future__ import annotations

import copy
import json

import httpx

from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.coverage import Coverage, summary_line, universe
from conformance.engine.registry import select
from conformance.engine.runner import run
from conformance.reports.html import render
from contract import Spec, spec
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.wsgi import serve

KEY = "coverage-test-key"


def test_the_full_profile_covers_every_rule_error_code_and_status() -> None:
    with serve(create_app(MockConfig())) as url:
        # werkzeug's development server answers the first of robust:http.pipelining's requests
        # only and, their heads past its first 8 KiB read, keeps the connection open: the gate
        # waits its timeout for the rest (the 120 s default was most of this test's time). 30 s
        # is twice the longest other wait of the run (robust:http.chunk_size's 15 s).
        config = RunConfig(url, KEY, profile="full", timeout=30)
        report = run(config, select(REGISTRY, config))
    coverage = report.coverage
    assert coverage is not None
    missing = {
        cat: coverage[cat]["not_covered"]
        for cat in ("rules", "error_codes", "statuses", "routes", "effects")
    }
    assert missing == {"rules": [], "error_codes": [], "statuses": [], "routes": [], "effects": []}
    assert coverage["rules"]["percent"] == 100.0 and coverage["effects"]["percent"] == 100.0
    assert report.to_dict()["coverage"] == coverage
    assert summary_line(coverage).startswith("spec coverage: routes 100% ")
    # The reports list what was not covered (without a Budget, the clamp header is never sent).
    html = render(report)
    not_covered = [x for c in coverage.values() for x in c["not_covered"]]
    assert "X-Acs-Max-Tokens-Clamped" in not_covered
    assert "<h2>Spec coverage</h2>" in html and all(x in html for x in not_covered)


def test_every_field_says_its_effect_and_each_observed_one_has_its_check() -> None:
    request = spec().schema("CompletionRequest")["properties"]
    vector = spec().schema("SteeringVector")["properties"]
    said = {k: v.get("x-effect") for k, v in request.items()}
    assert all(
        isinstance(e, dict)
        and len(e) == 1
        and set(e) <= {"observed", "unobserved"}
        and next(iter(e.values()))
        for e in said.values()
    ), said
    observed = {k for k, e in said.items() if "observed" in e}
    observed |= {
        f"apply_steering_vectors.{k}"
        for k, v in vector.items()
        if "observed" in v.get("x-effect", {})
    }
    checked = {f for c in REGISTRY for f in c.effects}
    assert set(universe(spec())["effects"]) == observed == checked
    assert {"priority", "user"} <= set(request) - observed


def test_the_universe_is_read_from_the_spec() -> None:
    u = universe(spec())
    raw = spec().raw
    assert len(u["rules"]) == sum(
        len(raw[g]) for g in ("x-rules", "x-model-rules", "x-token-rules")
    )
    assert set(u["fields_valid"]) == set(spec().schema("CompletionRequest")["properties"])
    faults = {c for c, e in raw["x-error-codes"].items() if e.get("conformance")}
    assert set(u["error_codes"]) == set(raw["x-error-codes"]) - faults
    with_key = universe(spec(), exhausted_key=True)
    assert set(with_key["error_codes"]) - set(u["error_codes"]) == {
        c for c, e in raw["x-error-codes"].items() if e.get("conformance") == "exhausted-key"
    }


def test_a_header_only_unprovokable_codes_carry_is_out_of_the_universe() -> None:
    raw = spec().raw
    codes = raw["x-error-codes"]
    by_option = {
        h
        for e in codes.values()
        if e.get("conformance") == "exhausted-key"
        for h in e.get("headers", [])
    }
    by_fault = {
        h for e in codes.values() if e.get("conformance") == "fault" for h in e.get("headers", [])
    }
    assert by_option and by_fault  # the spec has both kinds (x-should-retry, Retry-After)
    everything = set(raw["components"]["headers"])
    assert set(universe(spec())["headers"]) == everything - by_option - by_fault
    assert set(universe(spec(), exhausted_key=True)["headers"]) == everything - by_fault


def test_a_rule_added_to_the_spec_is_in_the_universe_and_uncovered() -> None:
    raw = copy.deepcopy(spec().raw)
    raw["x-token-rules"].append(
        {
            "id": "new_rule",
            "param": "n",
            "code": "invalid_request",
            "message": "A new rule about {n}.",
        }
    )
    cov = Coverage(Spec(path=spec().path, raw=raw))
    assert "x-token-rules:new_rule" in cov.universe["rules"]
    error = {
        "error": {
            "message": "A new rule about 3.",
            "type": "invalid_request_error",
            "param": "n",
            "code": "invalid_request",
        },
        "request_id": "req_0",
    }
    cov.observe(
        "POST",
        "/v1/completions",
        json.dumps({"model": "m", "n": 3}).encode(),
        400,
        httpx.Headers({"X-Request-Id": "req_0"}),
        error,
    )
    summary = cov.summary()
    assert "x-token-rules:new_rule" not in summary["rules"]["not_covered"]
    assert "n" not in summary["fields_invalid"]["not_covered"]
    assert summary["fields_valid"]["covered"] == 0
    assert summary["statuses"]["not_covered"] == [
        s for s in universe(spec())["statuses"] if s != "400"
    ]
    assert summary["headers"]["not_covered"] == [
        h for h in universe(spec())["headers"] if h != "X-Request-Id"
    ]
