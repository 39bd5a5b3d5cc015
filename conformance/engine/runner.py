"""Run selected checks against a server: connect, run each check, keep within the token ceiling."""

from __future__ import annotations

import dataclasses
import functools
import re
import time
import traceback
from collections.abc import Iterator, Sequence

import httpx

from conformance.engine.config import ConfigError, RunConfig
from conformance.engine.context import LEDGER_NOTES, Context, ServerInfo, Skipped, Stop, Unproven
from conformance.engine.coverage import Coverage
from conformance.engine.events import (
    CheckFinished,
    CheckStarted,
    Event,
    ExchangeSeen,
    FindingMade,
    Handler,
    RunFinished,
    RunStarted,
)
from conformance.engine.registry import REGISTRY, Check, token_bound
from conformance.engine.results import CheckResult, Finding, Outcome, RunReport
from conformance.engine.shapes import off_schema
from conformance.wire.client import AUTH_DEFAULT, AUTH_NONE, Client, Reply, answer_bounds
from conformance.wire.ledger import OVER_CEILING, Halted, OverCeiling
from conformance.wire.rows import RowSizes
from conformance.wire.secrets import SECRETS
from conformance.wire.token_cost import CostModel
from conformance.wire.twins import Twins
from contract import ModelInfo, Spec
from contract.tokens import decode, encode
from contract.version import versions

MODELS_PATH = "/v1/models"


class Unreachable(ConfigError):
    """The server did not answer at all (exit code 2)."""


# The numbers GET /v1/models reports for a model (the Model schema), read into ModelInfo.
DEPLOYMENT_NUMBERS = ("max_model_len", "num_layers", "hidden_size")


def discover(client: Client, model: str, api: Spec) -> ServerInfo:
    """GET /v1/models: the deployment's max_model_len, num_layers and hidden_size of each model;
    GET /health with the key and without it.

    A server that does not list the model (or one of its numbers) gets the
    spec's value here, and the `routes:models` check reports the omission.
    """
    reply = client.request("GET", MODELS_PATH)
    if reply.status is None:
        raise Unreachable(f"cannot reach {client.base_url}: {reply.error}")
    if reply.status == api.error_codes["invalid_api_key"]["status"]:
        raise ConfigError(
            f"the server refused the API key (GET {MODELS_PATH} answered {reply.status})"
        )
    models, given = dict(api.models), {}
    # each number within the Model schema's bounds, or the spec's: the suite sizes requests and
    # buffers by them, and a server's number is a claim (routes:models reports one past them)
    bounds = api.schema("Model")["properties"]
    data = reply.data.get("data") if isinstance(reply.data, dict) else None
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or entry.get("id") not in models:
            continue
        numbers = {
            name: entry[name]
            for name in DEPLOYMENT_NUMBERS
            if type(entry.get(name)) is int
            and bounds[name]["minimum"] <= entry[name] <= bounds[name]["maximum"]
        }
        models[entry["id"]] = dataclasses.replace(models[entry["id"]], **numbers)
        given[entry["id"]] = frozenset(numbers)
    health = {
        keyed: client.request(
            "GET", api.route("health").path, auth=AUTH_DEFAULT if keyed else AUTH_NONE
        ).status
        for keyed in (False, True)
    }
    return ServerInfo(models=models, given=given, health=health)


OVERSPEND = "the server generated"  # the start of a finding of a request past its price
RESENT = "the connection was closed before an answer"  # the start of a resend's finding
UNDERSTATED = "the usage says"  # the start of an understated usage's
OVERCLAIMED = "the usage claims"  # the start of a usage past what its request allows
OUTRUN = "a plain answer runs past max_tokens"  # the start of a counted twin's finding
OFF_ROW = "a top_logprobs row holds"  # an answer's row off the size its request asked for
UNBOUND = "a counted twin is not bound to its ids:"  # a twin's text its ids do not decode to


