"""The token ledger: worst-case costs, the run order, checks skipped for the ceiling, bounded quotes.

A fake server (httpx.MockTransport) that conforms to nothing: it accepts every
request and generates what the request allows, up to its max_model_len.
"""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from typing import Any

import httpx
import pytest
from rich.console import Console

from conformance.checks import REGISTRY
from conformance.checks.golden import refusal_request
from conformance.checks.golden import worst_case as golden_worst
from conformance.checks.premise import END_MAX_TOKENS
from conformance.checks.premise import MAX_TOKENS as PREMISE_MAX_TOKENS
from conformance.checks.schema import Ledger, kept_by, schemathesis_spec
from conformance.engine.config import DEFAULT_TOKEN_CEILING, RunConfig
from conformance.engine.context import Context
from conformance.engine.events import CheckStarted, Event
from conformance.engine.registry import Check, select, token_bound
from conformance.engine.results import CheckResult, ExitCode, Finding, Outcome, exit_code
from conformance.engine.runner import OVER_CEILING, run
from conformance.golden import load_cases
from conformance.golden.cheap import OUT as CHEAP_FILE
from conformance.golden.cheap import render as render_cheap
from conformance.reports.console import print_summary
from conformance.reports.html import render
from conformance.reports.junit import build
from conformance.wire.client import Client
from conformance.wire.exchange import QUOTE_LIMIT_BYTES, Exchange, quote
from conformance.wire.ledger import CHEAP_TOKENS, OverCeiling
from conformance.wire.ledger import Ledger as TokenLedger
from conformance.wire.sse import parse_lines
from conformance.wire.token_cost import CostModel, TokenFields, generating_paths, worst_case
from contract import spec
from gallery.lax import EOS, SERVED_LEN, DropsFirst, LaxServer

MODEL = spec().default_model
COMPLETIONS = "/v1/completions"


# -- the worst case of one request ------------------------------------------------------------


