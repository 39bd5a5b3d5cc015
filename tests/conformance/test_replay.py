"""Every finding reproducible in one line (issue 31): its curl line resends its request, and
`python -m conformance replay REPORT.json [CHECK]` runs a report's failing checks again and
says, per finding, fixed or still failing."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from conformance.cli.main import main
from conformance.wire.exchange import BODIES, CURL_INLINE_BYTES, ENV_API_KEY
from gallery.breaker import Breaker

KEY = "replay-test-key"
BROKEN = "missing_param"  # Breaker: every 400 without its param
CHECKS = ("caps:max_tokens.without_stream.limit+1", "caps:context.limit+1")


def cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), console=Console(file=out, width=300))
    return code, out.getvalue()


@pytest.fixture()
def report(mock: tuple[Breaker, str], tmp_path: Path) -> Path:
    """A report of the broken mock: the two caps checks fail."""
    app, url = mock
    app.mode = BROKEN
    try:
        code, out = cli(
            "--base-url",
            url,
            "--api-key",
            KEY,
            "--no-progress",
            "-k",
            CHECKS[0],
            "-k",
            CHECKS[1],
            "--json",
            str(tmp_path / "r.json"),
        )
    finally:
        app.mode = None
    assert code == 1, out
    return tmp_path / "r.json"


def test_replay_against_the_same_broken_server_says_still_failing(
    mock: tuple[Breaker, str], report: Path
) -> None:
    app, _ = mock
    app.mode = BROKEN
    try:
        code, out = cli("replay", str(report), "--api-key", KEY)
    finally:
        app.mode = None
    assert code == 1, out
    assert sorted(
        line.split(": ", 1)[0] for line in out.splitlines() if line.startswith("STILL FAILING")
    ) == sorted(f"STILL FAILING {c}" for c in CHECKS)
    assert "0 findings fixed, 2 still failing, 0 new" in out


def test_replay_after_the_fix_says_fixed_and_exits_0(report: Path) -> None:
    code, out = cli("replay", str(report), "--api-key", KEY)
    assert code == 0, out
    assert sorted(
        line.split(": ", 1)[0] for line in out.splitlines() if line.startswith("FIXED")
    ) == sorted(f"FIXED {c}" for c in CHECKS)


def test_replay_of_one_named_check(report: Path) -> None:
    code, out = cli("replay", str(report), CHECKS[0], "--api-key", KEY)
    assert (
        code == 0
        and "replayed 1 checks" in out
        and f"FIXED {CHECKS[0]}" in out
        and CHECKS[1] not in out
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (("replay", "/no/such/report.json", "--api-key", KEY), "not a readable JSON report"),
        (("replay", "REPORT", "no:such_check", "--api-key", KEY), "no such check: no:such_check"),
    ],
)
def test_replay_usage_errors_exit_2(
    report: Path, args: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _ = cli(*(str(report) if a == "REPORT" else a for a in args))
    assert code == 2 and says in capsys.readouterr().err.replace("\n", "")


@pytest.mark.skipif(shutil.which("curl") is None, reason="no curl on this machine")
def test_each_findings_curl_line_resends_its_request(
    mock: tuple[Breaker, str], report: Path
) -> None:
    """Run from the report's folder with the key in the environment, each curl line gets the
    answer its finding recorded (the server still broken); a large body goes by file."""
    app, _ = mock
    data = json.loads(report.read_text())
    findings = [
        f for r in data["results"] for f in r["findings"] if f.get("exchange", {}).get("curl")
    ]
    assert len(findings) == 2
    assert KEY not in json.dumps(data)  # the key is never in a report
    big = next(
        f for f in findings if "@" + BODIES in f["exchange"]["curl"]
    )  # the context fills a prompt
    body_file = report.parent / big["exchange"]["curl"].rsplit("@", 1)[1]
    assert body_file.stat().st_size > CURL_INLINE_BYTES
    app.mode = BROKEN
    try:
        for f in findings:
            out = subprocess.run(
                ["bash", "-c", f["exchange"]["curl"]],
                cwd=report.parent,
                capture_output=True,
                env={**os.environ, ENV_API_KEY: KEY},
                check=True,
                timeout=60,
            ).stdout
            status = int(out.split(b"\r\n", 1)[0].split()[1])
            assert status == f["exchange"]["response"]["status"], (
                f["exchange"]["curl"][:200],
                out[:300],
            )
            assert (
                json.loads(out.split(b"\r\n\r\n", 1)[1])["error"]["code"]
                == json.loads(f["exchange"]["response"]["body"])["error"]["code"]
            )
    finally:
        app.mode = None
