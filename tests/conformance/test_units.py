"""The suite's parts without a server: SSE parsing, selection, exit codes, the client, reports, layers."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.checks.schema import (
    narrowed_spec,
    never_accepted,
    schemathesis_spec,
)
from conformance.engine.config import DEFAULT_TOKEN_CEILING, RunConfig
from conformance.engine.registry import Registry, select, token_bound
from conformance.engine.results import CheckResult, ExitCode, Finding, Outcome, RunReport, exit_code
from conformance.golden import load_cases
from conformance.reports.html import render
from conformance.reports.junit import build
from conformance.spec.bodies import error_body, request_id_re
from conformance.wire.client import Client
from conformance.wire.exchange import QUOTE_LIMIT_BYTES, Exchange, quote
from conformance.wire.rows import RowSizes
from conformance.wire.sse import parse_lines
from contract import spec
from tests.support.contract import CONTRACT


def lines(text: str) -> list[tuple[float, str]]:
    return [(float(i), line) for i, line in enumerate(text.split("\n"))]


# -- SSE --------------------------------------------------------------------------------


def test_sse_events_comments_and_kinds() -> None:
    parsed = parse_lines(
        lines(
            ': keepalive\n\ndata: {"choices":[{"index":0,"text":"a"}]}\n\n'
            'data: {"choices":[],"usage":{}}\n\ndata: {"choices":[],"activations":{}}\n\n'
            'data: {"error":{}}\n\ndata: [DONE]\n\n'
        )
    )
    assert [e.kind for e in parsed.events] == ["content", "usage", "activations", "error", "done"]
    assert [c for _, c in parsed.comments] == [": keepalive"]
    assert parsed.framing_errors == []


@pytest.mark.parametrize(
    "text, error",
    [
        ("data: [DONE]", "ended inside an event"),
        ("data: {}\ndata: {}\n\n", "2 data lines"),
        ("data:{}\n\n", "one space"),
        ("event: x\ndata: {}\n\n", "neither data nor a comment"),
    ],
)
def test_sse_framing_errors(text: str, error: str) -> None:
    assert any(error in e for e in parse_lines(lines(text)).framing_errors)


def test_sse_data_that_is_not_json_is_invalid() -> None:
    assert [e.kind for e in parse_lines(lines("data: {oops\n\n")).events] == ["invalid"]


# -- selection --------------------------------------------------------------------------


def _registry() -> Registry:
    reg = Registry()

    def nothing(ctx: object) -> None:
        pass

    reg.register("a:free", tags=("x",))(nothing)
    reg.register("a:paid", tags=("x", "streaming"), tokens=5, shares="s")(nothing)
    reg.register("b:paid", tags=("y",), tokens=lambda c: 7 if c.full else 0, shares="s")(nothing)
    reg.register("b:other", tokens=3)(nothing)
    return reg


def test_select_by_profile_tags_and_patterns() -> None:
    reg = _registry()
    ids = lambda **kw: [c.id for c in select(reg, RunConfig("http://x", "k", **kw))]  # noqa: E731
    assert ids() == ["a:free", "b:paid"]  # quick: no tokens
    assert ids(profile="full") == ["a:free", "a:paid", "b:paid", "b:other"]
    assert ids(profile="full", include=("streaming",)) == ["a:paid"]
    assert ids(profile="full", skip=("a",)) == ["b:paid", "b:other"]  # the group is a tag
    assert ids(profile="full", select=("b:*",)) == ["b:paid", "b:other"]


def test_shared_spends_are_counted_once() -> None:
    assert token_bound(_registry(), RunConfig("http://x", "k", profile="full")) == 7 + 3


def test_registry_refuses_duplicate_and_ungrouped_ids() -> None:
    reg = _registry()
    with pytest.raises(ValueError):
        reg.register("a:free")(print)
    with pytest.raises(ValueError):
        reg.register("nogroup")(print)


def test_the_full_profile_stays_under_the_default_ceiling() -> None:
    config = RunConfig("http://x", "k", profile="full")
    assert token_bound(select(REGISTRY, config), config) <= DEFAULT_TOKEN_CEILING
    quick = RunConfig("http://x", "k")
    assert token_bound(select(REGISTRY, quick), quick) == 0


def test_every_golden_case_is_a_check_and_ids_are_readable() -> None:
    ids = REGISTRY.ids()
    assert {f"golden:{c.id}" for c in load_cases()} <= set(ids)
    for check in REGISTRY:
        group, name = check.id.split(":", 1)
        assert group and name and " " not in check.id
        assert check.doc, f"{check.id} has no description"


# -- exit codes ---------------------------------------------------------------------------


def _report(*outcomes: Outcome, run_errors: tuple[str, ...] = ()) -> RunReport:
    report = RunReport("http://x", "m", "quick", run_errors=list(run_errors))
    report.results = [CheckResult(f"g:{i}", (), "", o) for i, o in enumerate(outcomes)]
    return report


@pytest.mark.parametrize(
    "report, code",
    [
        (None, ExitCode.USAGE),
        (_report(Outcome.PASSED, Outcome.SKIPPED), ExitCode.CONFORMANT),
        (_report(Outcome.PASSED, Outcome.FAILED), ExitCode.FAILED),
        (_report(Outcome.FAILED, Outcome.ERROR), ExitCode.FAILED),  # findings stand
        (_report(Outcome.PASSED, Outcome.ERROR), ExitCode.USAGE),  # incomplete verdict
        (_report(Outcome.PASSED, run_errors=("cannot write",)), ExitCode.USAGE),
    ],
)
def test_exit_codes(report: RunReport | None, code: ExitCode) -> None:
    assert exit_code(report) is code


# -- the client ----------------------------------------------------------------------------


def test_client_counts_tokens_from_usage_and_streams() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/plain":
            return httpx.Response(200, json={"usage": {"completion_tokens": 5}})
        if request.url.path == "/error":
            return httpx.Response(400, json={"usage": {"completion_tokens": 50}})
        body = (
            'data: {"choices":[{"index":0}]}\n\ndata: {"choices":[],"usage":{"completion_tokens":3}}\n\n'
            "data: [DONE]\n\n"
        )
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    with Client("http://test", "secret", transport=httpx.MockTransport(handler)) as client:
        reply = client.post("/plain", {})
        assert reply.exchange.request_headers["Authorization"] == "Bearer ***"
        client.post("/error", {})
        stream = client.stream("/stream", {})
        assert [e.kind for e in stream.parsed.events] == ["content", "usage", "done"]
        assert client.ledger.tokens == 5 + 3


def test_client_turns_transport_errors_into_replies() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with Client("http://test", "k", transport=httpx.MockTransport(handler)) as client:
        reply = client.request("GET", "/x")
    assert reply.status is None and "ConnectError" in (reply.error or "")


def test_client_closes_a_stream_after_n_events() -> None:
    body = "".join(f'data: {{"choices":[{{"index":0,"text":"{i}"}}]}}\n\n' for i in range(50))
    transport = httpx.MockTransport(
        lambda r: httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})
    )
    with Client("http://test", "k", transport=transport) as client:
        reply = client.stream("/s", {}, stop_after_events=1)
    assert reply.closed_early and len(reply.parsed.events) == 1 and client.ledger.tokens == 1


# -- what is expected comes from the spec ----------------------------------------------------


def test_expectations_come_from_the_spec() -> None:
    assert request_id_re(spec()).fullmatch(CONTRACT.errors.new_request_id())
    body = error_body(spec(), "deadline_infeasible", "m", "max_tokens")
    assert body["error"]["type"] == spec().error_codes["deadline_infeasible"]["type"]
    op = spec().operation("createCompletion")
    assert set(spec().event_schemas) == set(
        op["responses"]["200"]["content"]["text/event-stream"]["x-event-schemas"]
    )


def test_the_narrowed_spec_is_valid_openapi_and_only_narrows() -> None:
    from openapi_spec_validator import validate

    raw = narrowed_spec(spec(), spec().default_model, 4)
    validate(raw)
    narrowed = raw["components"]["schemas"]["CompletionRequest"]
    # the deployment's layers (4 here), not the spec's model's
    assert narrowed["properties"]["output_residual_stream"]["items"]["exclusiveMaximum"] == 4
    assert narrowed["properties"]["output_residual_stream"]["maxItems"] == 4
    original = spec().schema("CompletionRequest")
    assert set(narrowed["properties"]) <= set(original["properties"])
    assert "max_tokens" in narrowed["required"]
    assert not set(spec().request_fields("schema", "beyond")) & set(narrowed["properties"])
    assert narrowed["allOf"] == spec().schema("CompletionRequest")["allOf"]
    assert all(
        any(str(code).startswith("2") for code in op["responses"])
        for item in raw["paths"].values()
        for op in item.values()
    )
    validate(schemathesis_spec(spec()))


# -- reports -------------------------------------------------------------------------------


def _failed_report() -> RunReport:
    exchange = Exchange(
        "POST",
        "http://x/v1/completions",
        {"Authorization": "Bearer ***"},
        '{"prompt": "<script>alert(1)</script>"}',
        400,
        {},
        '{"error": {}}',
    )
    finding = Finding(
        "the body differs", {"error": {"code": "a"}}, {"error": {"code": "b"}}, exchange
    )
    report = _report(Outcome.PASSED, Outcome.SKIPPED)
    report.results.append(CheckResult("golden:x.y", ("golden",), "doc", Outcome.FAILED, [finding]))
    report.results.append(
        CheckResult("caps:z", ("caps",), "doc", Outcome.ERROR, reason="KeyError: 'k'")
    )
    return report


def test_junit_report() -> None:
    suite = build(_failed_report())
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("4", "1", "1", "1")
    failure = suite.find("testcase[@name='golden:x.y']/failure")
    assert failure is not None and "expected" in (failure.text or "")
    assert suite.find("testcase[@name='caps:z']/error") is not None
    ET.fromstring(ET.tostring(suite))


def test_json_report_keeps_tool_errors_apart() -> None:
    data = json.loads(json.dumps(_failed_report().to_dict(), default=str))
    assert [r["id"] for r in data["tool_errors"]] == ["caps:z"]
    assert "caps:z" not in [r["id"] for r in data["results"]]
    assert data["summary"]["exit_code"] == 1


def test_html_report_is_self_contained_and_escaped() -> None:
    html = render(_failed_report())
    assert "<script>" not in html and "&lt;script&gt;" in html
    for external in ("<link", "src=", "href=", "@import", "url("):
        assert external not in html
    assert html.count('class="side"') == 1 and ": not conformant</h1>" in html


def test_only_the_chat_refusal_is_never_accepted() -> None:
    """schemathesis's positive_data_acceptance is not held against an operation with no 2xx."""
    assert never_accepted(schemathesis_spec(spec())) == {"POST /v1/chat/completions"}