@pytest.mark.parametrize(
    "body, worst",
    [
        ({"prompt": [0], "max_tokens": 1, "n": 1}, 1),
        ({"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 4}, 3 * 2 * 4),
        ({"prompt": [[0, 1], [2]], "max_tokens": 5}, 2 * 5),
        ({"prompt": [0] * 10}, SERVED_LEN - 10),  # no max_tokens: the whole context
        ({"prompt": "hi"}, SERVED_LEN),
        ({"prompt": [0], "max_tokens": "4"}, 4),  # what a lax server reads
        ({"prompt": [0], "max_tokens": 4.0, "n": "2"}, 8),
        ({"prompt": [0], "max_tokens": 1.5}, SERVED_LEN - 1),  # unreadable: the server's default
        ({"prompt": [0], "max_tokens": 10**9}, SERVED_LEN - 1),
        # a length no server may read as a bound: llama.cpp reads 0 as "until the context ends"
        ({"prompt": [0], "max_tokens": 0}, SERVED_LEN - 1),
        ({"prompt": [0], "max_tokens": -1}, SERVED_LEN - 1),
        ({"prompt": [0], "max_tokens": None}, SERVED_LEN - 1),
        ({"prompt": [0], "max_tokens": "x"}, SERVED_LEN - 1),
        ({"prompt": [0], "max_tokens": 4, "max_completion_tokens": 0}, SERVED_LEN - 1),
        ({"prompt": [0], "max_tokens": 4, "max_completion_tokens": 6}, 6),
        ({"prompt": [0], "max_tokens": 0, "n": 0}, SERVED_LEN - 1),
        ({"prompt": [0], "max_tokens": 3, "n": 2, "best_of": 5}, 15),
        (
            {"prompt": [0], "max_tokens": 50, "allowed_token_ids": sorted(EOS)},
            50,
        ),  # not yet trusted
        ({"messages": [{"role": "user", "content": "hi"}]}, SERVED_LEN),
        ([1, 2], 0),
    ],
)
def test_worst_case_of_a_body(body: Any, worst: int) -> None:
    fields = TokenFields.of(spec())
    assert worst_case(body, SERVED_LEN, fields) == worst
    assert worst_case(json.dumps(body).encode(), SERVED_LEN, fields) == worst


def test_end_tokens_shorten_only_once_the_server_showed_it_honours_them() -> None:
    body = {"prompt": [0], "max_tokens": 50, "n": 2, "allowed_token_ids": sorted(EOS)}
    assert CostModel.of(spec(), SERVED_LEN).body(body) == 100
    assert (
        CostModel(SERVED_LEN, generating_paths(spec()), TokenFields.of(spec()), EOS).body(body) == 2
    )
    assert (
        CostModel(SERVED_LEN, generating_paths(spec()), TokenFields.of(spec()), EOS).body(
            {**body, "ignore_eos": True}
        )
        == 100
    )
    assert (
        CostModel(SERVED_LEN, generating_paths(spec()), TokenFields.of(spec()), EOS).body(
            {**body, "allowed_token_ids": [*EOS, 5]}
        )
        == 100
    )


def test_only_posts_with_a_json_body_can_generate() -> None:
    cost = CostModel.of(spec(), SERVED_LEN)
    assert COMPLETIONS in generating_paths(spec())
    assert cost.request("GET", COMPLETIONS, b'{"prompt": "x"}') == 0
    assert cost.request("POST", "/v1/models", b'{"prompt": "x"}') == 0
    assert cost.request("POST", COMPLETIONS, b"not json") == 0
    assert cost.request("POST", COMPLETIONS, b'{"prompt": "x"}') == SERVED_LEN
    assert (
        cost.request(
            "POST", COMPLETIONS, b'{"prompt": "x"}', stop_after_events=1, early_close=CHEAP_TOKENS
        )
        == CHEAP_TOKENS
    )


# -- a server that conforms to nothing -------------------------------------------------------


def _post(body: dict[str, Any]) -> Any:
    def func(ctx: Context) -> None:
        ctx.client.post(COMPLETIONS, {"model": MODEL, "prompt": [0], **body})

    return func


def _get(ctx: Context) -> None:
    ctx.client.request("GET", "/v1/models")


def checks() -> list[Check]:
    return [
        Check("a:dear", _post({"max_tokens": 120}), doc="d", tokens=1, worst=120),
        Check("a:free", _get, doc="d"),
        Check("b:cheap", _post({"max_tokens": 1, "n": 1}), doc="d", worst=1),
        Check(
            "b:middle",
            _post({"max_tokens": 40}),
            doc="d",
            tokens=1,
            worst=lambda config, cost: cost.body({"prompt": [0], "max_tokens": 40}),
        ),
        Check("c:free", _get, doc="d"),
        # declares nothing but sends a request without max_tokens: the client's ledger stops it
        Check("c:undeclared", _post({}), doc="d"),
    ]


def _run(ceiling: int, order: list[str]) -> tuple[Any, LaxServer]:
    server = LaxServer()

    def progress(event: Event) -> None:
        if isinstance(event, CheckStarted):
            order.append(event.check.id)

    config = RunConfig("http://lax.test", "k", profile="full", token_ceiling=ceiling)
    return run(config, checks(), handlers=[progress], transport=httpx.MockTransport(server)), server


def test_the_ledger_runs_the_cheap_first_and_names_what_the_ceiling_kept_out() -> None:
    order: list[str] = []
    report, server = _run(100, order)
    # checks that cannot generate first, then by worst case; undeclared (0) ones are free to start
    assert order == [
        "premise:max_tokens",
        "premise:end_tokens",  # what the ledger relies on, first
        "a:free",
        "c:free",
        "c:undeclared",
        "b:cheap",
        "b:middle",
        "a:dear",
    ]
    # the report keeps the selection's order, after the premises it ran first
    assert [r.id for r in report.results] == [
        "premise:max_tokens",
        "premise:end_tokens",
        *(c.id for c in checks()),
    ]
    outcomes = {r.id: r.outcome for r in report.results if not r.id.startswith("premise:")}
    # neither fits the ceiling of 100 at all: the option's choice, not the server's doing
    assert outcomes == {
        "a:dear": Outcome.SKIPPED,
        "a:free": Outcome.PASSED,
        "b:cheap": Outcome.PASSED,
        "b:middle": Outcome.PASSED,
        "c:free": Outcome.PASSED,
        "c:undeclared": Outcome.SKIPPED,
    }
    probe = PREMISE_MAX_TOKENS + 1  # the premises: this server honours both
    assert report.tokens == probe + 1 + 40 <= 100
    assert report.ceiling_skipped == ["a:dear", "c:undeclared"]
    # the needed ceiling: what was spent, the skipped checks' plans, and what the ledger withheld
    # from the undeclared one (its request without max_tokens)
    assert report.ceiling_needed == report.tokens + 120 + (SERVED_LEN - 1)
    dear = next(r for r in report.results if r.id == "a:dear")
    assert dear.reason == (
        f"{OVER_CEILING}: it may generate 120 tokens if the server does not conform; "
        f"{probe + 41} of the ceiling of 100 are spent (--token-ceiling {probe + 41 + 120} "
        f"would run it)"
    )
    undeclared = next(r for r in report.results if r.id == "c:undeclared")
    assert undeclared.reason.startswith(
        f"{OVER_CEILING}: POST {COMPLETIONS} was not sent: it may generate {SERVED_LEN - 1} tokens"
    )
    assert all("max_tokens" in p for p in server.posts)  # the request without one never went out


def test_a_ceiling_that_holds_everything_skips_nothing() -> None:
    report, _ = _run(1000, [])
    assert report.ceiling_skipped == [] and report.ceiling_needed is None
    assert report.count(Outcome.SKIPPED) == 0
    assert report.tokens == PREMISE_MAX_TOKENS + 1 + 120 + 1 + 40 + (
        SERVED_LEN - 1
    )  # premises first


def test_checks_that_cannot_generate_run_whatever_the_ledger_says() -> None:
    report, server = _run(0, [])
    assert {r.id for r in report.results if r.outcome is Outcome.PASSED} == {"a:free", "c:free"}
    assert report.tokens == 0 and server.posts == []
    # the premises could not run either, and nothing relies on them
    assert report.ceiling_skipped == [
        "premise:max_tokens",
        "premise:end_tokens",
        "a:dear",
        "b:cheap",
        "b:middle",
        "c:undeclared",
    ]


def test_requests_withheld_inside_a_check_are_noted_in_every_report() -> None:
    from conformance.engine.results import RunReport

    report = RunReport(
        "http://x",
        MODEL,
        "full",
        token_ceiling=10,
        ceiling_notes=["schemathesis (negative data) did not send 4 of 351 requests"],
    )
    assert report.ceiling_note() == report.ceiling_notes[0]
    assert report.to_dict()["summary"]["ceiling_notes"] == report.ceiling_notes
    props = {p.get("name"): p.get("value") for p in build(report).iter("property")}
    assert props["ceiling_note_0"] == report.ceiling_notes[0]
    assert report.ceiling_notes[0] in render(report)


def test_every_report_names_the_checks_skipped_for_the_ceiling() -> None:
    report, _ = _run(100, [])
    note = report.ceiling_note()
    assert "a:dear, c:undeclared" in note and f"--token-ceiling {report.ceiling_needed}" in note
    summary = report.to_dict()["summary"]
    assert summary["skipped_for_ceiling"] == ["a:dear", "c:undeclared"]
    assert summary["token_ceiling_needed"] == report.ceiling_needed
    props = {p.get("name"): p.get("value") for p in build(report).iter("property")}
    assert props["skipped_for_ceiling"] == "a:dear,c:undeclared"
    assert props["token_ceiling_needed"] == str(report.ceiling_needed)
    assert note.replace(">", "&gt;") in render(report)
    console = Console(record=True, width=400)
    print_summary(report, console)
    assert note in console.export_text()


# -- the suite's own checks against such a server -----------------------------------------------


def test_the_full_profile_plans_within_the_ceiling_for_a_server_that_does_not_conform() -> None:
    config = RunConfig("http://x", "k", profile="full")
    selected = select(REGISTRY, config)
    served = CostModel(
        spec().models[MODEL].max_model_len, generating_paths(spec()), TokenFields.of(spec()), EOS
    )
    assert token_bound(selected, config, served) <= DEFAULT_TOKEN_CEILING
    # every check that expects a refusal asks for little, however the server answers
    refused = [c for c in load_cases() if c.expect_status != 200]
    dear = {
        c.id: golden_worst(c, served, config)
        for c in refused
        if golden_worst(c, served, config) > CHEAP_TOKENS
    }
    assert dear == {}


def test_the_cheap_golden_requests_are_fresh() -> None:
    """python -m conformance.golden.cheap rewrites the file."""
    assert CHEAP_FILE.read_text(encoding="utf-8") == render_cheap(spec())


def test_a_refused_golden_case_keeps_its_body_and_gains_only_the_cheap_fields() -> None:
    changed = 0
    for case in load_cases():
        body, _ = refusal_request(case)
        if body is None:
            continue
        changed += 1
        original = json.loads(case.body or b"{}")
        assert {k: body[k] for k in original} == original, case.id
        assert set(body) - set(original) <= {"max_tokens", "n", "stream", "allowed_token_ids"}, (
            case.id
        )
    assert changed


# -- schemathesis through the ledger -------------------------------------------------------------


class _Op:
    method, path = "post", COMPLETIONS


class _Case:
    operation = _Op()
    media_type = "application/json"

    def __init__(self, body: Any) -> None:
        self.body = body


def test_negative_schemathesis_bodies_get_the_cheap_fields_and_the_ceiling_holds() -> None:
    with Client("http://x", "k", transport=httpx.MockTransport(LaxServer())) as client:
        client.ledger.ceiling, client.ledger.cost = 10, CostModel.of(spec(), SERVED_LEN)
        ledger = Ledger(client, "negative", schemathesis_spec(spec()), spec())
        case = _Case({"model": MODEL, "prompt": 7})
        ledger.before(case)
        assert case.body == {"model": MODEL, "prompt": 7, "max_tokens": 1, "n": 1}
        client.ledger.ceiling = 1000
        kept = _Case({"model": MODEL, "prompt": [0], "max_tokens": "x", "n": 3})
        ledger.before(
            kept
        )  # the broken max_tokens stays; n, which no rule broken reads, drops to 1
        assert kept.body == {"model": MODEL, "prompt": [0], "max_tokens": "x", "n": 1}
        client.ledger.tokens = 1000
        with pytest.raises(OverCeiling):
            ledger.before(_Case({"model": MODEL, "prompt": 7}))
        assert ledger.withheld == 1
        positive = Ledger(client, "positive", schemathesis_spec(spec()), spec())
        body = {"model": MODEL, "prompt": [0]}
        with pytest.raises(OverCeiling):
            positive.before(_Case(body))
        assert body == {"model": MODEL, "prompt": [0]}


REQUEST = spec().raw["components"]["schemas"]["CompletionRequest"]
N_TOO_LOW = REQUEST["properties"]["n"]["minimum"] - 1
MAX_TOKENS_TOO_HIGH = spec().caps["max_tokens_without_stream"] + 1  # without stream


def _wsgi(server: LaxServer) -> Any:
    """The lax server as a WSGI app, for schemathesis's own transport."""

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        content = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        reply = server(
            httpx.Request(
                environ["REQUEST_METHOD"], f"http://lax.test{environ['PATH_INFO']}", content=content
            )
        )
        start_response(f"{reply.status_code} OK", [("Content-Type", "application/json")])
        return [reply.content]

    return app


def _sent_through_schemathesis(body: dict[str, Any]) -> tuple[dict[str, Any], Client]:
    """One negative case of /v1/completions through schemathesis's call and the ledger's hooks:
    the body the lax server received, and the client that kept the ledger."""
    import schemathesis

    raw = schemathesis_spec(spec())
    schema = schemathesis.openapi.from_dict(raw)
    case = schema[COMPLETIONS]["POST"].Case(body=copy.deepcopy(body), media_type="application/json")
    server = LaxServer()
    client = Client("http://lax.test", "k", transport=httpx.MockTransport(server))
    client.ledger.ceiling, client.ledger.cost = 10**9, CostModel.of(spec(), SERVED_LEN)
    with kept_by(schema, Ledger(client, "negative", raw, spec())):
        case.call(app=_wsgi(server), base_url="http://lax.test")
    client.close()
    assert len(server.posts) == 1
    return server.posts[0], client


def _errors(body: dict[str, Any]) -> list[str]:
    from conformance.engine.shapes import schema_errors

    return schema_errors(body, {**REQUEST, "components": spec().raw["components"]})


def test_a_negative_case_broken_elsewhere_is_sent_with_max_tokens_1() -> None:
    body = {"model": MODEL, "prompt": [0], "n": N_TOO_LOW, "max_tokens": 3017}
    sent, client = _sent_through_schemathesis(body)
    assert sent == {**body, "max_tokens": 1}
    assert _errors(sent) == _errors(body) != []  # broken as it was, and only so
    assert client.ledger.tokens == 1  # what the lax server wrote for it


def test_a_negative_case_keeps_the_fields_it_is_broken_by() -> None:
    # max_tokens is the broken field: it stays, and the absent n is added as 1
    body = {"model": MODEL, "prompt": [0], "max_tokens": MAX_TOKENS_TOO_HIGH}
    sent, client = _sent_through_schemathesis(body)
    assert sent == {**body, "n": 1}
    assert (
        client.ledger.tokens == MAX_TOKENS_TOO_HIGH
    )  # the ledger counts what the lax server wrote
    # greedy_n reads n (n > 1 with temperature 0): n stays, max_tokens drops to 1
    greedy = {"model": MODEL, "prompt": [0], "n": 3, "temperature": 0, "max_tokens": 3017}
    sent, _ = _sent_through_schemathesis(greedy)
    assert sent == {**greedy, "max_tokens": 1} and _errors(sent) == _errors(greedy) != []
    # max_tokens_required (n > 1 without max_tokens): adding max_tokens would mend it, so it is not added
    unbounded = {"model": MODEL, "prompt": [0], "n": 3}
    sent, _ = _sent_through_schemathesis(unbounded)
    assert sent == unbounded and _errors(sent) != []


# -- bounded quotes ---------------------------------------------------------------------------------


def test_quotes_are_cut_with_their_full_length_stated() -> None:
    assert quote("short") == "short"
    text = "é" * QUOTE_LIMIT_BYTES  # 2 bytes each
    cut = quote(text)
    assert cut.endswith(f"... (cut: {2 * QUOTE_LIMIT_BYTES} bytes in all)")
    assert len(cut.split("... (cut:")[0].encode()) <= QUOTE_LIMIT_BYTES


def test_a_finding_quotes_a_few_kb_of_a_huge_response() -> None:
    huge = "x" * (30 * QUOTE_LIMIT_BYTES)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"text": huge})

    with Client("http://x", "k", transport=httpx.MockTransport(handler)) as client:
        reply = client.post("/v1/chat/completions", {"messages": []})
    finding = Finding(
        "status 200",
        expected=400,
        received={"status": 200, "body": reply.data},
        exchange=reply.exchange,
    )
    result = CheckResult(
        "routes:x", (), "", Outcome.FAILED, [finding, Finding("again", exchange=reply.exchange)]
    )
    out = json.dumps(result.to_dict())
    assert len(out) < 3 * QUOTE_LIMIT_BYTES
    assert "bytes in all)" in result.to_dict()["findings"][0]["received"]
    assert result.to_dict()["findings"][1]["exchange"] == {"same_as_finding": 0}
    assert len(reply.exchange.response_body or "") < QUOTE_LIMIT_BYTES + 64


