"""The suite in the field: --baseline (only new findings fail a run) and --rate-limit (a
deployment that answers 429 with Retry-After to more than N requests a second, and one that
answers so to every other request, schemathesis's included)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from conformance.cli.main import main
from conformance.wire.client import RETRY_EVERY, RETRY_FLOOR
from conformance.wire.volatile import masked
from contract import spec
from gallery.breaker import Breaker, EveryKth, RateLimited
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.wsgi import serve

KEY = "field-test-key"
CHECKS = "caps:max_tokens.*"  # a few quick checks that Breaker's modes below break
LIMIT = 5  # the rate-limited deployment's requests a second
PACED = 2  # --rate-limit well under it: 0.5 s between requests, not 0.2
LIMITED_CHECKS = "routes:*"  # a few checks, one request after the other
# schemathesis's checks, the full profile (its positive run streams too), few examples;
# against EveryKth(k=4), where one sender at a time has every third request's first try refused
# (k=2 refuses every first try: more retries than the run's bound, tests/conformance/test_liars.py)
SCHEMA_CHECKS = "schema:*"
SCHEMA_RUN = ("--profile", "full", "--schema-examples", "2")
UNPACED = 1000  # --rate-limit that paces nothing: only the resending is on


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main([*args, "--no-progress"], console=Console(file=out, width=300))
    return code, out.getvalue()


def run(
    url: str,
    report: Path,
    *extra: str,
    mode: str | None = None,
    app: Breaker | None = None,
    checks: str = CHECKS,
) -> tuple[int, dict]:
    if app is not None:
        app.mode = mode
    try:
        code, out = cli(
            "--base-url", url, "--api-key", KEY, "-k", checks, "--json", str(report), *extra
        )
    finally:
        if app is not None:
            app.mode = None
    return code, json.loads(report.read_text()) | {"out": out}


def test_only_new_findings_fail_a_run_against_a_baseline(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    app, url = mock
    code, before = run(url, tmp_path / "before.json", app=app, mode="wrong_code")
    failed = [
        (r["id"], f["message"])
        for r in before["results"]
        if r["outcome"] == "failed"
        for f in r["findings"]
    ]
    assert code == 1 and failed
    baseline = ("--baseline", str(tmp_path / "before.json"))
    # the same findings: still failing, none new: exit 0
    code, same = run(url, tmp_path / "same.json", *baseline, app=app, mode="wrong_code")
    assert code == 0 and same["summary"]["exit_code"] == 0
    still = [(f["check"], f["message"]) for f in same["baseline"]["still"]]
    assert (same["baseline"]["new"], still, same["baseline"]["fixed"]) == ([], failed, [])
    assert f"0 new findings, {len(failed)} still failing, 0 fixed" in same["out"]
    # all fixed
    code, fixed = run(url, tmp_path / "fixed.json", *baseline)
    assert code == 0
    assert [(f["check"], f["message"]) for f in fixed["baseline"]["fixed"]] == failed
    # the same check failing for another reason: a new finding, exit 1
    code, other = run(url, tmp_path / "other.json", *baseline, app=app, mode="cap_off_by_one")
    assert code == 1 and other["summary"]["exit_code"] == 1
    assert other["baseline"]["new"] and {f["check"] for f in other["baseline"]["new"]} <= {
        i for i, _ in failed
    }
    assert "NEW caps:max_tokens" in other["out"]


def test_another_field_departing_under_the_same_assertion_is_new(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    """Matched on what a check asserts and where the answer departs (which field, what was
    expected there), never on what was received (issue 53): a baseline taken on a deployment
    whose messages differ hides no new breakage of `param` in the same cases; the same
    departure again is still failing."""
    app, url = mock
    typed = "golden:type.*"  # the cases refused with "Invalid type" messages
    run(url, tmp_path / "before.json", app=app, mode="changed_message", checks=typed)
    baseline = ("--baseline", str(tmp_path / "before.json"))
    before = json.loads((tmp_path / "before.json").read_text())
    failed = {r["id"] for r in before["results"] if r["outcome"] == "failed"}
    assert failed
    code, same = run(
        url, tmp_path / "same.json", *baseline, app=app, mode="changed_message", checks=typed
    )
    assert (code, same["baseline"]["new"]) == (0, [])
    code, other = run(
        url,
        tmp_path / "other.json",
        *baseline,
        app=app,
        mode="changed_message_and_param",
        checks=typed,
    )
    new = {f["check"] for f in other["baseline"]["new"]}
    assert code == 1 and new == failed, other["baseline"]
    assert other["baseline"]["still"] == []


def test_a_baseline_without_expected_and_received_is_a_usage_error(
    mock: tuple[Breaker, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    app, url = mock
    run(url, tmp_path / "old.json", app=app, mode="wrong_code")
    data = json.loads((tmp_path / "old.json").read_text())
    for result in data["results"]:
        result["findings"] = [{"message": f["message"]} for f in result["findings"]]
    (tmp_path / "old.json").write_text(json.dumps(data))
    code, _ = cli(
        "--base-url", url, "--api-key", KEY, "-k", CHECKS, "--baseline", str(tmp_path / "old.json")
    )
    assert code == 2
    assert "without `expected` and `received`" in " ".join(capsys.readouterr().err.split())


def test_volatile_parts_of_a_message_are_masked() -> None:
    assert (
        masked(spec(), "req_9fA2 answered after 12.5 s, cmpl-77x; conformance-0123456789abcdef-")
        == "… answered after …, …; conformance-…-"
    )
    assert masked(spec(), "status 429, expected 400") == "status 429, expected 400"


def test_a_baseline_that_is_not_a_report_of_this_spec_is_a_usage_error(
    mock: tuple[Breaker, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = mock
    not_json, not_report, other_version = (tmp_path / n for n in ("a.txt", "b.json", "c.json"))
    not_json.write_text("<html>")
    not_report.write_text(json.dumps({"results": []}))
    run(url, other_version)
    data = json.loads(other_version.read_text())
    data["versions"]["openapi.yaml"] = "0.0.1"
    other_version.write_text(json.dumps(data))
    for path, said in (
        (not_json, "not a JSON report of this suite (not JSON"),
        (not_report, "not a JSON report of this suite (no summary"),
        (
            other_version,
            f"a report of spec version 0.0.1; this run checks spec version {spec().version}",
        ),
    ):
        code, _ = cli("--base-url", url, "--api-key", KEY, "-k", CHECKS, "--baseline", str(path))
        assert code == 2
        assert said in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_rate_limit_of_0_or_less_is_a_usage_error(value: str) -> None:
    assert cli("--base-url", "http://x", "--api-key", KEY, "--rate-limit", value)[0] == 2


@pytest.fixture
def limited() -> Iterator[tuple[RateLimited, str]]:
    app = RateLimited(create_app(MockConfig()), LIMIT)
    with serve(app) as url:
        yield app, url


def test_a_rate_limited_deployment_fails_without_rate_limit(
    limited: tuple[RateLimited, str], tmp_path: Path
) -> None:
    app, url = limited
    code, report = run(url, tmp_path / "r.json", checks=LIMITED_CHECKS)
    assert code == 1 and app.refused
    received = [f["received"] for r in report["results"] for f in r["findings"]]
    assert any(isinstance(r, dict) and r.get("status") == 429 for r in received), received


def test_under_the_rate_limit_nothing_is_refused(
    limited: tuple[RateLimited, str], tmp_path: Path
) -> None:
    app, url = limited
    code, report = run(url, tmp_path / "r.json", "--rate-limit", str(PACED), checks=LIMITED_CHECKS)
    assert (code, app.refused) == (0, 0), report["out"]
    assert report["rate_limit"] == {
        "per_second": PACED,
        "retried": 0,
        "waited_s": 0.0,
        "max_retries": 5,
        "max_wait_s": 60.0,
        "given_up": [],
        "sent": report["rate_limit"]["sent"],
        "bound": RETRY_FLOOR + report["rate_limit"]["sent"] // RETRY_EVERY,
        "past_bound": 0,
    }


def test_429s_with_retry_after_are_waited_out_and_sent_again(
    limited: tuple[RateLimited, str], tmp_path: Path
) -> None:
    app, url = limited
    code, report = run(
        url, tmp_path / "r.json", "--rate-limit", str(LIMIT * 20), checks=LIMITED_CHECKS
    )
    assert code == 0, report["out"]
    assert report["rate_limit"]["retried"] == app.refused > 0
    assert report["summary"]["failed"] == 0
    assert f"{app.refused} answers 429 with Retry-After waited out" in report["out"]


@pytest.fixture
def every_fourth() -> Iterator[tuple[EveryKth, str]]:
    app = EveryKth(create_app(MockConfig()), 4)
    with serve(app) as url:
        yield app, url


def test_schemathesis_gets_the_429s_without_rate_limit(
    every_fourth: tuple[EveryKth, str], tmp_path: Path
) -> None:
    app, url = every_fourth
    # quick: in the full profile premise:max_tokens meets a 429 first, and nothing that could
    # generate is sent after it (tests/conformance/test_liars.py)
    code, report = run(
        url, tmp_path / "r.json", *SCHEMA_RUN, "--profile", "quick", checks=SCHEMA_CHECKS
    )
    assert code == 1 and app.refused
    failed = {r["id"]: r["findings"] for r in report["results"] if r["outcome"] == "failed"}
    assert {
        "schema:response_headers_conformance",
        "schema:response_schema_conformance",
        "schema:status_code_conformance",
    } <= set(failed)
    assert {f["exchange"]["response"]["status"] for found in failed.values() for f in found} == {
        429
    }


def test_schemathesis_429s_with_retry_after_are_waited_out_and_sent_again(
    every_fourth: tuple[EveryKth, str], tmp_path: Path
) -> None:
    app, url = every_fourth
    code, report = run(
        url, tmp_path / "r.json", *SCHEMA_RUN, "--rate-limit", str(UNPACED), checks=SCHEMA_CHECKS
    )
    assert code == 0, report["out"]
    assert (report["summary"]["failed"], report["rate_limit"]["given_up"]) == (0, [])
    assert report["rate_limit"]["retried"] == app.refused > 0
    # a stream resent (every answer but the first is one) read whole: its events validated, its tokens counted
    outcome = {r["id"]: r["outcome"] for r in report["results"]}
    assert app.streams and outcome["schema:stream_event_conformance"] == "passed"
    assert report["summary"]["tokens"] > 0