# -- who answered ------------------------------------------------------------------------


def test_a_schemathesis_failure_answered_by_another_party_names_it() -> None:
    from types import SimpleNamespace

    from conformance.checks.schema import other_party

    declared = SimpleNamespace(config=SimpleNamespace(front="nginx"))
    undeclared = SimpleNamespace(config=SimpleNamespace(front=None))

    def interaction(
        headers: dict[str, list[str]],
        body: bytes = b"<title>405 Not Allowed</title>",
        status: int = 405,
    ) -> SimpleNamespace:
        return SimpleNamespace(
            response=SimpleNamespace(headers=headers, content=body, status_code=status)
        )

    assert other_party(declared, interaction({"Server": ["nginx/1.22.1"]})) == (
        'answered by Server: nginx/1.22.1, HTML title "405 Not Allowed": the declared front nginx in its own '
        'words (see reference_impl/DEPLOY.md, "Fronts")'
    )
    # nginx's page without its Server header still names it
    assert other_party(
        declared, interaction({}, b"<html><title>405</title><center>nginx</center></html>")
    )
    assert (
        other_party(undeclared, interaction({"Server": ["nginx/1.22.1"]})) is None
    )  # no front declared
    assert other_party(declared, interaction({"Server": ["gunicorn"]})) is None  # not the front's
    assert (
        other_party(declared, interaction({"X-Gateway-Version": ["2"]})) is None
    )  # a header is no front
    assert (
        other_party(declared, interaction({"Server": ["nginx"]}, b'{"error": {}}')) is None
    )  # JSON: judged
    assert (
        other_party(declared, interaction({"Server": ["nginx"]}, status=500)) is None
    )  # a 5xx: never a front's
    assert other_party(declared, SimpleNamespace(response=None)) is None