def test_junit_and_html_stay_bounded() -> None:
    ex = Exchange("POST", "http://x/v1/completions", {}, "{}", 200, {}, quote("y" * 10**6))
    report_findings = [Finding(f"f{i}", received="z" * 10**5, exchange=ex) for i in range(3)]
    from conformance.engine.results import RunReport

    report = RunReport(
        "http://x",
        MODEL,
        "full",
        results=[CheckResult("golden:x", (), "", Outcome.FAILED, report_findings)],
    )
    assert len(render(report)) < 4 * QUOTE_LIMIT_BYTES + 8000
    assert len(ET.tostring(build(report))) < 4 * QUOTE_LIMIT_BYTES


def test_the_end_tokens_are_trusted_only_when_the_probe_stops_at_once() -> None:
    body = {"max_tokens": 100, "allowed_token_ids": sorted(EOS)}
    check = Check(
        "a:cheap_if_honoured",
        _post(body),
        doc="d",
        tokens=1,
        worst=lambda config, cost: cost.body({"prompt": [0], **body}),
    )

    class Deaf(LaxServer):  # ignores allowed_token_ids
        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.method == "POST":
                request_body = json.loads(request.content)
                request_body.pop("allowed_token_ids", None)
                request = httpx.Request("POST", request.url, json=request_body)
            return super().__call__(request)

    config = RunConfig("http://lax.test", "k", profile="full", token_ceiling=50)
    honours = run(config, [check], transport=httpx.MockTransport(LaxServer()))
    # planned after the premises: the premises' worst cases (3 and 2) and the check's, trusted at 1
    assert [r.outcome for r in honours.results] == [
        Outcome.PASSED
    ] * 3 and honours.token_plan == 3 + 2 + 1
    deaf = run(config, [check], transport=httpx.MockTransport(Deaf()))
    assert deaf.ceiling_skipped == ["a:cheap_if_honoured"]
    assert deaf.tokens == PREMISE_MAX_TOKENS + END_MAX_TOKENS  # the premises, written in full
    premise = next(r for r in deaf.results if r.id == "premise:end_tokens")
    assert premise.outcome is Outcome.FAILED  # it ignores allowed_token_ids: a finding


