"""schema:<schemathesis check> — schemathesis against openapi.yaml, its failures as our findings.

Two engine runs, each with the examples, coverage and fuzzing phases and
every check schemathesis has, plus `stream_event_conformance` (each event of
a text/event-stream validated against x-event-schemas):

- negative: the spec as is, negative data only. Nothing it sends is valid,
  so nothing should be generated: it runs in the quick profile too.
- positive (full profile only): the spec with CompletionRequest narrowed to
  cheap requests that the rules JSON Schema cannot say (x-token-rules'
  products and token counts, steering tensors) accept. The cross-field rules
  and the model's ranges are in the schema itself, so plain schemathesis
  knows them too; without the narrowing it would ask for 15,600 tokens at a time.

openapi.yaml's text/event-stream `schema` is one SSE event's envelope (as
OpenAPI 3.2 and schemathesis read it); `stream_event_conformance` validates
each event's payload against x-event-schemas.

Both go through the suite's token ledger (hooks `before_call`/`after_call`): a
negative body for a generating route gets `max_tokens: 1` and `n: 1` (added, or
lowered from a valid larger integer) where the body then breaks the same rules of
the spec schemathesis used at the same fields, so it stays as negative as it was
(jsonschema says so, per case); each response's tokens are counted as they come,
and a request whose worst case would pass the ceiling is not sent.

With --rate-limit, each case takes its turn (`before_call`), and a 429 with Retry-After
is waited out and sent again before schemathesis sees it (requests' response hook, which
`before_call` adds to the transport's arguments; Client.paced, the suite's one bound), so
schemathesis judges only the last answer, as every other check does.

`ignored_auth` expects unknown keys to be refused, so it is on only with
--wrong-key-expected (a server without configured keys accepts any key).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import jsonschema_rs
import requests
import schemathesis
import schemathesis.specs.openapi.checks
from requests.adapters import HTTPAdapter
from schemathesis.checks import CHECKS
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import events, from_schema

from conformance.engine.config import RunConfig
from conformance.engine.context import LEDGER_NOTES, Context
from conformance.engine.draws import Draws
from conformance.engine.registry import register
from conformance.engine.results import Finding
from conformance.wire import jsontext
from conformance.wire.client import Client, Reply, StreamReply
from conformance.wire.exchange import Exchange, quote
from conformance.wire.ledger import OverCeiling
from conformance.wire.sdk import client_headers
from conformance.wire.secrets import SECRETS
from conformance.wire.sse import parse_lines
from conformance.wire.token_cost import cheapest
from conformance.wire.who_answered import names_front, who_answered
from contract import Spec

STREAM_CHECK = "stream_event_conformance"
FINDINGS_SHOWN = 10  # per check; the rest are counted
POSITIVE_MAX_TOKENS = 4  # the suite's choice: cheap, and enough to see a stream
POSITIVE_PROMPT_ITEMS = 16
PHASES = ("examples", "coverage", "fuzzing")
# Per operation, the coverage phase sends about this many positive cases on top of
# the examples and fuzzing budgets (measured on this spec; the ceiling check keeps it honest).
COVERAGE_ALLOWANCE = 150


@schemathesis.check
def stream_event_conformance(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 200 to stream: true is a text/event-stream whose events match x-event-schemas."""
    from conformance.engine.shapes import schema_errors

    if response.status_code != 200:
        return None
    is_stream = "text/event-stream" in (response.headers.get("content-type") or [""])[0]
    asked = isinstance(case.body, dict) and case.body.get("stream") is True
    if asked and not is_stream:
        raise AssertionError("stream: true answered without text/event-stream")
    if not is_stream:
        return None
    text = SECRETS.mask_bytes(response.content).decode("utf-8", "replace")
    lines = [(0.0, line) for line in text.splitlines()]
    parsed = parse_lines(lines)
    schemas = _LEDGERS[id(case.operation.schema)].api.event_schemas  # the spec of this schema's run
    problems = list(parsed.framing_errors)
    for i, event in enumerate(parsed.events):
        if event.kind not in schemas:
            problems.append(f"event {i} is of no kind in x-event-schemas: {event.data[:120]}")
            continue
        problems += [
            f"event {i} ({event.kind}): {e}"
            for e in schema_errors(event.payload, schemas[event.kind])
        ]
    if not parsed.events or parsed.events[-1].kind != "done":
        problems.append("the stream does not end with data: [DONE]")
    if problems:
        raise AssertionError("Stream event does not match its schema\n\n" + "\n".join(problems[:5]))
    return True


