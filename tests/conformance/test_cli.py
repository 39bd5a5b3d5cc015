"""The CLI in-process: exit codes, options, reports; and the pytest embedding."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from api_server.children import free_port
from conformance.cli.main import main
from contract import spec
from contract.version import describe, versions
from gallery.breaker import Breaker
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.suite import run_embedded
from tests.support.wsgi import serve

KEY = "cli-test-key"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def keyed_mock() -> Iterator[str]:
    """A deployment with keys configured: only KEY is accepted."""
    with serve(create_app(MockConfig(keys=(KEY,)))) as url:
        yield url


def cli(*args: str, transport: httpx.BaseTransport | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = main([*args, "--no-progress"], transport=transport, console=Console(file=out, width=200))
    return code, out.getvalue()


def test_quick_profile_against_the_mock_exits_0_and_writes_reports(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    _, url = mock
    paths = {ext: tmp_path / f"report.{ext}" for ext in ("json", "xml", "html")}
    # robust: needs the mock's own HTTP server, not werkzeug's (tests/conformance/test_robust_discrimination.py)
    code, out = cli(
        "--base-url",
        url,
        "--api-key",
        KEY,
        "--skip",
        "robust",
        "--json",
        str(paths["json"]),
        "--junit",
        str(paths["xml"]),
        "--html",
        str(paths["html"]),
    )
    assert code == 0, out
    assert "conformant" in out and "generated 0 tokens" in out
    report = json.loads(paths["json"].read_text())
    assert report["summary"]["failed"] == 0 and report["summary"]["exit_code"] == 0
    assert report["summary"]["tokens"] == 0  # quick: nothing generated
    suite = ET.parse(paths["xml"]).getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == "0"
    assert int(suite.get("tests")) == report["summary"]["total"] == len(suite.findall("testcase"))
    assert ": conformant</h1>" in paths["html"].read_text()


def test_a_failing_check_exits_1_with_its_findings_in_every_report(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    app, url = mock
    app.mode = "wrong_code"
    try:
        code, out = cli(
            "--base-url",
            url,
            "--api-key",
            KEY,
            "-k",
            "caps:*",
            "--json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "r.xml"),
            "--html",
            str(tmp_path / "r.html"),
        )
    finally:
        app.mode = None
    assert code == 1
    assert "FAILED caps:max_tokens.without_stream.limit+1" in out
    report = json.loads((tmp_path / "r.json").read_text())
    failed = [r for r in report["results"] if r["outcome"] == "failed"]
    assert [r["id"] for r in failed] == ["caps:max_tokens.without_stream.limit+1"]
    finding = failed[0]["findings"][0]
    assert finding["expected"]["error"]["code"] == "deadline_infeasible"
    assert finding["received"]["error"]["code"] == "invalid_request"
    assert finding["exchange"]["request"]["headers"]["Authorization"] == "Bearer ***"
    failures = ET.parse(tmp_path / "r.xml").getroot().iter("failure")
    assert ["deadline_infeasible" in (f.text or "") for f in failures] == [True]
    html = (tmp_path / "r.html").read_text()
    assert 'class="side"' in html and "caps:max_tokens.without_stream.limit+1" in html


def test_an_unreachable_server_exits_2() -> None:
    code, _ = cli("--base-url", f"http://127.0.0.1:{free_port()}", "--api-key", KEY)
    assert code == 2


@pytest.mark.parametrize(
    "args",
    [
        ("--base-url", "http://127.0.0.1:1"),  # no key
        ("--api-key", KEY),  # no URL
        ("--base-url", "ftp://x", "--api-key", KEY),
        ("--base-url", "http://x", "--api-key", KEY, "--profile", "slow"),
        ("--base-url", "http://x", "--api-key", KEY, "--model", "no-such-model"),
        ("--base-url", "http://x", "--api-key", KEY, "--include", "no-such-tag"),
        ("--base-url", "http://x", "--api-key", KEY, "--token-ceiling", "-1"),
    ],
)
def test_usage_errors_exit_2(args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONFORMANCE_BASE_URL", raising=False)
    monkeypatch.delenv("CONFORMANCE_API_KEY", raising=False)
    assert cli(*args)[0] == 2


def test_a_refused_api_key_is_a_configuration_error(keyed_mock: str) -> None:
    assert cli("--base-url", keyed_mock, "--api-key", "not-" + KEY)[0] == 2


def test_dry_run_lists_the_selection_and_sends_nothing() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"a dry run sent {request.method} {request.url}")

    code, out = cli(
        "--base-url",
        "http://127.0.0.1:1",
        "--api-key",
        KEY,
        "--dry-run",
        "--profile",
        "full",
        "--include",
        "streaming",
        "--skip",
        "schema",
        transport=httpx.MockTransport(refuse),
    )
    assert code == 0
    assert "stream:event_order" in out and "stream:keepalive" in out
    assert "golden:" in out  # golden cases that stream carry the tag
    assert "schema:" not in out and "auth:" not in out


def test_quick_dry_run_has_no_check_that_generates_tokens() -> None:
    code, out = cli("--dry-run")
    assert code == 0 and "token bound of the selection: 0" in out
    assert "stream:" not in out and "caps:context.limit+1" in out


def test_wrong_key_is_checked_only_where_keys_are_configured(
    mock: tuple[Breaker, str], keyed_mock: str
) -> None:
    _, url = mock
    assert (
        cli("--base-url", keyed_mock, "--api-key", KEY, "-k", "auth:*", "--wrong-key-expected")[0]
        == 0
    )
    code, out = cli(
        "--base-url", url, "--api-key", KEY, "-k", "auth:wrong_key", "--wrong-key-expected"
    )
    assert code == 1 and "FAILED auth:wrong_key" in out  # this mock accepts any key
    code, out = cli("--base-url", url, "--api-key", KEY, "-k", "auth:wrong_key")
    assert code == 0 and "skipped" in out


def test_budget_check_with_a_spent_key() -> None:
    with serve(create_app(MockConfig(budget_tokens=0))) as url:
        assert (
            cli("--base-url", url, "--api-key", KEY, "-k", "budget:*", "--exhausted-key", "spent")[
                0
            ]
            == 0
        )


def test_a_report_that_cannot_be_written_is_a_tool_error(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    _, url = mock
    code, out = cli(
        "--base-url",
        url,
        "--api-key",
        KEY,
        "-k",
        "routes:*",
        "--json",
        str(tmp_path / "missing-dir" / "r.json"),
    )
    assert code == 2 and "TOOL ERROR" in out


def test_help_exits_0() -> None:
    assert cli("--help")[0] == 0


def _pytest(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_embedded(url, KEY, *args)


def test_pytest_embedding_passes_and_fails_like_the_cli(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    app, url = mock
    ok = _pytest(
        url, "--conformance-select", "routes:*,headers:*", f"--junitxml={tmp_path / 'j.xml'}"
    )
    assert ok.returncode == 0, ok.stdout[-2000:]
    assert "8 passed" in ok.stdout
    # Which code and which contract: in the terminal and in pytest's JUnit, as in the CLI's reports.
    assert f"conformance: checked with {describe(versions(spec()))};" in ok.stdout
    props = ET.parse(tmp_path / "j.xml").getroot().find("testsuite/properties")
    assert props is not None and {p.get("name"): p.get("value") for p in props} == {
        f"version:{name}": version for name, version in versions(spec()).items()
    }
    app.mode = "missing_x_request_id"
    try:
        bad = _pytest(url, "--conformance-select", "headers:*")
    finally:
        app.mode = None
    assert bad.returncode == 1
    assert "headers:x_request_id.success" in bad.stdout and "no X-Request-Id header" in bad.stdout


def test_the_suite_uses_the_deployments_dimensions_from_models() -> None:
    """A deployment with other layers and hidden size (and max_model_len): the lens: and caps:
    checks use its numbers from GET /v1/models; golden cases built on the spec's are skipped."""
    import dataclasses

    from conformance.checks import REGISTRY
    from conformance.checks.golden import depends_on_dimensions
    from conformance.engine.config import RunConfig
    from conformance.engine.registry import select
    from conformance.engine.results import Outcome
    from conformance.engine.runner import run
    from conformance.golden import load_cases
    from contract import spec

    name = spec().default_model
    small = dataclasses.replace(spec().models[name], num_layers=3, hidden_size=512)
    app = create_app(MockConfig(), None, {name: small})
    listed = (
        app.test_client().get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).get_json()
    )
    assert [(m["num_layers"], m["hidden_size"]) for m in listed["data"]] == [(3, 512)]
    config = RunConfig(
        base_url="http://small.test",
        api_key=KEY,
        model=name,
        profile="full",
        select=("lens:*", "caps:capture*", "routes:models", "golden:*"),
    ).validate()
    report = run(config, select(REGISTRY, config), transport=httpx.WSGITransport(app=app))
    outcomes = {r.id: r for r in report.results}
    bad = {
        i: (r.reason, [f.message for f in r.findings])
        for i, r in outcomes.items()
        if r.outcome in (Outcome.FAILED, Outcome.ERROR)
    }
    assert not bad, bad
    dims = {f"golden:{c.id}" for c in load_cases() if depends_on_dimensions(c)}
    assert {
        "golden:steering.hidden",
        "golden:model.layers.past",
        "golden:caps.capture.one_layer.at",
    } <= dims
    skipped = {i for i, r in outcomes.items() if r.outcome is Outcome.SKIPPED}
    assert skipped == dims
    assert all(
        outcomes[i].reason
        == (
            f"the golden lens cases assume num_layers {spec().models[name].num_layers} and hidden_size "
            f"{spec().models[name].hidden_size}; this server reports 3 and 512 (the lens: and caps: checks cover it)"
        )
        for i in dims
    )
    assert all(
        outcomes[i].outcome is Outcome.PASSED for i in outcomes if i.startswith(("lens:", "caps:"))
    )


