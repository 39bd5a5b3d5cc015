"""The gate on servers no one here wrote (issue 31): each defect it showed on llama.cpp's server
and LiteLLM's proxy, reproduced with a server of ours that behaves as the peer did
(gallery/peers.py), and the gate's promises held there: its token ceiling, no false
finding, each finding on the check that caused it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.checks.premise import END_MAX_TOKENS
from conformance.checks.premise import MAX_TOKENS as PREMISE_MAX_TOKENS
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import ExitCode, Outcome, RunReport, exit_code
from conformance.engine.runner import RESENT, run
from conformance.wire.ledger import CHEAP_TOKENS
from conformance.wire.token_cost import CostModel
from contract import spec
from gallery.peers import CONTEXT, RESETS_PATH, Peer, live_peer
from mock_server import create_app
from mock_server.config import MockConfig
from tests.support.wsgi import serve

MODEL = spec().default_model


@contextmanager
def peer(*ways: str, **settings: object) -> Iterator[tuple[Peer, str]]:
    app = Peer(create_app(MockConfig(max_model_len={MODEL: CONTEXT}, **settings)), ways)  # type: ignore[arg-type]
    with serve(app) as url:
        yield app, url


def gate(url: str, *patterns: str, profile: str = "full") -> RunReport:
    config = RunConfig(url, "peer-test-key", profile=profile, select=patterns)
    report = run(config, select(REGISTRY, config))
    assert not report.errors, [(r.id, r.reason) for r in report.errors]
    return report


def outcomes(report: RunReport) -> dict[str, RunReport]:
    return {r.id: r for r in report.results}  # type: ignore[misc]


def messages(report: RunReport) -> list[tuple[str, str]]:
    return [(r.id, f.message) for r in report.results for f in r.findings]


# -- 1, 2: the token ceiling --------------------------------------------------------------


def test_a_server_that_reads_max_tokens_0_as_unlimited_spends_no_more_than_a_closed_stream() -> (
    None
):
    """llama.cpp generated 2,044 tokens for golden:range.max_tokens.minimum.past: the ledger priced
    max_tokens 0 at nothing. Priced at the whole context now, it goes as a stream closed after
    its first event, and is refused or charged the closed stream's price (CHEAP_TOKENS: the
    server may write on until it sees the close)."""
    assert CostModel.of(spec(), CONTEXT).body({"prompt": [0], "max_tokens": 0}) == CONTEXT - 1
    with peer("zero unlimited", eos_rate=0.0) as (_, url):
        report = gate(url, "golden:range.max_tokens.*", "golden:type.max_tokens.*", profile="quick")
    case = outcomes(report)["golden:range.max_tokens.minimum.past"]
    assert case.outcome is Outcome.FAILED and case.findings[0].message == "status 200, expected 400"
    assert case.tokens <= CHEAP_TOKENS, case.tokens
    assert report.tokens <= report.token_ceiling and not report.overspent


def test_the_quick_and_full_profiles_keep_the_ceiling_on_a_server_like_llama_cpp() -> None:
    with peer(
        "zero unlimited",
        "no health",
        "reset after 500",
        "ignores fields",
        "no max_model_len",
        eos_rate=0.0,
    ) as (_, url):
        for profile in ("quick", "full"):
            report = gate(
                url,
                "golden:*",
                "schema:*",
                "caps:*",
                "usage:*",
                "effects:ignore_eos",
                profile=profile,
            )
            assert report.tokens <= report.token_ceiling, (profile, report.tokens)
            assert not report.overspent, report.overspent


def test_a_server_that_ignores_max_tokens_is_found_by_the_premise_for_three_tokens() -> None:
    """premise:max_tokens (a stream the gate closes after 3 events) finds it before anything else
    may generate; every check that could is then UNPROVEN, saying why, and the run not conformant."""
    with peer("max_tokens x4") as (_, url):
        report = gate(url, "usage:arithmetic", "routes:*")
    got = outcomes(report)
    assert got["premise:max_tokens"].outcome is Outcome.FAILED
    assert (
        got["premise:max_tokens"]
        .findings[0]
        .message.startswith("the server wrote 3 tokens for max_tokens 2")
    )
    assert got["usage:arithmetic"].outcome is Outcome.UNPROVEN
    assert (
        "a request's price cannot be bounded, so none that could generate is sent"
        in got["usage:arithmetic"].reason
    )
    assert report.tokens <= PREMISE_MAX_TOKENS + 1 and exit_code(report) is ExitCode.FAILED


def test_a_server_past_max_tokens_only_without_stream_is_charged_what_its_usage_says() -> None:
    """Its answers are text alone, which proves no overspend; the meter charges its usage, which
    is more than the price, and usage:arithmetic finds it. The answer's counted twin, drawn for
    half the eligible plain answers (conformance/wire/twins.py), overspends alike and is charged
    its usage too."""
    with peer("max_tokens x4 unstreamed") as (_, url):
        report = gate(url, "usage:arithmetic", "routes:*")
    found = outcomes(report)["usage:arithmetic"]
    assert found.outcome is Outcome.FAILED and found.findings[0].message == "the usage differs"
    said = found.findings[0].received["completion_tokens"]
    assert said > found.findings[0].expected["completion_tokens"]
    assert found.tokens in (said, 2 * said)


# -- 3: no false findings ---------------------------------------------------------------------

ROBUST = ("robust:json.*", "robust:surrogate.*", "robust:steering.*", "robust:priority.*")


def test_a_keyed_or_absent_health_is_no_finding_of_the_robust_checks() -> None:
    for way in ("keyed health", "no health"):
        with peer(way) as (_, url):
            report = gate(url, *ROBUST)
        assert not [m for m in messages(report) if "unhealthy" in m[1]], (way, messages(report))
        assert report.results and all(r.outcome is Outcome.PASSED for r in report.results), (
            way,
            messages(report),
        )


def test_a_server_whose_health_changes_after_a_check_is_unhealthy_afterwards() -> None:
    """The other side: health is judged against what /health answered before the checks."""
    with peer() as (app, url):
        calls = {"n": 0}
        inner = app.app

        def failing_later(environ, start_response):  # type: ignore[no-untyped-def]
            if environ.get("PATH_INFO") == "/health":
                calls["n"] += 1
                if calls["n"] > 2:  # GET /health with and without the key before the checks
                    start_response("503 Service Unavailable", [("Content-Length", "0")])
                    return []
            return inner(environ, start_response)

        app.app = failing_later
        report = gate(url, "robust:json.constants")
    assert [m for _, m in messages(report) if "unhealthy" in m] == [
        "the server is unhealthy afterwards: GET /health answered 503, 200 before the checks"
    ]


def test_usage_with_keys_beside_the_counts_passes_usage_arithmetic() -> None:
    with peer("usage details") as (_, url):
        report = gate(url, "usage:arithmetic")
    assert outcomes(report)["usage:arithmetic"].outcome is Outcome.PASSED, messages(report)


def test_usage_with_wrong_counts_still_fails_usage_arithmetic() -> None:
    with peer("max_tokens x4 unstreamed") as (_, url):
        report = gate(url, "usage:arithmetic")
    assert any(m == "the usage differs" for _, m in messages(report)), messages(report)


# -- 4: no misplaced findings -----------------------------------------------------------------


def test_a_connection_dropped_after_a_bare_500_is_charged_to_no_later_check() -> None:
    """llama.cpp drops a kept-alive connection after a bare 500: the next request on it got no
    answer, and its check the finding. The gate does not send another request on a connection
    that answered a 5xx now; a client that does is dropped."""
    with live_peer("reset after 500") as url:
        with httpx.Client(
            base_url=url, headers={"Authorization": "Bearer k", "Content-Type": "application/json"}
        ) as plain:
            assert plain.post("/v1/completions", content=b"{").status_code == 500
            with pytest.raises(httpx.RemoteProtocolError):
                plain.get("/v1/models")
        assert httpx.get(url + RESETS_PATH).json()["resets"] == 1
        report = gate(url, "golden:http.*", "routes:*", "headers:*", profile="quick")
        resets = httpx.get(url + RESETS_PATH).json()["resets"]
    assert resets == 1, "the gate sent a request on a connection that had answered a 5xx"
    assert not [m for m in messages(report) if "no HTTP response" in m[1] or RESENT in m[1]], (
        messages(report)
    )
    failed = {r.id for r in report.failed}
    assert failed == {"golden:http.invalid_json", "golden:http.nan", "golden:http.not_object"}, (
        messages(report)
    )


def test_checks_read_through_an_ignored_field_skip_and_name_it() -> None:
    with peer("ignores fields", eos_rate=0.0) as (_, url):  # no end token but the ones asked for
        report = gate(
            url,
            "effects:ignore_eos",
            "effects:skip_special_tokens",
            "effects:bad_words",
            "effects:steering.decoding",
            "semantics:stop_string",
            "semantics:finish_reason.eos",
            "shape:token_ids",
            "stream:text_equals_non_stream",
            "usage:arithmetic",
        )
    got = outcomes(report)
    # a premise the server failed: not run, and the run not proven by them
    for check in ("effects:ignore_eos", "effects:skip_special_tokens", "effects:steering.decoding"):
        assert (
            got[check].outcome is Outcome.UNPROVEN
            and "allowed_token_ids is not applied" in got[check].reason
        ), check
    for check in ("effects:bad_words", "semantics:stop_string"):
        assert (
            got[check].outcome is Outcome.UNPROVEN
            and "return_token_ids is not applied" in got[check].reason
        ), check
    # the checks of the ignored fields themselves fail
    assert got["semantics:finish_reason.eos"].outcome is Outcome.FAILED
    assert got["shape:token_ids"].outcome is Outcome.FAILED
    assert got["usage:arithmetic"].outcome is Outcome.FAILED
    assert got["stream:text_equals_non_stream"].outcome is Outcome.UNPROVEN
    assert "n is not applied" in got["stream:text_equals_non_stream"].reason


# -- 5: said, not assumed ---------------------------------------------------------------------


def test_numbers_the_server_never_gave_are_said_and_bound_nothing() -> None:
    with peer("no max_model_len") as (_, url):
        report = gate(url, "caps:context.*", "caps:prompt.*", "golden:caps.*")
    assert report.server_max_model_len is None
    assert report.assumed["max_model_len"] == spec().models[MODEL].max_model_len
    assert (
        report.context_said()
        == f"max_model_len {report.assumed['max_model_len']} (the spec's: the server gave none)"
    )
    assert any("does not give max_model_len" in line for line in report.notes())
    checks = [r for r in report.results if not r.id.startswith("premise:")]
    assert checks and all(
        r.outcome is Outcome.UNPROVEN and "does not give" in r.reason for r in checks
    ), [(r.id, r.reason) for r in checks]
    assert exit_code(report) is ExitCode.NOT_PROVEN
    assert report.tokens <= PREMISE_MAX_TOKENS + END_MAX_TOKENS  # the premises alone


def test_numbers_the_server_gave_are_its_own() -> None:
    with peer() as (_, url):
        report = gate(url, "caps:context.*")
    assert report.server_max_model_len == CONTEXT and "max_model_len" not in report.assumed
    assert report.context_said() == f"max_model_len {CONTEXT}"
    assert all(r.outcome is Outcome.PASSED for r in report.results), messages(report)


# -- a reset is never a front's warning (issue 30, part 4) -------------------------------------


@contextmanager
def resetting() -> Iterator[str]:
    """A server that answers GET /v1/models and /health and resets every other connection
    (RST, not a close), as one that dies on dot-segment paths does."""
    import socket
    import struct
    import threading

    models = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            head = conn.recv(65536)
            if head.startswith((b"GET /v1/models ", b"GET /health ")):
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(models), models)
                )
            else:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def loop() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_server_that_resets_the_connection_fails_and_is_never_warned() -> None:
    with resetting() as url:
        report = gate(
            url, "robust:path.tricks", "robust:headers.long_request_line", profile="quick"
        )
    for r in report.results:
        assert r.outcome is Outcome.FAILED, (r.id, r.outcome, messages(report))
        assert not any(f.warning for f in r.findings)
        assert any("was reset without an answer" in f.message for f in r.findings), messages(report)
