"""`python -m conformance diff` between the mock and the mock broken in a known way
(the Breaker of gallery/breaker.py): exactly the answers the break
touches are reported, in exactly the field it changes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from conformance.cli.main import main
from conformance.engine.diff import shape, where_differs
from conformance.wire.volatile import masked
from contract import spec
from gallery.breaker import Breaker
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.wsgi import Counting, serve

KEY = "diff-test-key"
SELECT = [
    "-k",
    "golden:*",
    "-k",
    "routes:*",
    "-k",
    "stream:event_order",
    "-k",
    "stream:usage_arithmetic",
]


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, Breaker, str]]:
    # No end-of-text token: how many tokens an unseeded request gets is then the
    # same on both sides (the length of per-token arrays is part of the shape).
    config = MockConfig(eos_rate=0.0)
    broken = Breaker(create_app(config))
    with serve(create_app(config)) as a, serve(broken) as b:
        yield a, broken, b


def _diff(a: str, b: str, tmp_path: Path, select: list[str] = SELECT) -> tuple[int, dict, str, str]:
    console = Console(record=True, width=200)
    out_json, out_html = tmp_path / "diff.json", tmp_path / "diff.html"
    code = main(
        [
            "diff",
            "--base-url",
            a,
            "--api-key",
            KEY,
            "--other-url",
            b,
            "--profile",
            "full",
            "--no-progress",
            *select,
            "--json",
            str(out_json),
            "--html",
            str(out_html),
        ],
        console=console,
    )
    return code, json.loads(out_json.read_text()), out_html.read_text(), console.export_text()


def test_identical_deployments_differ_in_nothing(
    servers: tuple[str, Breaker, str], tmp_path: Path
) -> None:
    a, broken, b = servers
    broken.mode = None
    # schemathesis's requests too: they pair although each carries its own case id.
    code, report, _, text = _diff(a, b, tmp_path, [*SELECT, "-k", "schema:not_a_server_error"])
    assert (code, report["differing"], report["only_a"], report["only_b"]) == (0, [], [], [])
    assert report["paired_requests"] > 100
    assert f"0 of {report['paired_requests']} paired requests differ" in text


@pytest.mark.parametrize(
    ("mode", "field", "touched"),
    [
        ("wrong_code", "code", lambda ans: ans["code"] == "deadline_infeasible"),
        (
            "changed_message",
            "message",
            lambda ans: (ans["message"] or "").startswith("Invalid type"),
        ),
        ("missing_x_request_id", "headers", lambda ans: True),
    ],
)
def test_exactly_the_broken_answers_are_reported(
    servers: tuple[str, Breaker, str], tmp_path: Path, mode: str, field: str, touched
) -> None:
    a, broken, b = servers
    broken.mode = mode
    try:
        code, report, html, text = _diff(a, b, tmp_path)
    finally:
        broken.mode = None
    assert code == 1
    assert (report["only_a"], report["only_b"]) == ([], [])
    differing = report["differing"]
    assert differing and {tuple(d["fields"]) for d in differing} == {(field,)}
    assert all(touched(d["a"]) for d in differing)
    if field == "headers":
        assert all(
            set(d["a"]["headers"]) - set(d["b"]["headers"]) == {"x-request-id"} for d in differing
        )
        assert len(differing) == report["paired_requests"]
    else:
        assert all(d["a"][field] != d["b"][field] for d in differing)
    assert f"{len(differing)} of {report['paired_requests']} paired requests differ" in text
    # a section a differing request, its table a header and a row a differing field
    assert html.count("<section>") == len(differing)
    assert html.count("<tr>") == len(differing) + sum(len(d["fields"]) for d in differing)


def test_masking_and_shapes() -> None:
    assert masked(spec(), "see req_" + "a" * 32 + " at 2026-11-30T20:33:17Z") == "see … at …"
    assert shape({"b": [1, 2.5, "x"], "a": None, "c": True}) == {
        "a": "null",
        "b": {"array": 3, "items": ["integer", "number", "string"]},
        "c": "boolean",
    }
    assert where_differs(
        {"x": {"events": ["content", "error", "done"]}, "y": 1},
        {"x": {"events": ["content", "done"]}, "y": 1},
    ) == ("x.events", ["content", "error", "done"], ["content", "done"])


def test_an_unreachable_deployment_is_exit_code_2(servers: tuple[str, Breaker, str]) -> None:
    from tests.support.mock import free_port

    a, _, _ = servers
    dead = f"http://127.0.0.1:{free_port()}"
    console = Console(record=True, width=200)
    assert (
        main(
            [
                "diff",
                "--base-url",
                dead,
                "--api-key",
                KEY,
                "--other-url",
                a,
                "-k",
                "routes:*",
                "--no-progress",
            ],
            console=console,
        )
        == 2
    )
    assert main(["diff", "--base-url", a, "--api-key", KEY], console=console) == 2  # no --other-url


def test_a_dry_run_diff_lists_the_checks_and_sends_nothing(tmp_path: Path) -> None:
    a_app, b_app = Counting(create_app(MockConfig())), Counting(create_app(MockConfig()))
    console = Console(record=True, width=200)
    with serve(a_app) as a, serve(b_app) as b:
        code = main(
            [
                "diff",
                "--base-url",
                a,
                "--api-key",
                KEY,
                "--other-url",
                b,
                "--dry-run",
                "-k",
                "routes:*",
                "--json",
                str(tmp_path / "diff.json"),
            ],
            console=console,
        )
    text = console.export_text()
    assert (code, a_app.requests, b_app.requests) == (0, 0, 0)
    assert "routes:unknown_route" in text and "golden:" not in text
    assert f"diff: A {a} / B {b}; no request sent" in text
    assert not (tmp_path / "diff.json").exists()


def test_diff_refuses_a_report_it_does_not_write(
    servers: tuple[str, Breaker, str], tmp_path: Path
) -> None:
    """A diff writes JSON and HTML; --junit is a run's report, refused as bad usage (exit 2)."""
    a, _, b = servers
    junit = tmp_path / "diff.xml"
    assert (
        main(
            [
                "diff",
                "--base-url",
                a,
                "--api-key",
                KEY,
                "--other-url",
                b,
                "-k",
                "routes:health",
                "--junit",
                str(junit),
            ],
            console=Console(record=True),
        )
        == 2
    )
    assert not junit.exists()