# -- the token ledger, through schemathesis's hooks ---------------------------------

# Each schemathesis schema's ledger, while its run lasts (by the schema object's id): a
# hook finds its run's ledger from the case it is called with, so runs never share one.
_LEDGERS: dict[int, Ledger] = {}


def _error_keys(validator: Any, body: Any) -> frozenset[tuple[Any, ...]]:
    """Where a body breaks its schema: (field path, schema path) of each error, values left out."""
    return frozenset(
        (tuple(e.instance_path), tuple(e.schema_path)) for e in validator.iter_errors(body)
    )


def _text(value: str | bytes | None) -> str:
    """requests types a prepared request's method and URL as str or bytes."""
    return value.decode("latin-1") if isinstance(value, bytes) else value or ""


class Ledger:
    def __init__(self, client: Client, mode: str, raw: dict[str, Any], api: Spec) -> None:
        self.client, self.mode, self.api = (
            client,
            mode,
            api,
        )  # api: the run's spec, `raw` made from it
        self.sent = self.withheld = self.withheld_worst = 0  # requests that can generate
        # the spec schemathesis generated from, as JSON (a status code's key is a string there):
        # the negative bodies are invalid against it
        self.raw = json.loads(json.dumps(raw))
        self.validators: dict[tuple[str, str, str], Any] = {}
        # --rate-limit: the 429s waited out are sent again through a transport adapter of the
        # ledger's own (schemathesis does not hand its session to the hooks)
        self.adapter = HTTPAdapter()

    def _body_validator(self, case: Any) -> Any:
        """The operation's body schema, validated by jsonschema-rs (as the contract's own checks
        are): the ledger validates each negative body up to three times before it is sent, and
        Python's jsonschema took 0.36 ms a body against its 15 us (the full profile's schema:
        checks against the mock, --seed 7: 29.5 s against 16.6, the same report)."""
        key = (
            case.operation.path,
            case.operation.method.lower(),
            case.media_type or "application/json",
        )
        if key not in self.validators:
            pointer = "/".join(
                str(part).replace("~", "~0").replace("/", "~1")
                for part in ("paths", *key[:2], "requestBody", "content", key[2], "schema")
            )
            # the spec itself is the root, so that its own references resolve within it
            self.validators[key] = jsonschema_rs.Draft202012Validator(
                {**self.raw, "$ref": f"#/{pointer}"}, validate_formats=False
            )
        return self.validators[key]

    def _cheapen(self, case: Any) -> None:
        """A negative body gets max_tokens 1 and n 1 where that leaves it broken exactly as it was.

        Each is added when absent, and a valid integer above 1 lowered when the body is
        broken, only if the body then breaks the same rules at the same fields and no
        other: when the field is the broken one, or a cross-field rule reads it, it
        stays (and the ledger counts its worst case).
        """
        validator = self._body_validator(case)
        broken = _error_keys(validator, case.body)
        # each token field at 1 (wire.token_cost.cheapest): a server that wrongly accepts the
        # body then writes one token per prompt
        for name, cheap in cheapest(self.api).items():
            value = case.body.get(name)
            lower = broken and type(value) is int and value > cheap
            if (name not in case.body or lower) and _error_keys(
                validator, {**case.body, name: cheap}
            ) == broken:
                case.body[name] = cheap

    def before(self, case: Any) -> None:
        self.client.wait_turn()  # --rate-limit: schemathesis's requests take their turn too
        method, path = case.operation.method.upper(), case.operation.path
        if (
            self.mode == "negative"
            and isinstance(case.body, dict)
            and self.client.ledger.cost is not None
            and self.client.ledger.cost.request(method, path, case.body)
        ):
            self._cheapen(case)
        content = json.dumps(case.body).encode() if isinstance(case.body, (dict, list)) else None
        try:
            if self.client.ledger.reserve(method, path, content):
                self.sent += 1
        except OverCeiling as exc:
            self.withheld += 1
            self.withheld_worst += exc.worst
            raise

    def response_hooks(self, case: Any, kwargs: dict[str, Any]) -> None:
        """The transport's arguments get the response hooks: with --rate-limit `sent_again`, then
        `masked` (a server's words masked before schemathesis or a finding cuts them). Only
        requests' transport takes hooks; an in-process app's (WSGI, ASGI: the tests' own apps)
        findings are masked where they are quoted (quote, SECRETS.cut)."""
        if case.operation.app is not None or "app" in kwargs:
            return
        hooks = kwargs.get("hooks") or {}
        ours = [self.sent_again] if self.client.pace is not None else []
        kwargs["hooks"] = {
            **hooks,
            "response": [*_as_list(hooks.get("response")), *ours, _masked],
        }

    def sent_again(self, resp: requests.Response, **send_kw: Any) -> requests.Response:
        """requests' response hook: a 429 with Retry-After waited out and sent again (Client.paced)."""
        request = resp.request

        def send() -> requests.Response:
            start = time.monotonic()
            again = self.adapter.send(request, **send_kw)
            again.elapsed = timedelta(seconds=time.monotonic() - start)  # as a session times it
            return again

        method, path = _text(request.method), urlsplit(_text(request.url)).path
        sent = request.body.encode() if isinstance(request.body, str) else request.body
        body = sent if isinstance(sent, bytes) else None  # requests' prepared body: bytes here
        return self.client.paced(
            send,
            f"{method} {path}",
            first=resp,
            discard=requests.Response.close,
            price=self.client.ledger.worst_case(method, path, body),  # each 429 sent again
        )

    def close(self) -> None:
        self.adapter.close()

    def after(self, response: Any) -> None:
        request = response.request
        body = request.body.encode() if isinstance(request.body, str) else request.body
        cut = getattr(response, "stream_cut_short", False) or response.content_size > len(
            response.content
        )
        self.client.ledger.charge(
            request.method,
            urlsplit(request.url).path,
            body,
            response.status_code,
            response.content,
            unfinished=cut,
        )


