"""The robust: group passes against the mock under gunicorn, as it ships, and each of its
checks fails against a server broken in its way (the pattern of
test_conformance_discrimination.py): the mock with HostileBreaker in front
(gallery/hostile.py), the werkzeug development server (HTML error pages, no
pipelining), and a toy server that lets a request hide in a chunked body.

The server's spec is the project's with x-caps.body_read_seconds lowered, so that
robust:http.stalled_body runs in a second or two.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conformance.checks import REGISTRY
from conformance.engine.results import Outcome, RunReport
from gallery.hostile import MODES, Breakable, not_http_server, smuggling_server
from mock_server import MockConfig, create_app
from tests.support.mock import AUTH
from tests.support.suite import failed_ids, run_suite
from tests.support.wsgi import serve

KEY = "robust-test-key"
BODY_READ_SECONDS = 1
STALL_WAIT = 6.0  # how long robust:http.stalled_body waits; above BODY_READ_SECONDS
TIMEOUT = 8.0  # the run's per-request bound: a broken server's hang costs this much


def run_robust(url: str, *patterns: str, strict: bool = False) -> RunReport:
    return run_suite(
        url,
        *patterns or ("robust:*",),
        key=KEY,
        timeout=TIMEOUT,
        stall_seconds=STALL_WAIT,
        strict=strict,
    )


@pytest.fixture(scope="module")
def breakable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Breakable]:
    server = Breakable(tmp_path_factory.mktemp("robust"), BODY_READ_SECONDS)
    yield server
    server.close()


def test_the_robust_group_passes_against_the_mock_under_gunicorn(breakable: Breakable) -> None:
    breakable.mode(None)
    report = run_robust(breakable.url)
    problems = {
        r.id: r.reason or [f.message for f in r.findings] for r in report.failed + report.errors
    }
    assert problems == {}
    assert {r.id for r in report.results if r.outcome is Outcome.PASSED} == {
        c.id for c in REGISTRY if c.group == "robust" or c.premise
    }  # the premises run first


# mode -> the checks that must fail against it
CAUGHT_BY: dict[str, set[str]] = {
    "surrogate_500": {"robust:surrogate.escaped", "robust:surrogate.raw_bytes"},
    "json_500": {"robust:json.constants", "robust:json.huge_numbers", "robust:json.deep_nesting"},
    "steering_500": {
        "robust:steering.positions",
        "robust:steering.decoded_cap",
        "robust:steering.frames",
    },
    "priority_accepted": {"robust:priority.int64_string"},
    "echo": {"robust:echo.model", "robust:echo.unknown_key", "robust:echo.path"},
    "short_body_executed": {"robust:http.short_body"},
    "stall_forever": {"robust:http.stalled_body"},
    "unhealthy_after": {"robust:disconnect.mid_body", "robust:disconnect.mid_stream"},
    "path_500": {"robust:path.tricks"},
    "coding_read_plain": {"robust:http.transfer_coding"},
    "chunk_waits": {"robust:http.chunk_size"},
    "lists_unbounded": {"robust:lists.past_bound"},
}
# the werkzeug development server: HTML error pages (a front's own words: warnings, failed
# under --strict), and pipelined requests dropped (a finding)
DEV_SERVER_CAUGHT_BY = {
    "robust:headers.huge_value",
    "robust:headers.many",
    "robust:headers.long_request_line",
    "robust:http.framing",
    "robust:http.pipelining",
}
SMUGGLING_CAUGHT_BY = {"robust:http.cl_te"}


def test_every_robust_check_has_a_server_that_breaks_it() -> None:
    assert set(CAUGHT_BY) == set(MODES)
    caught = set().union(*CAUGHT_BY.values(), DEV_SERVER_CAUGHT_BY, SMUGGLING_CAUGHT_BY)
    assert caught == {c.id for c in REGISTRY if c.group == "robust"}


@pytest.mark.parametrize("mode", list(CAUGHT_BY))
def test_a_broken_mock_is_caught_by_the_named_robust_checks(
    mode: str, breakable: Breakable
) -> None:
    breakable.mode(mode)
    try:
        broken = run_robust(breakable.url, *CAUGHT_BY[mode])
    finally:
        breakable.mode(None)
    assert failed_ids(broken) == CAUGHT_BY[mode], {
        r.id: [f.message for f in r.findings] for r in broken.results
    }


def test_the_development_server_is_caught_by_the_header_and_pipelining_checks() -> None:
    """Its HTML pages are findings, not a front's warnings: no front was declared."""
    with serve(create_app(MockConfig())) as url:
        report = run_robust(url, *DEV_SERVER_CAUGHT_BY)
    assert failed_ids(report) == DEV_SERVER_CAUGHT_BY
    assert report.warned == []
    pages = [
        f.message for r in report.results for f in r.findings if "not the API's shape" in f.message
    ]
    assert pages and all(
        "answered by Server: Werkzeug/" in m
        and 'HTML title "' in m
        and "--front NAME declares it" in m
        for m in pages
    ), pages


def test_a_server_that_lets_a_request_hide_in_a_chunked_body_is_caught() -> None:
    with smuggling_server() as url:
        report = run_robust(url, *SMUGGLING_CAUGHT_BY)
    assert failed_ids(report) == SMUGGLING_CAUGHT_BY


def test_a_server_whose_answers_are_not_http_is_caught_saying_so() -> None:
    """A status line without a status code is a finding that says the answer is not
    HTTP/1.1 (the raw reader is h11's), never a made-up status."""
    models = create_app(MockConfig()).test_client().get("/v1/models", headers=AUTH).data
    with not_http_server(models) as url:
        report = run_robust(url, "robust:json.constants")
    assert failed_ids(report) == {"robust:json.constants"}
    messages = [f.message for r in report.results for f in r.findings]
    assert messages and all("an answer that is not HTTP/1.1" in m for m in messages), messages