def test_checks_that_need_the_mocks_headers_skip_where_they_are_ignored() -> None:
    """stream:error_event and stream:keepalive slow or break the stream with X-Mock-* headers;
    a server that ignores them (api_server without the mock's hook, as the reference) gets them skipped, not failed."""
    import api_server
    from conformance.checks import REGISTRY
    from conformance.engine.config import RunConfig
    from conformance.engine.registry import select
    from conformance.engine.results import Outcome
    from conformance.engine.runner import run
    from contract import spec
    from mock_server.engine.fake_engine import FakeEngine

    app = api_server.create_app(
        api_server.ServerConfig(), FakeEngine(spec(), spec().models.values())
    )
    config = RunConfig(
        base_url="http://plain.test",
        api_key=KEY,
        profile="full",
        select=("stream:error_event", "stream:keepalive"),
    ).validate()
    report = run(config, select(REGISTRY, config), transport=httpx.WSGITransport(app=app))
    assert {
        r.id: (r.outcome, r.reason) for r in report.results if not r.id.startswith("premise:")
    } == {
        "stream:error_event": (
            Outcome.SKIPPED,
            "the server did not inject an error (X-Mock-Stream-Error-After is the bundled mock's)",
        ),
        "stream:keepalive": (
            Outcome.SKIPPED,
            f"the stream never went quiet for "
            f"{spec().caps['keepalive_seconds']} s "
            "(the server ignored X-Mock-Ttft-Ms)",
        ),
    }