def _as_list(hooks: Any) -> list[Any]:
    """requests takes one hook or a list of them."""
    return [] if hooks is None else list(hooks) if isinstance(hooks, (list, tuple)) else [hooks]


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    """`kwargs`: the transport's arguments (the dict itself, so what is added is sent).
    Registered globally: schemathesis 4.32 dispatches before_call to the global hooks
    alone (Case.call); it acts only for a schema of the suite's runs. after_call is the
    schema's own (_run)."""
    ledger = _LEDGERS.get(id(case.operation.schema))
    if ledger is not None:
        ledger.before(case)
        ledger.response_hooks(case, kwargs)


def _masked(resp: requests.Response, **_: Any) -> requests.Response:
    """requests' response hook: the answer's body and headers, the run's secrets masked. An event
    stream is left for schemathesis to read within its bounds (stream_event_conformance masks
    its events as it reads them)."""
    if "text/event-stream" not in resp.headers.get("content-type", ""):
        resp._content = SECRETS.mask_bytes(resp.content)
    for name, value in list(resp.headers.items()):
        resp.headers[name] = SECRETS(value)
    return resp


def check_names() -> list[str]:
    return sorted(set(CHECKS.get_all_names()))


# -- the narrowed spec for positive data --------------------------------------


def schemathesis_spec(api: Spec) -> dict[str, Any]:
    """The run's openapi.yaml as schemathesis reads it (its own copy, for the runs to change)."""
    return copy.deepcopy(api.raw)