def test_a_shared_spend_skipped_for_the_ceiling_is_not_paid_by_the_next_check() -> None:
    spends: list[str] = []

    def shared_run(ctx: Context) -> None:
        if "shared" not in ctx.memo:
            ctx.memo["shared"] = True
            spends.append("run")
            ctx.client.post(COMPLETIONS, {"model": MODEL, "prompt": [0], "max_tokens": 60})

    shared = [Check(f"s:{i}", shared_run, doc="d", tokens=60, shares="one") for i in range(3)]
    config = RunConfig("http://lax.test", "k", profile="full", token_ceiling=50)
    report = run(config, shared, transport=httpx.MockTransport(LaxServer()))
    assert spends == [] and report.ceiling_skipped == ["s:0", "s:1", "s:2"]
    assert report.ceiling_needed == report.tokens + 60  # the shared spend, once
    report = run(
        RunConfig("http://lax.test", "k", profile="full", token_ceiling=100),
        shared,
        transport=httpx.MockTransport(LaxServer()),
    )
    assert spends == ["run"] and [r.outcome for r in report.results] == [Outcome.PASSED] * (2 + 3)


def test_a_check_the_servers_spending_kept_out_is_unproven_one_the_ceiling_never_held_is_skipped() -> (
    None
):
    """What the server generated beyond a conforming server's bound (b:spends: 30 where 1 is
    its bound) took the room of b:middle (40 of 50 fit): UNPROVEN, the run not proven; a:dear
    (120) never fits 50: the option's choice, SKIPPED."""
    hungry = [
        Check("a:dear", _post({"max_tokens": 120}), doc="d", tokens=1, worst=120),
        Check("b:spends", _post({"max_tokens": 30}), doc="d", tokens=1, worst=30),
        Check("b:middle", _post({"max_tokens": 40}), doc="d", tokens=40, worst=40),
    ]
    config = RunConfig("http://lax.test", "k", profile="full", token_ceiling=50)
    report = run(config, hungry, transport=httpx.MockTransport(LaxServer()))
    got = {r.id: r.outcome for r in report.results}
    assert (got["a:dear"], got["b:spends"], got["b:middle"]) == (
        Outcome.SKIPPED,
        Outcome.PASSED,
        Outcome.UNPROVEN,
    )
    assert exit_code(report) is ExitCode.NOT_PROVEN