def _client_findings(
    client: Client, since: tuple[int, int, int, int, int, int, int]
) -> list[Finding]:
    """What the client saw while a check ran that is the server's doing: requests past their
    price, usage below what an answer shows or past what the request allows, connections
    dropped before an answer."""
    over, under, resent, claimed, outrun, unbound, rows = since
    found = [
        Finding(
            f"{OVERSPEND} {o.spent} tokens for a request priced at {o.priced} (its prompts x n x "
            f"max_tokens within max_model_len): past a bound no conforming server passes, and past the "
            f"token ceiling's plan",
            expected=f"at most {o.priced}",
            received=o.spent,
            exchange=o.exchange,
        )
        for o in client.ledger.overspends[over:]
    ]
    found += [
        Finding(
            f"{UNDERSTATED} {u.priced} completion tokens; the answer shows {u.spent} (its token ids or "
            f"logprob rows): the gate counts what it received",
            expected=u.spent,
            received=u.priced,
            exchange=u.exchange,
        )
        for u in client.ledger.understated[under:]
    ]
    found += [
        Finding(
            f"{OVERCLAIMED} {c.spent} completion tokens for a request that allows {c.priced} (its "
            "prompts x n x max_tokens within max_model_len): past max_tokens, or a false usage",
            expected=f"at most {c.priced}",
            received=c.spent,
            exchange=c.exchange,
        )
        for c in client.ledger.overclaimed[claimed:]
    ]
    found += [
        Finding(
            f"{OUTRUN} {o.max_tokens} tokens: its choice {o.index} has {o.plain_chars} characters of "
            f"text where the same request with its token ids stopped at max_tokens after "
            f"{o.twin_chars} (their start), so it generated past max_tokens",
            expected=f"at most max_tokens ({o.max_tokens}) tokens of text",
            received={"plain_chars": o.plain_chars, "twin_chars": o.twin_chars},
            exchange=o.exchange,
        )
        for o in (client.twins.outrun[outrun:] if client.twins else [])
    ]
    found += [
        Finding(
            f"{UNBOUND} its choice {u.index}'s text ({u.text_chars} characters) is not what its "
            f"{u.ids} token ids decode to: the ids count nothing of the text they came with",
            expected="a text its token ids decode to",
            received={"ids": u.ids, "text_chars": u.text_chars},
            exchange=u.exchange,
        )
        for u in (client.twins.unbound[unbound:] if client.twins else [])
    ]
    found += [
        Finding(
            f"{OFF_ROW} {r.size} tokens where the request asked for logprobs {r.asked} ({r.where}): "
            f"the {r.asked} likeliest, and the sampled token when it is not among them",
            expected=f"{r.asked} or {r.asked + 1} entries",
            received=r.size,
            exchange=r.exchange,
        )
        for r in (client.rows.off[rows:] if client.rows else [])
    ]
    found += [
        Finding(
            f"{RESENT} ({r.error}); the suite sent the request again on a new connection, the lost attempt "
            f"charged at its price ({r.charged} tokens)",
            expected="an answer",
            received=r.error,
            exchange=r.exchange,
        )
        for r in client.resends[resent:]
    ]
    return found


def _marks(client: Client) -> tuple[int, int, int, int, int, int, int]:
    ledger = client.ledger
    return (
        len(ledger.overspends),
        len(ledger.understated),
        len(client.resends),
        len(ledger.overclaimed),
        len(client.twins.outrun) if client.twins else 0,
        len(client.twins.unbound) if client.twins else 0,
        len(client.rows.off) if client.rows else 0,
    )