def narrowed_spec(api: Spec, model: str, num_layers: int) -> dict[str, Any]:
    """openapi.yaml with CompletionRequest limited to cheap requests every rule accepts, on the
    deployment's layers (`num_layers`, from GET /v1/models: the schema's allOf holds the
    spec's model's, and a 4-layer deployment rightly refuses layer 18).

    The cross-field rules are in the schema itself (its allOf), and so are the
    model's and the caps' ranges; what is left to narrow is what JSON Schema
    cannot say (products of fields, token counts, tensors) and the cost: one
    prompt, n = 1, a required small max_tokens, min_tokens at most 1, no
    steering vectors (the lens checks cover them).
    """
    raw = schemathesis_spec(api)
    # An operation without a 2xx response (the chat refusal) has no positive data.
    raw["paths"] = {
        path: {
            m: op
            for m, op in item.items()
            if any(str(code).startswith("2") for code in op["responses"])
        }
        for path, item in raw["paths"].items()
    }
    raw["paths"] = {path: item for path, item in raw["paths"].items() if item}
    req = raw["components"]["schemas"]["CompletionRequest"]
    props = req["properties"]
    # fields whose rules JSON Schema cannot say at all (x-kind schema: beyond: a steering
    # vector's data must be a real tensor of the model's shape)
    for name in api.request_fields("schema", "beyond"):
        props.pop(name, None)
    props["model"] = {"type": "string", "enum": [model]}
    props["prompt"] = {
        "anyOf": [
            {"type": "string", "minLength": 1, "maxLength": 64},
            {
                "type": "array",
                "minItems": 1,
                "maxItems": POSITIVE_PROMPT_ITEMS,
                "items": {"type": "integer", "minimum": 0},
            },
        ]
    }
    props["max_tokens"] = {"type": "integer", "minimum": 1, "maximum": POSITIVE_MAX_TOKENS}
    props["n"] = {"type": ["integer", "null"], "minimum": 1, "maximum": 1}
    props["min_tokens"] = {"type": ["integer", "null"], "minimum": 0, "maximum": 1}
    layers = props["output_residual_stream"]
    props["output_residual_stream"] = {
        **layers,
        "maxItems": min(layers["maxItems"], num_layers),
        "items": {**layers["items"], "exclusiveMaximum": num_layers},
    }
    req["required"] = sorted({*req["required"], "max_tokens"})
    return raw


def positive_token_bound(config: RunConfig) -> int:
    """Upper bound of the positive run's tokens (0 in the quick profile, where it does not run)."""
    if not config.full:
        return 0
    requests = len(PHASES) * config.schema_examples + COVERAGE_ALLOWANCE
    return requests * POSITIVE_MAX_TOKENS


# -- running schemathesis ---------------------------------------------------------


def _st_config(config: RunConfig, mode: str, phases: tuple[str, ...]) -> SchemathesisConfig:
    return SchemathesisConfig.from_dict(
        {
            "base-url": config.base_url,
            # the openai SDK's headers (its User-Agent over schemathesis's own), and the key
            "headers": {**client_headers(), "Authorization": f"Bearer {config.api_key}"},
            "workers": 1,
            "seed": Draws.of(config.seed).schemathesis_seed if config.seed is not None else None,
            "request-timeout": config.timeout,
            "continue-on-failure": True,  # every finding, not the first per operation
            "generation": {
                "mode": mode,
                "max-examples": config.schema_examples,
                "database": "none",
                "deterministic": True,
            },
            "phases": {name: {"enabled": name in phases} for name in (*PHASES, "stateful")},
            "checks": {"enabled": True, "ignored_auth": {"enabled": config.wrong_key_expected}},
        }
    )


def _run(
    config: RunConfig,
    raw: dict[str, Any],
    mode: str,
    phases: tuple[str, ...],
    unanswered: list[Any],
    ledger: Ledger,
) -> Iterator[Any]:
    """schemathesis's recorders; `unanswered` gets each request it sent without an HTTP answer;
    every request passes `ledger` (its schema's hooks, and before_call through _LEDGERS)."""
    st_config = _st_config(config, mode, phases)
    schema = schemathesis.openapi.from_dict(raw, config=st_config)
    with kept_by(schema, ledger):
        for event in from_schema(schema).execute():
            if isinstance(event, events.ScenarioFinished):
                yield event.recorder
            elif isinstance(event, events.FatalError):
                raise RuntimeError(f"schemathesis: {event.exception}")
            elif isinstance(event, events.NonFatalError) and isinstance(
                event.value, requests.RequestException
            ):
                unanswered.append(event)


@contextmanager
def kept_by(schema: Any, ledger: Ledger) -> Iterator[None]:
    """Every request of `schema`'s cases passes `ledger` while the block runs: its after_call
    is the schema's own hook, its before_call found through _LEDGERS."""

    def after_call(ctx: Any, case: Any, response: Any) -> None:
        ledger.after(response)

    schema.hooks.register_hook_with_name(after_call, "after_call")
    _LEDGERS[id(schema)] = ledger
    try:
        yield
    finally:
        del _LEDGERS[id(schema)]
        schema.hooks.unregister(after_call)