def test_the_command_leaves_no_cache_in_the_working_directory(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    """hypothesis (under schemathesis) keeps caches in `.hypothesis/` of the working directory;
    a gate run from a deployment's repository must leave nothing there (issue 32)."""
    import os
    import subprocess

    _, url = mock
    cache = tmp_path / "cache"
    work = tmp_path / "repo"
    work.mkdir()
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    env.pop("HYPOTHESIS_STORAGE_DIRECTORY", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance",
            "--base-url",
            url,
            "--api-key",
            KEY,
            "--no-progress",
            "-k",
            "schema:not_a_server_error",
            "--schema-examples",
            "2",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(work.iterdir()) == []
    assert (cache / "acs-conformance" / "hypothesis").is_dir()


def test_a_one_layer_model_is_asked_only_what_the_spec_accepts() -> None:
    """An honest 1-layer deployment fails no check: the gate never asks a layer twice ([0, 0],
    which the spec refuses); a check whose subject the claim takes away is unproven (issue 53)."""
    import dataclasses

    from conformance.checks import REGISTRY
    from conformance.engine.config import RunConfig
    from conformance.engine.registry import select
    from conformance.engine.results import Outcome
    from conformance.engine.runner import run
    from contract import spec

    name = spec().default_model
    one = dataclasses.replace(spec().models[name], num_layers=1, hidden_size=512)
    app = create_app(MockConfig(), None, {name: one})
    config = RunConfig(
        base_url="http://one.test",
        api_key=KEY,
        model=name,
        profile="full",
        select=("lens:*", "model:*", "effects:steering.*", "caps:capture*"),
    ).validate()
    report = run(config, select(REGISTRY, config), transport=httpx.WSGITransport(app=app))
    bad = {
        r.id: (r.reason, [f.message for f in r.findings])
        for r in report.results
        if r.outcome in (Outcome.FAILED, Outcome.ERROR)
    }
    assert not bad, bad
    outcome = {r.id: r.outcome for r in report.results}
    assert outcome["model:capture.layers"] is Outcome.UNPROVEN
    assert outcome["lens:activations_shape"] is Outcome.PASSED