def test_a_check_a_conforming_servers_spending_leaves_no_room_for_is_the_ceilings_choice() -> None:
    """Issue 64, item 7: b:spends generates 30 and a conforming server may (its bound is 30), so
    b:middle (40) not fitting a ceiling of 50 is the user's --token-ceiling, never the server's
    doing: SKIPPED, with the ceiling that would run it, and the run conformant."""
    fair = [
        Check("b:spends", _post({"max_tokens": 30}), doc="d", tokens=30, worst=30),
        Check("b:middle", _post({"max_tokens": 40}), doc="d", tokens=40, worst=40),
    ]
    config = RunConfig("http://lax.test", "k", profile="full", token_ceiling=50)
    report = run(config, fair, transport=httpx.MockTransport(LaxServer()))
    got = {r.id: r.outcome for r in report.results}
    assert (got["b:spends"], got["b:middle"]) == (Outcome.PASSED, Outcome.SKIPPED)
    assert report.ceiling_skipped == ["b:middle"]
    assert report.ceiling_needed == report.tokens + 40  # the premises spent a few too
    assert exit_code(report) is ExitCode.CONFORMANT


def test_a_request_past_its_price_by_its_own_token_ids_is_a_finding_and_prices_the_rest() -> None:
    """Token ids (evidence, not a claim) past a request's price: a finding of the check that sent
    it; later requests are priced by that overshoot (issue 63, item 4: x3 and 20 tokens over, with
    the margin) and still sent, each past what it allows a finding of its own; an answer past
    even that price halts the run, and every check after it is UNPROVEN."""

    class Past(LaxServer):  # streams honour max_tokens (the premise passes); answers do not
        def __init__(self) -> None:
            super().__init__()
            self.factor = {10: 3, 20: 3, 30: 9}  # by max_tokens: c:further goes past the price

        def __call__(self, request: httpx.Request) -> httpx.Response:
            if request.method == "POST" and not json.loads(request.content).get("stream"):
                body = json.loads(request.content)
                if body.get("max_tokens", 0) > 2:
                    self.posts.append(body)
                    ids = [0] * (self.factor.get(body["max_tokens"], 1) * body["max_tokens"])
                    return httpx.Response(
                        200,
                        json={
                            "choices": [{"index": 0, "text": "x", "token_ids": ids}],
                            "usage": {"completion_tokens": body["max_tokens"]},
                        },
                    )
            return super().__call__(request)

    checks = [
        Check("a:past", _post({"max_tokens": 10}), doc="d", tokens=10),
        Check("b:after", _post({"max_tokens": 20}), doc="d", tokens=20),
        Check("c:further", _post({"max_tokens": 30}), doc="d", tokens=30),
        Check("d:last", _post({"max_tokens": 40}), doc="d", tokens=40),
    ]
    config = RunConfig("http://lax.test", "k", profile="full", token_ceiling=2000)
    report = run(config, checks, transport=httpx.MockTransport(Past()))
    got = {r.id: r for r in report.results}
    assert got["a:past"].outcome is Outcome.FAILED
    assert [f.message.split(" for a")[0] for f in got["a:past"].findings] == [
        "the server generated 30 tokens",
        "the usage says 10 completion tokens; the answer shows 30 (its token ids "
        "or logprob rows): the gate counts what it received",
    ]
    assert got["a:past"].tokens == 30  # the meter's count, not the usage's 10
    # priced at ceil(20 x 3 x 1.25) + 20 = 95 after the overshoot: sent, 60 within it, a finding
    assert got["b:after"].outcome is Outcome.FAILED and got["b:after"].tokens == 60
    assert got["b:after"].findings[0].message.startswith("the server generated 60 tokens")
    # 270 for a price of ceil(30 x 3 x 1.25) + 20 = 133: past even that, the run halts
    assert got["c:further"].outcome is Outcome.FAILED and got["c:further"].tokens == 270
    assert got["d:last"].outcome is Outcome.UNPROVEN
    assert got["d:last"].reason.startswith(
        "not run: the server generated 270 tokens for a request priced at 30, past even the "
        "price the overshoot seen before gives it (133)"
    )