def _no_answer(mode: str, unanswered: list[Any], answered: int, base_url: str) -> list[Finding]:
    """Requests schemathesis got no HTTP answer to: findings of not_a_server_error, or, when
    none of its requests was answered, the tool's error (it reached no server: the suite's
    client did, so schemathesis is not sending where the run points)."""
    if unanswered and not answered:
        raise RuntimeError(
            f"schemathesis reached no server at {base_url} ({len(unanswered)} requests unanswered): "
            f"{type(unanswered[0].value).__name__}: {SECRETS.cut(str(unanswered[0].value), 300)}"
        )
    return [
        Finding(
            f"{mode} data, {e.label}: no HTTP response",
            expected="an HTTP answer",
            received=f"{type(e.value).__name__}: {SECRETS.cut(str(e.value), 300)}",
        )
        for e in unanswered
    ]


def _headers(message: Any) -> dict[str, str]:
    """A cassette's headers (each a list of values) as one value a name."""
    return {k: (v[0] if isinstance(v, list) else v) for k, v in message.headers.items()}


def _exchange(interaction: Any) -> Exchange | None:
    if interaction is None:
        return None
    req, resp = interaction.request, interaction.response
    headers = _headers(req)
    if "Authorization" in headers:
        headers["Authorization"] = "Bearer ***"
    body = quote(req.body) if req.body else None
    sent = (
        req.body.encode("utf-8", "surrogateescape")
        if isinstance(req.body, str)
        else req.body or None
    )
    ex = Exchange(req.method, req.uri, headers, body, sent=sent)
    if resp is not None:
        ex.status = resp.status_code
        ex.response_headers = {k: SECRETS(v) for k, v in _headers(resp).items()}
        ex.response_body = quote(resp.content)
    return ex


def never_accepted(raw: dict[str, Any]) -> set[str]:
    """Operations with no 2xx response (the chat refusal): no request to them is accepted,
    so schemathesis's "schema-valid request rejected" there (a chat request without its
    optional body, which the negative run sends now and then) is the spec's rule, not a bug."""
    return {
        f"{method.upper()} {path}"
        for path, item in raw["paths"].items()
        for method, op in item.items()
        if not any(str(code).startswith("2") for code in op.get("responses", {}))
    }


def _observe(ctx: Context, interaction: Any) -> None:
    """schemathesis's answers go to the client's observers too (spec coverage, diff)."""
    exchange = _exchange(interaction)
    resp = getattr(interaction, "response", None)
    if exchange is None or resp is None:
        return
    headers = httpx.Headers(exchange.response_headers)
    text = resp.content.decode("utf-8", "replace")
    reply: Reply
    if "text/event-stream" in headers.get("content-type", ""):
        lines = [(0.0, line) for line in text.splitlines()]
        reply = StreamReply(
            exchange,
            resp.status_code,
            headers,
            resp.content,
            lines=lines,
            parsed=parse_lines(lines),
        )
    else:
        reply = Reply(exchange, resp.status_code, headers, resp.content)
        try:
            reply.data, reply.is_json = jsontext.loads(text), True
        except ValueError:
            pass
    ctx.client.observe(
        interaction.request.method,
        urlsplit(interaction.request.uri).path,
        interaction.request.body,
        reply,
    )


def run_schemathesis(ctx: Context) -> dict[str, list[Finding]]:
    """Both runs, once per suite run; check name -> findings."""
    if "schemathesis" in ctx.memo:
        if isinstance(ctx.memo["schemathesis"], Exception):  # each schema check is the tool's error
            raise RuntimeError(str(ctx.memo["schemathesis"]))
        return ctx.memo["schemathesis"]
    if ctx.client.in_process:
        ctx.skip(
            "schemathesis sends its own requests over the network, and this run reaches the server "
            "through an in-process transport"
        )
    try:
        return _run_both(ctx)
    except Exception as exc:
        ctx.memo["schemathesis"] = exc
        raise