def run_check(check: Check, ctx: Context) -> CheckResult:
    ctx.findings, ctx.notes = [], []
    tokens_before, marks = ctx.client.ledger.tokens, _marks(ctx.client)
    start = time.perf_counter()
    outcome, reason, withheld = Outcome.PASSED, "", 0
    answers: list[tuple[str, Reply]] = []

    def keep(method: str, path: str, content: bytes | None, reply: Reply) -> None:
        answers.append((path, reply))

    ctx.client.observers.append(keep)
    try:
        check.func(ctx)
    except Unproven as exc:
        outcome, reason = Outcome.UNPROVEN, str(exc)
    except Skipped as exc:
        outcome, reason = Outcome.SKIPPED, str(exc)
    except Halted as exc:  # a premise failed, or a request went past its price
        outcome, reason, withheld = Outcome.UNPROVEN, str(exc), exc.worst
    except OverCeiling as exc:  # the client's ledger refused a request mid-check
        outcome, reason, withheld = (
            _for_ceiling(exc.worst, ctx),
            f"{OVER_CEILING}: {exc}",
            exc.worst,
        )
    except Stop:
        pass
    except Exception as exc:
        off = off_schema(ctx.api, answers)
        if off is not None:  # an answer off the API's shape broke the check: the server's doing
            ctx.fail(
                "an answer is not the API's shape, and the check could not read it "
                f"({type(exc).__name__}: {str(exc)[:200]})",
                expected="the spec's schema",
                received=off[1],
                reply=off[0],
            )
        else:  # the suite's own bug: kept apart from findings
            outcome = Outcome.ERROR
            reason = "".join(traceback.format_exception_only(exc)).strip()
            reason += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:])
    finally:
        ctx.client.observers.remove(keep)
    ctx.findings += _client_findings(ctx.client, marks)
    if ctx.findings and outcome is not Outcome.ERROR:
        only_warnings = all(f.warning for f in ctx.findings) and not ctx.config.strict
        outcome = Outcome.WARNED if only_warnings else Outcome.FAILED
    if outcome is Outcome.PASSED and ctx.notes:
        reason = "; ".join(ctx.notes)
    return CheckResult(
        check.id,
        check.all_tags,
        check.doc,
        outcome,
        list(ctx.findings),
        reason,
        time.perf_counter() - start,
        ctx.client.ledger.tokens - tokens_before,
        withheld,
    )


FAIR_SPENT = "fair spent"  # ctx.memo: what the checks run so far would cost a conforming server


def _for_ceiling(cost: int, ctx: Context, check: Check | None = None) -> Outcome:
    """A check the ceiling kept from running: the server's doing (UNPROVEN) where what it
    generated beyond a conforming server's bounds took the room the check would fit in, or where
    the max_model_len it claims prices the check past a ceiling the spec's would fit; the options'
    choice (SKIPPED) where the check would not fit even after a conforming server's spend (the
    quick profile, which proves no premise, or a --token-ceiling too low for the selection): the
    note says which ceiling would run it."""
    room = ctx.config.token_ceiling - ctx.memo.get(FAIR_SPENT, 0)
    if cost <= room:
        return Outcome.UNPROVEN
    if check is not None and ctx.max_model_len > ctx.spec_model.max_model_len:
        spec_cost = check.worst_case(
            ctx.config, CostModel.of(ctx.api, ctx.spec_model.max_model_len)
        )
        if spec_cost <= room:
            return Outcome.UNPROVEN  # the claim's price, not the check's
    return Outcome.SKIPPED


def execute(check: Check, ctx: Context, cost: int | None = None) -> CheckResult:
    """One check, unless its worst case (`cost`: the server does not conform) would pass the
    ceiling; then it is skipped, with the reason and the ceiling that would let it run."""
    cost = check.worst_case(ctx.config, _cost(ctx)) if cost is None else cost
    cost = ctx.client.ledger.priced(cost)  # by the overshoot seen, if the server overshot
    if cost and ctx.client.ledger.halted:
        return CheckResult(
            check.id,
            check.all_tags,
            check.doc,
            Outcome.UNPROVEN,
            reason=f"not run: {ctx.client.ledger.halted}",
        )
    spent = ctx.client.ledger.tokens
    if cost and spent + cost > ctx.config.token_ceiling:
        return CheckResult(
            check.id,
            check.all_tags,
            check.doc,
            _for_ceiling(cost, ctx, check),
            reason=f"{OVER_CEILING}: it may generate {cost} tokens if the server does "
            f"not conform; {spent} of the ceiling of {ctx.config.token_ceiling} "
            f"are spent (--token-ceiling {spent + cost} would run it)",
        )
    result = run_check(check, ctx)
    # a conforming server's spend: what the server generated within the check's bound
    fair = min(result.tokens, check.token_bound(ctx.config))
    ctx.memo[FAIR_SPENT] = ctx.memo.get(FAIR_SPENT, 0) + fair
    return result


def _cost(ctx: Context) -> CostModel:
    return ctx.client.ledger.cost or CostModel.of(ctx.api, ctx.max_model_len)


def premises_for(checks: Sequence[Check], ctx: Context) -> list[Check]:
    """The premise checks (premise:*) to run before the rest of a selection: those it holds, and
    in the full profile every one wherever a check may generate (the quick profile sends nothing
    a conforming server generates for; a request past its price there halts the client all the
    same). They are the registry's whose checks `checks` are (the checks package registers
    them all at once, so the engine needs no import of it)."""
    needed = ctx.config.full and any(
        c.worst_case(ctx.config, _cost(ctx)) for c in checks if not c.premise
    )
    held = {c.id for c in checks}
    return [c for c in REGISTRY if c.premise and (needed or c.id in held)]