def test_a_stream_lost_before_a_byte_is_charged_all_it_allows_not_the_early_close() -> None:
    """A stream the suite would close after one event costs CHEAP_TOKENS when it is answered;
    dropped before a byte, nothing was closed, and the server may have written it all."""
    server = DropsFirst()
    client = Client("http://drops.test", "k", transport=httpx.MockTransport(server))
    client.ledger.cost = CostModel.of(spec(), SERVED_LEN)
    body = {"model": MODEL, "prompt": [0], "max_tokens": 200, "stream": True}
    reply = client.stream(COMPLETIONS, body, stop_after_events=1)
    assert reply.closed_early and reply.status == 200
    assert [r.charged for r in client.resends] == [200]
    # the lost attempt at its full price, the resend at the early close's
    assert server.written == 400 and client.ledger.tokens == 200 + CHEAP_TOKENS


def test_a_resend_is_held_to_the_ceiling_like_any_request() -> None:
    server = DropsFirst()
    client = Client("http://drops.test", "k", transport=httpx.MockTransport(server))
    client.ledger.cost = CostModel.of(spec(), SERVED_LEN)
    client.ledger.ceiling = 250
    with pytest.raises(OverCeiling):
        client.post(COMPLETIONS, {"model": MODEL, "prompt": [0], "max_tokens": 200})
    assert server.written == 200 and client.ledger.tokens == 200  # the loss, and no resend
    assert [r.charged for r in client.resends] == [200]