def _run_both(ctx: Context) -> dict[str, list[Finding]]:
    findings: dict[str, list[Finding]] = {}
    runs: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
        ("negative", schemathesis_spec(ctx.api), ("coverage", "fuzzing"))
    ]
    if ctx.config.full:
        runs.append(
            ("positive", narrowed_spec(ctx.api, ctx.config.model, ctx.model.num_layers), PHASES)
        )
    ctx.memo["schemathesis"] = findings
    refused = never_accepted(schemathesis_spec(ctx.api))
    for mode, raw, phases in runs:
        ledger = Ledger(ctx.client, mode, raw, ctx.api)
        unanswered: list[Any] = []
        try:
            recorders = list(_run(ctx.config, raw, mode, phases, unanswered, ledger))
        finally:
            ledger.close()
            ctx.memo[f"schemathesis_withheld_{mode}"] = (
                ledger.sent,
                ledger.withheld,
                ledger.withheld_worst,
            )
            if ledger.withheld:
                ctx.memo.setdefault(LEDGER_NOTES, []).append(
                    f"schemathesis ({mode} data) did not send {ledger.withheld} of "
                    f"{ledger.sent + ledger.withheld} requests that can generate: together they may "
                    f"generate {ledger.withheld_worst} tokens if the server does not conform"
                )
        answered = sum(
            getattr(i, "response", None) is not None
            for r in recorders
            for i in r.interactions.values()
        )
        findings.setdefault("not_a_server_error", []).extend(
            _no_answer(mode, unanswered, answered, ctx.config.base_url)
        )
        for recorder in recorders:
            for interaction in recorder.interactions.values():
                _observe(ctx, interaction)  # tokens: counted by the ledger's after_call hook
            for case_id, nodes in recorder.checks.items():
                for node in nodes:
                    if node.failure_info is None:
                        continue
                    failure = node.failure_info.failure
                    if node.name == "positive_data_acceptance" and failure.operation in refused:
                        continue
                    text = f"{mode} data, {failure.operation}: {failure.title}"
                    detail = (failure.message or "").strip()
                    interaction = recorder.interactions.get(failure.case_id or case_id)
                    other = other_party(ctx, interaction)
                    findings.setdefault(node.name, []).append(
                        Finding(
                            text + (f" ({other})" if other else ""),
                            expected=f"no {node.name} failure",
                            received=SECRETS.cut(detail, 1500) or failure.title,
                            exchange=_exchange(interaction),
                            warning=other is not None,
                        )
                    )
    return findings


def _is_json(content: bytes | None) -> bool:
    try:
        json.loads(content or b"")
    except ValueError:
        return False
    return True


def other_party(ctx: Context, interaction: Any) -> str | None:
    """Who answered, where the front the user declared did in its own words (its own 405 page
    to TRACE, which has no Allow header): its failure is a warning, as the suite's own checks'.
    An answer in JSON is judged, whoever wrote it."""
    resp = getattr(interaction, "response", None)
    if resp is None or _is_json(resp.content):
        return None
    headers = _headers(resp)
    if not names_front(headers, resp.content, resp.status_code, ctx.config.front):
        return None
    return who_answered(headers, resp.content, resp.status_code, ctx.config.front)


def _report(name: str, ctx: Context) -> None:
    found = run_schemathesis(ctx).get(name, [])
    ledgers = [
        ctx.memo.get(f"schemathesis_withheld_{mode}", (0, 0, 0))
        for mode in ("negative", "positive")
    ]
    sent, count, worst = (sum(w[i] for w in ledgers) for i in range(3))
    # nothing that can generate was sent: no verdict (some withheld: the run's notes say so)
    if count and not sent and not found:
        raise OverCeiling(
            f"schemathesis did not send {count} requests that may generate {worst} tokens "
            f"in all if the server does not conform; {ctx.client.ledger.tokens} of the ceiling of "
            f"{ctx.config.token_ceiling} are spent",
            worst,
        )
    unique: dict[str, Finding] = {}
    for f in found:
        unique.setdefault(f.message, f)
    for f in list(unique.values())[:FINDINGS_SHOWN]:
        ctx.findings.append(f)
    if len(unique) > FINDINGS_SHOWN:
        ctx.fail(f"... and {len(unique) - FINDINGS_SHOWN} more distinct {name} failures")


def _doc(name: str) -> str:
    if name == STREAM_CHECK:
        return stream_event_conformance.__doc__ or ""
    return (
        f"schemathesis's {name} check over the negative (and, in the full profile, positive) runs."
    )


def _reporter(name: str) -> Callable[[Context], None]:
    """The check that reports schemathesis's findings of `name` (one run serves them all)."""

    def report(ctx: Context) -> None:
        if name == "ignored_auth" and not ctx.config.wrong_key_expected:
            ctx.skip("servers without configured keys accept any key; pass --wrong-key-expected")
        _report(name, ctx)

    return report


for _name in check_names():
    register(
        f"schema:{_name}",
        tags=("schema", "streaming") if _name == STREAM_CHECK else ("schema",),
        doc=_doc(_name),
        tokens=positive_token_bound,
        shares="schemathesis",
    )(_reporter(_name))