def plan(checks: Sequence[Check], ctx: Context) -> list[tuple[Check, int]]:
    """The run order, each check with its worst-case cost (a shared spend's, for each
    check that shares it: the first of them that runs pays it).

    Checks that cannot generate come first (the ledger never stops them), then the
    rest by cost, least first, so a ceiling too low for a non-conforming server skips
    the dearest few. Checks that share one spend stay together.
    """
    costs = {c.id: c.worst_case(ctx.config, _cost(ctx)) for c in checks}
    shared: dict[str, int] = {}
    for c in checks:
        if c.shares:
            shared[c.shares] = max(shared.get(c.shares, 0), costs[c.id])
    key = {c.id: shared[c.shares] if c.shares else costs[c.id] for c in checks}
    ordered = sorted(checks, key=lambda c: key[c.id])  # stable: ties keep registration order
    return [(c, key[c.id]) for c in ordered]


def _still_needed(skipped: Sequence[Check], results: dict[str, CheckResult], ctx: Context) -> int:
    """Tokens the checks skipped for the ceiling may cost: their plan, or what the ledger
    withheld from them if more (a spend they share counted once)."""
    shared: dict[str, int] = {}
    total = 0
    for c in skipped:
        cost = max(c.worst_case(ctx.config, _cost(ctx)), results[c.id].withheld)
        if c.shares:
            shared[c.shares] = max(shared.get(c.shares, 0), cost)
        else:
            total += cost
    return total + sum(shared.values())


METRICS_PROBE_S = 10.0  # the longest a --metrics-url is given to answer before the run


def metrics_answer(url: str | None, timeout: float) -> None:
    """A --metrics-url that gives no HTTP answer, or 404, is the user's to fix (exit 2 before the
    run), not the deployment's finding; any other answer is left to the metrics:* checks."""
    if not url:
        return
    fix = "fix the URL, or leave --metrics-url out (then the metrics:* checks do not run)"
    try:
        with httpx.Client(timeout=min(timeout, METRICS_PROBE_S)) as http:
            with http.stream("GET", url) as resp:
                status = resp.status_code
    except httpx.HTTPError as exc:
        raise ConfigError(
            f"--metrics-url {url} gives no answer ({type(exc).__name__}): {fix}"
        ) from None
    if status == 404:
        raise ConfigError(f"--metrics-url {url} answers 404 (no such page): {fix}")


def texts(model: ModelInfo, special: re.Pattern[str] | None, ids: list[int]) -> tuple[str, str]:
    """What `ids` decode to by the model's tokenizer: without its special tokens (`special`,
    x-models special_token_pattern: as vLLM writes a text by default), and with them
    (skip_special_tokens false)."""
    plain = [i for i in ids if special is None or not special.fullmatch(decode(model, [i]))]
    return decode(model, plain), decode(model, ids)


def text_tokens(model: ModelInfo, text: str) -> int:
    """The tokens `text` holds by the model's tokenizer, no special token added."""
    return len(encode(model, text, add_special_tokens=False))


def connect(config: RunConfig, transport: httpx.BaseTransport | None = None) -> Context:
    """A Context for `config` (checked against its spec, `config.api`), after GET /v1/models;
    the caller closes ctx.client."""
    config.validate()
    SECRETS.add(*config.secrets)  # masked in every answer as it enters, before any cut
    metrics_answer(config.metrics_url, config.timeout)
    client = Client(
        config.base_url,
        config.api_key,
        timeout=config.timeout,
        transport=transport,
        rate_limit=config.rate_limit,
        bounds=answer_bounds(config.api.caps, config.timeout),
    )
    try:
        ctx = Context(config, client, discover(client, config.model, config.api))
        client.ledger.ceiling, client.ledger.cost = (
            config.token_ceiling,
            CostModel.of(config.api, ctx.max_model_len),
        )
        assert config.seed is not None  # RunConfig draws one
        # a plain answer's text counted by the model's tokenizer (the core's: contract.tokens)
        client.ledger.count_text = functools.partial(text_tokens, ctx.spec_model)
        pattern = config.api.special_token_pattern(config.model)
        special = re.compile(pattern) if pattern else None
        client.rows = RowSizes()  # every answer's logprob rows, whichever check got them
        client.observers.append(client.rows.observe)
        client.twins = Twins(
            config.seed,
            config.api.greedy_below,
            decode=functools.partial(texts, ctx.spec_model, special),
            count_text=client.ledger.count_text,
        )
        return ctx
    except BaseException:
        client.close()
        raise


