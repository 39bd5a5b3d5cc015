"""The gate as a deployment's CI uses it (issue 64): no green from the tool's own use, a report
on every exit, the options recorded and replayed, findings a CI log can act on, no key in the
pytest embedding. The wheel's side (the gate installed equals the checkout's) is
tests/house/test_packaging.py's."""

from __future__ import annotations

import io
import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from api_server.children import free_port
from conformance.checks import REGISTRY
from conformance.checks import golden as golden_checks
from conformance.cli.main import main, run_options
from conformance.engine.config import RunConfig
from conformance.engine.events import CheckFinished, CheckStarted, FindingMade
from conformance.engine.results import CheckResult, Finding, Outcome
from conformance.golden import load_cases
from conformance.pytest_plugin import run_actions
from conformance.reports.console import ProgressDisplay
from conformance.wire.client import Client
from conformance.wire.secrets import PIECE
from conformance.wire.who_answered import FRONT_GUIDE, who_answered
from contract import spec
from gallery.breaker import Breaker
from mock_server import MockConfig, create_app
from tests.support.suite import run_embedded
from tests.support.wsgi import serve

KEY = "sk-gate-in-ci-0123456789abcdef"
REPORTS = ("json", "xml", "html", "md")


@pytest.fixture()
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """The command in-process: (exit code, stdout, its stderr's lines)."""

    def run(*args: str) -> tuple[int, str, str]:
        out = io.StringIO()
        quiet = [] if args[0] == "replay" else ["--no-progress"]
        code = main([*args, *quiet], console=Console(file=out, width=300))
        return code, out.getvalue(), capsys.readouterr().err

    return run


def report_args(tmp_path: Path) -> list[str]:
    return [
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "r.xml"),
        "--html",
        str(tmp_path / "r.html"),
        "--markdown",
        str(tmp_path / "r.md"),
    ]


# -- the data the gate reads ---------------------------------------------------------------


def test_a_missing_data_file_is_an_error_never_an_empty_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(golden_checks, "CHEAP_TABLE", tmp_path / "cheap_requests.json")
    golden_checks._cheap_table.cache_clear()
    try:
        with pytest.raises(FileNotFoundError):
            golden_checks._cheap_table()
    finally:
        golden_checks._cheap_table.cache_clear()
    with pytest.raises(FileNotFoundError, match="no golden cases"):
        load_cases(tmp_path)


# -- a selection is the user's: it names something, or it is a usage error ---------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-k", "nosuch:*"], "-k/--select 'nosuch:*' matches no check id"),
        (["-k", "!golden:*"], "to leave checks out, --exclude 'golden:*'"),
        (["--exclude", "golden:nosuch*"], "--exclude 'golden:nosuch*' matches no check id"),
        (["-k", "effects:*"], "select no check of the quick profile; --profile full"),
        (["--base-url", "http://127.0.0.1:9/v1"], "--base-url http://127.0.0.1:9"),
        (
            ["--profile", "full", "--timeout", "1"],
            "too short for stream:keepalive, which waits 7 s",
        ),
        (
            ["--profile", "full", "--timeout", "7", "-k", "stream:*"],
            "use --timeout 8 or more, or --exclude stream:keepalive",
        ),
    ],
)
def test_a_selection_or_option_that_cannot_mean_what_it_says_is_exit_2_naming_the_fix(
    cli: Any, args: list[str], words: str, tmp_path: Path
) -> None:
    code, _, err = cli("--base-url", "http://127.0.0.1:9", "--api-key", KEY, *args)
    assert code == 2
    assert words in err