def test_a_diff_against_a_server_of_huge_answers_is_bounded(
    servers: tuple[str, Breaker, str], tmp_path: Path
) -> None:
    """llama.cpp against the mock: 175 MB of JSON, a 17.5 MB message quoted whole, 22,581 lines.
    Each answer is bounded as a run's report bounds a body, the console shows a summary by
    status pair and by field and at most DIFF_ROWS_SHOWN rows."""
    from conformance.reports.console import DIFF_ROWS_SHOWN
    from conformance.wire.exchange import QUOTE_LIMIT_BYTES

    a, _, _ = servers
    huge = "x" * (
        64 * QUOTE_LIMIT_BYTES
    )  # far past what a report quotes (2 MiB cost a minute, proving no more)

    def refusing(environ, start_response):  # type: ignore[no-untyped-def]
        if environ.get("PATH_INFO") == "/v1/models":
            return create_app(MockConfig())(environ, start_response)
        body = json.dumps({"error": {"message": huge, "code": "500"}}).encode()
        start_response(
            "500 Internal Server Error",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    with serve(refusing) as b:
        code, report, html, text = _diff(
            a, b, tmp_path, ["-k", "golden:*", "--profile", "quick"]
        )  # full: B fails the premise, and sends no more
    assert code == 1 and len(report["differing"]) > DIFF_ROWS_SHOWN
    assert all(
        len(json.dumps(d["b"]["message"]).encode()) <= QUOTE_LIMIT_BYTES + 64
        for d in report["differing"]
    )
    assert (tmp_path / "diff.json").stat().st_size < len(
        report["differing"]
    ) * 4 * QUOTE_LIMIT_BYTES
    assert max(report["by_status"].values()) == report["by_status"]["400->500"]
    assert sum(report["by_status"].values()) == len(report["differing"])
    assert text.splitlines()[0].startswith("by status (A->B): 400->500 x")
    assert "more rows (--json or --html has every one)" in text
    assert len(text.splitlines()) < 4 * DIFF_ROWS_SHOWN + 20