def _charged(events: list[dict[str, Any]], body: dict[str, Any]) -> int:
    """What the ledger charges a stream of these chunks, read whole, for this request."""
    ledger = TokenLedger()
    datas = [f"data: {json.dumps(e)}" for e in events] + ["data: [DONE]"]
    lines = [(0.0, line) for data in datas for line in (data, "")]
    ledger.count_stream(parse_lines(lines), json.dumps(body).encode(), 0, None)
    return ledger.tokens


def _chunk(text: str, finish: str | None, index: int = 0) -> dict[str, Any]:
    return {"choices": [{"index": index, "text": text, "finish_reason": finish}]}


def test_a_streams_tokens_that_show_no_text_are_charged() -> None:
    """A chunk without text is a token too (an end token under ignore_eos), a bare finish chunk
    charged one token at most; a stop string's token held back is charged on a "stop" with text.
    The evidence of a request past its price counts none of them (meter.stream_count)."""
    body = {"model": "m", "prompt": "p", "max_tokens": 8, "n": 2, "stream": True}
    two_words = [_chunk(" a", None), _chunk(" b", None)]
    assert _charged([*two_words, _chunk("", "length")], body) == 3  # a text-less last token
    assert _charged([*two_words, _chunk("", "stop")], body) == 3  # its end token
    assert _charged([*two_words, _chunk(" c", "stop")], body) == 4  # a stop string's last token
    assert _charged([_chunk(" a", None), _chunk("", None), _chunk(" b", "length")], body) == 3
    both = [
        _chunk(" a", None, 0),
        _chunk("", "stop", 0),
        _chunk(" b", None, 1),
        _chunk("", "stop", 1),
    ]
    assert _charged(both, body) == 4