# -- the scrubber, the curl line, the meter (issue 42) -------------------------------------------


def test_the_scrubber_masks_a_key_in_every_form_a_server_may_echo_it(tmp_path: Any) -> None:
    import html
    import urllib.parse

    from conformance.reports.scrub import Scrubber
    from conformance.wire.secrets import MASKED as MASK

    key = "sk-live-0123456789abcdef"
    scrub = Scrubber([key, None, "short"])  # a key under MIN_SECRET is left alone
    echoes = [
        f"Token {key}",
        json.dumps({"m": f'"{key}"'}),
        urllib.parse.quote(key, safe=""),
        html.escape(f"<{key}>"),
        "Basic " + base64.b64encode(f"user:{key}".encode()).decode(),
        base64.b64encode(f"xy{key}".encode()).decode(),
        base64.urlsafe_b64encode(f"{key}??".encode()).decode(),
    ]
    for echo in echoes:
        assert key not in scrub(echo) and MASK in scrub(echo), echo
        core = base64.b64encode(key.encode()).decode()[4:16]
        assert core not in scrub(echo), echo
    assert scrub("a short word") == "a short word"
    scrub.write(tmp_path / "r.txt", f"x {key} y".encode())
    assert (tmp_path / "r.txt").read_text() == f"x {MASK} y"