def test_exclude_leaves_out_checks_by_id_and_the_report_records_it(
    cli: Any, mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    _, url = mock
    code, out, _ = cli(
        "--base-url",
        url,
        "--api-key",
        KEY,
        "-k",
        "routes:*",
        "--exclude",
        "routes:models*",
        "--json",
        str(tmp_path / "r.json"),
    )
    report = json.loads((tmp_path / "r.json").read_text())
    ids = [r["id"] for r in report["results"]]
    assert code == 0, out
    assert ids and not any(i.startswith("routes:models") for i in ids)
    assert all(i.startswith(("routes:", "premise:")) for i in ids)
    assert report["options"]["exclude"] == ["routes:models*"]
    assert report["options"]["select"] == ["routes:*"]


def test_a_metrics_url_that_does_not_answer_is_exit_2_before_the_run(
    cli: Any, mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    _, url = mock
    dead = f"http://127.0.0.1:{free_port()}/metrics"
    code, out, err = cli("--base-url", url, "--api-key", KEY, "--metrics-url", dead)
    assert code == 2 and "conformant" not in out
    assert f"--metrics-url {dead} gives no answer" in err
    code, _, err = cli("--base-url", url, "--api-key", KEY, "--metrics-url", url + "/nosuch")
    assert code == 2 and "answers 404" in err


def test_a_ceiling_the_user_set_low_leaves_checks_out_as_the_options_choice(
    cli: Any, mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    """An honest server, a --token-ceiling below what the selection needs: the checks that do
    not fit are SKIPPED (the user's choice, with the ceiling that would run them), none is
    UNPROVEN, and nothing says the server kept them from running."""
    _, url = mock
    code, out, _ = cli(
        "--base-url",
        url,
        "--api-key",
        KEY,
        "--profile",
        "full",
        "-k",
        "golden:*",
        "-k",
        "determinism:*",
        "--token-ceiling",
        "150",
        "--json",
        str(tmp_path / "r.json"),
    )
    report = json.loads((tmp_path / "r.json").read_text())
    outcomes = [r["outcome"] for r in report["results"]]
    assert report["summary"]["skipped_for_ceiling"], out
    assert Outcome.UNPROVEN.value not in outcomes, out
    assert code == 0, out
    assert "because of what the server did" not in out
    assert "--token-ceiling" in out and "would run them" in out


# -- a report on every exit -------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--base-url", "http://127.0.0.1:{port}", "--api-key", KEY],  # nothing listens
        ["--base-url", "http://127.0.0.1:{port}", "--api-key", KEY, "--profile", "nosuch"],
        ["--base-url", "http://user:pw-secret-123@127.0.0.1:{port}", "--api-key", KEY],
    ],
    ids=["unreachable", "usage", "a password in the URL"],
)
def test_exit_2_writes_every_report_with_its_error(
    cli: Any, args: list[str], tmp_path: Path
) -> None:
    port = free_port()
    code, _, err = cli(*(a.format(port=port) for a in args), *report_args(tmp_path))
    assert code == 2, err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["exit_code"] == 2 and report["results"] == []
    (error,) = report["run_errors"]
    assert error.startswith("not run: ")
    suite = ET.parse(tmp_path / "r.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "1"
    junit_error = suite.find("testcase/error")
    assert junit_error is not None and junit_error.get("message") == error
    assert "incomplete" in (tmp_path / "r.html").read_text()
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.startswith("## ⚠️ Conformance of") and f"**error:** {error}" in markdown
    for path in (tmp_path / f"r.{ext}" for ext in REPORTS):
        assert KEY not in path.read_text() and "pw-secret-123" not in path.read_text()


# -- the run's options in its report; replay runs a check as it ran ----------------------------


def test_replay_runs_a_check_with_the_options_of_the_report(
    cli: Any, mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    """A run with --wrong-key-expected against a deployment that takes any key fails
    auth:wrong_key; replayed, it fails again (before: skipped, "0 still failing", exit 0)."""
    _, url = mock
    code, out, _ = cli(
        "--base-url",
        url,
        "--api-key",
        KEY,
        "--wrong-key-expected",
        "--timeout",
        "33",
        "-k",
        "auth:wrong_key",
        "--json",
        str(tmp_path / "r.json"),
    )
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 1, out
    assert report["options"]["wrong_key_expected"] is True
    assert report["options"]["timeout"] == 33.0
    assert report["options"]["exhausted_key"] is False
    assert KEY not in (tmp_path / "r.json").read_text()
    code, out, _ = cli("replay", str(tmp_path / "r.json"), "--api-key", KEY)
    assert code == 1, out
    assert "STILL FAILING auth:wrong_key: status 200, expected 401" in out
    assert "0 findings fixed, 3 still failing, 0 new, 0 checks not run" in out


def test_replay_of_a_check_that_does_not_run_again_settles_nothing(
    cli: Any, mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    _, url = mock
    cli(
        "--base-url",
        url,
        "--api-key",
        KEY,
        "--wrong-key-expected",
        "-k",
        "auth:wrong_key",
        "--json",
        str(tmp_path / "r.json"),
    )
    data = json.loads((tmp_path / "r.json").read_text())
    data["options"]["wrong_key_expected"] = False  # as a report of before: the check skips
    (tmp_path / "r.json").write_text(json.dumps(data))
    code, out, _ = cli("replay", str(tmp_path / "r.json"), "--api-key", KEY)
    assert code == 1, out
    assert "NOT RUN auth:wrong_key" in out and "1 checks not run" in out


# -- findings a CI log can act on ------------------------------------------------------------


def test_junit_terminal_and_markdown_name_the_field_and_carry_the_curl_line(
    cli: Any, mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    app, url = mock
    app.mode = "missing_param"  # every 400 without its param
    try:
        code, out, _ = cli(
            "--base-url",
            url,
            "--api-key",
            KEY,
            "-k",
            "caps:max_tokens.without_stream.limit+1",
            *report_args(tmp_path),
        )
    finally:
        app.mode = None
    assert code == 1
    field = '.error.param: expected "max_tokens", received null'
    failure = ET.parse(tmp_path / "r.xml").getroot().find("testsuite/testcase/failure")
    assert failure is not None and failure.text is not None
    assert f"differs at {field}" in failure.text
    assert "again: curl -sS -i -X POST" in failure.text and "$CONFORMANCE_API_KEY" in failure.text
    assert f"differs at {field}" in out and "curl -sS -i -X POST" in out
    markdown = (tmp_path / "r.md").read_text()
    assert markdown.startswith("## ❌ Conformance of") and f"`{field}`" in markdown
    assert "curl -sS -i -X POST" in markdown
    for path in (tmp_path / f"r.{ext}" for ext in REPORTS):
        assert KEY not in path.read_text()


def test_a_green_baseline_run_writes_a_green_junit_that_still_shows_the_known_findings(
    cli: Any, mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    app, url = mock
    common = ["--base-url", url, "--api-key", KEY, "-k", "caps:*"]
    app.mode = "missing_param"
    try:
        code, _, _ = cli(*common, "--json", str(tmp_path / "base.json"))
        assert code == 1
        code, out, _ = cli(
            *common, "--baseline", str(tmp_path / "base.json"), *report_args(tmp_path)
        )
    finally:
        app.mode = None
    assert code == 0, out
    suite = ET.parse(tmp_path / "r.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.findall("testcase/failure") == [] and suite.get("failures") == "0"
    known = suite.findall("testcase/skipped[@type='baseline']")
    failed = json.loads((tmp_path / "r.json").read_text())["summary"]["failed"]
    assert failed > 0 and len(known) == failed
    assert all(k.get("message", "").startswith("known finding (--baseline ") for k in known)
    html = (tmp_path / "r.html").read_text()
    assert html.index("<table>") < html.index("against the baseline ")  # the summary first


def test_a_declared_front_is_not_sent_to_the_front_guide_for_an_answer_not_its_own() -> None:
    headers = {"Server": "gunicorn"}
    assert FRONT_GUIDE in who_answered(headers, b"{}", 400, None)
    declared = who_answered(headers, b"{}", 400, "nginx")
    assert FRONT_GUIDE not in declared and "not the declared front nginx's own words" in declared


# -- CI ergonomics ------------------------------------------------------------------------------


def test_rate_limit_gives_each_pipelined_request_its_turn() -> None:
    client = Client("http://127.0.0.1:9", KEY, rate_limit=1000.0)
    assert client.pace is not None
    before = client.pace.turns
    client.paced(lambda: None, "three pipelined requests", answer=lambda _: (200, {}), requests=3)
    assert client.pace.turns - before == 3
    client.close()


def test_progress_is_a_line_every_few_seconds_where_the_output_is_no_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    check = next(iter(REGISTRY))
    with ProgressDisplay(394, console, every=0.05) as progress:
        progress(CheckStarted(check))
        deadline = time.monotonic() + 5
        while f"running {check.id}" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    assert "conformance: 0/394 checks, 0 failed" in out.getvalue()


def test_a_finding_is_a_line_of_the_log_as_it_is_made_and_the_bar_stops_at_the_end() -> None:
    """A CI log shows each finding when its check ends, not only in the summary at the end."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=300)
    check = next(iter(REGISTRY))
    result = CheckResult(
        check.id, check.tags, check.doc, Outcome.FAILED, [Finding("status 500, not 200")]
    )
    with ProgressDisplay(1, console, every=60) as progress:
        progress(CheckStarted(check))
        progress(FindingMade(check, result.findings[0]))
        progress(CheckFinished(check, result))
        assert out.getvalue() == f"conformance: {check.id}: status 500, not 200\n"
        assert (progress.done, progress.failed) == (1, 1)


def test_the_pytest_plugin_takes_every_option_of_the_command() -> None:
    command = {
        a.dest
        for a in run_options()._actions
        if a.option_strings and a.dest not in ("help", "version", "no_progress", "dry_run")
    }
    assert {a.dest for a in run_actions()} == command


def test_no_piece_of_the_key_in_a_config_repr_or_the_pytest_embedding_with_l_and_vv(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    config = RunConfig(
        "http://user:pw-secret-123@127.0.0.1:9", KEY, exhausted_key="sk-spent-key-99"
    )
    shown = repr(config)
    for secret in (KEY, "sk-spent-key-99", "pw-secret-123"):
        assert secret not in shown
    app, url = mock
    app.mode = "missing_x_request_id"
    try:
        done = run_embedded(
            url,
            KEY,
            "--conformance-select",
            "headers:*",
            "-l",
            "-vv",
            f"--junitxml={tmp_path / 'j.xml'}",
        )
    finally:
        app.mode = None
    assert done.returncode == 1, done.stdout[-3000:]
    written = done.stdout + done.stderr + (tmp_path / "j.xml").read_text()
    pieces = {KEY[i : i + PIECE] for i in range(len(KEY) - PIECE + 1)}
    assert not [p for p in pieces if p in written]


def test_usage_and_version_name_the_command_as_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["/opt/venv/bin/acs-conformance"])
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("acs-conformance: ")
    monkeypatch.setattr("sys.argv", ["/x/conformance/__main__.py"])
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("python -m conformance: ")
    assert spec().version


def test_the_diff_page_reads_at_1400_px_the_counts_before_the_list_and_only_differing_fields(
    mock: tuple[Breaker, str], tmp_path: Path
) -> None:
    app, url = mock
    with serve(create_app(MockConfig())) as other:
        app.mode = "wrong_code"
        try:
            code = main(
                [
                    "diff",
                    "--base-url",
                    other,
                    "--api-key",
                    KEY,
                    "--other-url",
                    url,
                    "--no-progress",
                    "-k",
                    "caps:*",
                    "--html",
                    str(tmp_path / "d.html"),
                    "--json",
                    str(tmp_path / "d.json"),
                ],
                console=Console(file=io.StringIO()),
            )
        finally:
            app.mode = None
    assert code == 1
    page = (tmp_path / "d.html").read_text()
    report = json.loads((tmp_path / "d.json").read_text())
    assert report["differing"] and report["options"]["select"] == ["caps:*"]
    assert "max-width:1400px" in page and "table-layout:fixed" in page
    assert "overflow-wrap:anywhere" in page
    assert page.index("by field:</b> code") < page.index("<section>")
    first = page[page.index("<section>") : page.index("</section>")]
    # the differing field's values alone, not the whole answers
    assert "<td>code</td>" in first and "<td>message</td>" not in first