def _exchange_seen(
    current: list[str], emit: Handler, method: str, path: str, content: bytes | None, reply: Reply
) -> None:
    """The client's observer: an answer, told as an event of the check running now."""
    emit(ExchangeSeen(current[0], method, path, content, reply))


def run(
    config: RunConfig,
    checks: Sequence[Check],
    *,
    handlers: Sequence[Handler] = (),
    transport: httpx.BaseTransport | None = None,
) -> RunReport:
    """Run `checks` (already selected), least costly first, telling `handlers` each event of the
    run (conformance.engine.events) in their order; the report lists the checks in the
    selection's order. Raise ConfigError/Unreachable before any check (and before any event)."""

    def emit(event: Event) -> None:
        for handler in handlers:
            handler(event)

    report = RunReport(
        config.base_url,
        config.model,
        config.profile,
        token_ceiling=config.token_ceiling,
        versions=versions(config.api),
        strict=config.strict,
        secrets=config.secrets,
        seed=config.seed,
        options=config.options(),
    )
    start = time.perf_counter()
    ctx = connect(config, transport)
    results: dict[str, CheckResult] = {}
    coverage = Coverage(ctx.api, exhausted_key=bool(config.exhausted_key))
    ctx.client.observers.append(coverage.observe_reply)
    ctx.client.raw_observers.append(coverage.observe)
    current = [""]  # the id of the check running now
    ctx.client.observers.append(functools.partial(_exchange_seen, current, emit))
    with ctx.client:
        report.server_max_model_len = ctx.max_model_len if ctx.given("max_model_len") else None
        report.assumed = {
            n: getattr(ctx.spec_model, n) for n in DEPLOYMENT_NUMBERS if not ctx.given(n)
        }
        proven = premises_for(checks, ctx)
        selected = [c for c in checks if not c.premise]
        checks = [*proven, *selected]
        emit(RunStarted(config, tuple(checks)))
        paid: set[str] = set()  # shared spends already made

        def order() -> Iterator[tuple[Check, int]]:
            """The premises first, in their order (premise:max_tokens bounds the next one's price);
            then the plan, made with what they proved."""
            for premise in proven:
                yield premise, premise.worst_case(config, _cost(ctx))
            yield from plan(selected, ctx)

        for check, cost in order():
            emit(CheckStarted(check))
            current[0] = check.id
            result = results[check.id] = execute(check, ctx, 0 if check.shares in paid else cost)
            kept_out = result.outcome is Outcome.UNPROVEN or result.reason.startswith(OVER_CEILING)
            if check.shares and not kept_out:  # a check that did not run paid nothing
                paid.add(check.shares)
            for finding in result.findings:
                emit(FindingMade(check, finding))
            emit(CheckFinished(check, result))
        report.tokens = ctx.client.ledger.tokens
        report.token_plan = token_bound(checks, config, _cost(ctx))  # with what the premises proved
        report.overspent = [
            {"check": r.id, "spent": r.tokens}
            for r in results.values()
            if any(f.message.startswith(OVERSPEND) for f in r.findings)
        ]
        report.ceiling_notes = list(ctx.memo.get(LEDGER_NOTES, []))
        coverage.observe_effects(
            f for c in checks if results[c.id].outcome is Outcome.PASSED for f in c.effects
        )
        report.coverage = coverage.summary()
        report.rate_limit = ctx.client.pace.summary() if ctx.client.pace else None
        report.twins = ctx.client.twins.summary() if ctx.client.twins else None
    report.results = [results[c.id] for c in checks]
    skipped = [c for c in checks if results[c.id].reason.startswith(OVER_CEILING)]
    report.ceiling_skipped = [c.id for c in skipped]
    if skipped:
        report.ceiling_needed = report.tokens + _still_needed(skipped, results, ctx)
    report.duration = time.perf_counter() - start
    emit(RunFinished(report))
    return report