def test_a_secret_is_masked_before_a_cut_and_a_piece_left_at_a_cut_is_masked_too() -> None:
    from conformance.wire.secrets import MASKED, PIECE, SECRETS, Secrets

    key = "sk-cut-0123456789abcdef"
    secrets = Secrets([key])
    assert secrets.cut("x" * 150 + key + " " + "t" * 20, 160) == "x" * 150 + MASKED + " " + "t" * 6
    assert secrets.tail("said " + key[:PIECE]) == "said " + MASKED
    assert secrets.tail("said " + key[: PIECE - 1]) == "said " + key[: PIECE - 1]
    b64 = base64.b64encode(key.encode()).decode()
    assert secrets.tail("as sent: " + b64[:12]) == "as sent: " + MASKED
    # the run's secrets (engine.runner.connect adds them) in every quote, before its cut
    SECRETS.add(key)
    quoted = quote("y" * (QUOTE_LIMIT_BYTES - 5) + key)
    assert key[:5] not in quoted and quoted.startswith("y" * (QUOTE_LIMIT_BYTES - 5) + MASKED)


def test_a_curl_line_never_reads_a_file_it_did_not_write_and_reads_the_key_from_the_environment() -> (
    None
):
    exchange = Exchange(
        "POST",
        "http://x/v1/completions",
        {"Authorization": "Token ***"},
        "@/etc/passwd",
        sent=b"@/etc/passwd",
    )
    assert exchange.curl() == (
        "curl -sS -i -X POST http://x/v1/completions -H 'Authorization: Token '"
        '"$CONFORMANCE_API_KEY" --data-raw @/etc/passwd'
    )


def test_the_meter_counts_what_the_answer_shows_and_takes_usage_only_where_larger() -> None:
    from conformance.wire.meter import answer

    rows = {"index": 0, "text": "ab", "logprobs": {"tokens": ["a", "b"]}}
    ids = {"index": 1, "text": "abc", "token_ids": [1, 2, 3]}
    text = {"index": 2, "text": "a long text"}
    lying = {"choices": [rows, ids], "usage": {"completion_tokens": 1}}
    metered = answer(lying, {}, 16, 32)
    assert (metered.tokens, metered.exact, metered.claim, metered.understated) == (5, 5, 1, True)
    metered = answer({"choices": [rows, text], "usage": {"completion_tokens": 40}}, {}, 16, 32)
    assert (metered.tokens, metered.exact, metered.understated) == (
        40,
        None,
        False,
    )  # text at its price
    assert answer({"choices": [text]}, {}, 16, 32).tokens == 16
    assert (
        answer({"choices": [rows]}, {"echo": True}, 16, 32).tokens == 16
    )  # echoed rows hold the prompt
    assert answer("not the API's", {}, 16, 32).tokens == 32  # no choices: the request's price


def test_a_declared_fronts_protocol_refusal_is_its_words_and_a_500_never() -> None:
    """501 and 505 are refusals (x-protocol-refusals), a front's own page with one its words;
    500, 502, 503 and 504 stay failures whoever wrote them (issue 57)."""
    from conformance.wire.who_answered import names_front

    refusals = spec().protocol_refusals
    page = b"<html><center>nginx</center></html>"
    headers = {"Server": "nginx/1.22.1"}
    assert names_front(headers, page, 501, "nginx", refusals["transfer_coding"])
    assert names_front(headers, page, 505, "nginx", refusals["http_version"])
    assert not names_front(headers, page, 505, "nginx", refusals["transfer_coding"])
    assert not names_front(headers, page, 505, None, refusals["http_version"])
    every = frozenset().union(*refusals.values())
    for status in (500, 502, 503, 504):
        assert not names_front(headers, page, status, "nginx", every), status


def test_the_gates_requests_carry_the_openai_sdks_headers() -> None:
    """A server cannot tell the gate from the SDK's clients by their headers (issue 53, item 2):
    the SDK's own, read from the pinned SDK, on every request but the key."""
    import openai

    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404, json={})

    with Client(
        "http://gate.test", "sk-gate-0123456789", transport=httpx.MockTransport(answer)
    ) as c:
        c.request("GET", "/v1/models")
    (request,) = seen
    assert request.headers["user-agent"] == f"OpenAI/Python {openai.__version__}"
    assert request.headers["x-stainless-lang"] == "python"
    assert request.headers["accept-encoding"] == "gzip, deflate"  # decoded within the bound


def test_every_golden_case_carries_the_feature_tags_of_what_it_sends() -> None:
    """Generated or written by hand: a case's tags hold the x-kind feature of every field its
    body sends (what --include and --skip select by), and the registry tags it so."""
    import json

    from conformance.golden.generate import features

    registered = {c.id: c.tags for c in REGISTRY}
    missing = {}
    for case in load_cases():
        try:
            body = json.loads(case.body or b"null")
        except ValueError:  # a case of a body that is not JSON sends no field
            body = None
        wanted = features(body, spec())
        if not set(wanted) <= set(case.tags) or not set(wanted) <= set(
            registered[f"golden:{case.id}"]
        ):
            missing[case.id] = wanted
    assert missing == {}
    assert any("steering" in c.tags for c in load_cases())  # the check can fail: some are tagged


def test_the_logprobs_checks_hold_a_sampled_end_token_as_vllm_writes_it() -> None:
    """Run seed 6 draws a seed under which the mock samples the end of text (ignore_eos): its
    token is in the logprobs and left out of the text, as vLLM writes it (a false finding of
    the fixed seed's days, found when the seeds were drawn per run)."""
    import httpx

    from conformance.engine.runner import run
    from mock_server import create_app
    from mock_server.config import MockConfig

    checks = [c for c in REGISTRY if c.id in ("logprobs:consistent", "logprobs:stream")]
    config = RunConfig("http://mock", "k", profile="full", seed=6)
    report = run(config, checks, transport=httpx.WSGITransport(app=create_app(MockConfig())))
    outcomes = {r.id: (r.outcome.value, [f.message for f in r.findings]) for r in report.results}
    assert outcomes["logprobs:consistent"] == outcomes["logprobs:stream"] == ("passed", [])
    from conformance.engine.draws import Draws

    model = spec().models[spec().default_model]
    special = spec().special_tokens(model.name)[model.eos_token_ids[0]]
    body = {"model": model.name, "prompt": [0, 1, 2], "max_tokens": 4, "ignore_eos": True}
    with httpx.Client(transport=httpx.WSGITransport(app=create_app(MockConfig()))) as http:
        reply = http.post(
            "http://mock/v1/completions",
            json={**body, "logprobs": 2, "seed": Draws.of(6).seed},
            headers={"Authorization": "Bearer k"},
        ).json()
    assert special in reply["choices"][0]["logprobs"]["tokens"]
    assert special not in reply["choices"][0]["text"]


@pytest.mark.parametrize("sampled", ["<|reserved_special_token_3|>", "<|eot_id|>", " word"])
def test_the_logprobs_checks_leave_out_every_special_token_the_tokenizer_has(sampled: str) -> None:
    """A small model samples a reserved special token (Llama 3's tokenizer has 256; x-models
    lists BOS and EOS): vLLM writes it in the tokens, not in the text. The joined tokens less
    every special token the model's tokenizer has are the text: no finding (found by the
    reference's full profile under a drawn seed). An ordinary token left out of the text is
    still one."""
    from conformance.checks.logprobs import check_logprobs
    from conformance.engine.context import Context, ServerInfo

    api = spec()
    ctx = Context(RunConfig("http://x", "k"), None, ServerInfo(dict(api.models)))  # type: ignore[arg-type]
    toks = [" The", sampled, " sky"]
    lp = {
        "tokens": toks,
        "token_logprobs": [-1.0, -2.0, -3.0],
        "top_logprobs": [{t: v, "?": v - 1} for t, v in zip(toks, [-1.0, -2.0, -3.0], strict=True)],
        "text_offset": [0, 4, 4 + len(sampled)],
    }
    check_logprobs(ctx, " The sky", lp, 3, None, "choice 0")  # type: ignore[arg-type]
    messages = [f.message for f in ctx.findings]
    special = sampled.startswith("<|")
    differs = ["choice 0: the tokens less the special tokens joined differs"]
    assert messages == ([] if special else differs)


def test_the_reference_tests_take_only_the_load_unproven_as_conformant() -> None:
    from tests.support.reference import LOAD_UNPROVEN, conformant

    ok = [{"id": "a", "outcome": "passed"}, {"id": "b", "outcome": "skipped"}]
    (same, why), (beside, beside_why) = LOAD_UNPROVEN.items()
    load = {"id": same, "outcome": "unproven", "reason": why + ": x"}
    both = {"id": beside, "outcome": "unproven", "reason": "ended 9 ms " + beside_why}
    assert conformant(0, ok) and conformant(3, [*ok, load]) and conformant(3, [*ok, load, both])
    assert not conformant(3, [*ok, {**both, "reason": why}])  # each check for its own reason
    assert not conformant(3, [*ok, {**load, "reason": "the ceiling"}])
    assert not conformant(3, [*ok, load, {"id": "c", "outcome": "unproven", "reason": "r"}])
    assert not conformant(1, [*ok, load, {"id": "c", "outcome": "failed"}])
    assert not conformant(3, [*ok, {"id": "c", "outcome": "error"}, load])


@pytest.mark.parametrize(
    "size, off",
    [(21, False), (20, False), (18, False), (10, False), (9, True), (5, True), (22, True)],
)
def test_a_row_may_lack_half_its_entries_to_shared_texts_never_more(size: int, off: bool) -> None:
    """logprobs 20: 20 or 21 entries, fewer where tokens share a text (real vLLM's 18 at
    temperature 2), down to half; a server capping logprobs at 5 is off."""
    row = {f"t{i}": -1.0 for i in range(size)}
    data = {"choices": [{"index": 0, "logprobs": {"top_logprobs": [row]}}]}
    reply = SimpleNamespace(status=200, parsed=None, data=data, exchange=None)
    sizes = RowSizes()
    sizes.observe("POST", "/v1/completions", json.dumps({"logprobs": 20}).encode(), reply)
    assert [(o.asked, o.size) for o in sizes.off] == ([(20, size)] if off else [])
