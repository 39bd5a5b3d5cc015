"""Run selected checks against a server: connect, run each check, keep within the token ceiling."""
from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Sequence

import httpx

from conformance.client import Client
from conformance.config import ConfigError, RunConfig
from conformance.context import Context, ServerInfo, Skipped, Stop
from conformance.registry import Check
from conformance.results import CheckResult, Outcome, RunReport
from contract import Spec, spec
from contract.version import versions

MODELS_PATH = "/v1/models"

Progress = Callable[[Check, CheckResult | None], None]   # None: the check is starting


class Unreachable(ConfigError):
    """The server did not answer at all (exit code 2)."""


# The numbers GET /v1/models reports for a model (the Model schema), read into ModelInfo.
DEPLOYMENT_NUMBERS = ("max_model_len", "num_layers", "hidden_size")


def discover(client: Client, model: str, api: Spec | None = None) -> ServerInfo:
    """GET /v1/models: the deployment's max_model_len, num_layers and hidden_size of each model.

    A server that does not list the model (or one of its numbers) gets the
    spec's value here, and the `routes:models` check reports the omission.
    """
    api = api if api is not None else spec()
    reply = client.request("GET", MODELS_PATH)
    if reply.status is None:
        raise Unreachable(f"cannot reach {client.base_url}: {reply.error}")
    if reply.status == api.error_codes["invalid_api_key"]["status"]:
        raise ConfigError(f"the server refused the API key (GET {MODELS_PATH} answered {reply.status})")
    models = dict(api.models)
    data = reply.data.get("data") if isinstance(reply.data, dict) else None
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict) or entry.get("id") not in models:
            continue
        numbers = {name: entry[name] for name in DEPLOYMENT_NUMBERS
                   if type(entry.get(name)) is int and entry[name] >= 1}
        models[entry["id"]] = dataclasses.replace(models[entry["id"]], **numbers)
    return ServerInfo(models=models)


def run_check(check: Check, ctx: Context) -> CheckResult:
    ctx.findings = []
    tokens_before = ctx.client.tokens
    start = time.perf_counter()
    outcome, reason = Outcome.PASSED, ""
    try:
        check.func(ctx)
    except Skipped as exc:
        outcome, reason = Outcome.SKIPPED, str(exc)
    except Stop:
        pass
    except Exception as exc:  # the suite's own bug: kept apart from findings
        outcome = Outcome.ERROR
        reason = "".join(traceback.format_exception_only(exc)).strip()
        reason += "\n" + "".join(traceback.format_tb(exc.__traceback__)[-3:])
    if ctx.findings and outcome is not Outcome.ERROR:
        outcome = Outcome.FAILED
    return CheckResult(check.id, check.all_tags, check.doc, outcome, list(ctx.findings), reason,
                       time.perf_counter() - start, ctx.client.tokens - tokens_before)


def execute(check: Check, ctx: Context) -> CheckResult:
    """One check, unless its token bound would pass the ceiling (then skipped, with the reason)."""
    bound = check.token_bound(ctx.config)
    if ctx.client.tokens + bound > ctx.config.token_ceiling:
        return CheckResult(check.id, check.all_tags, check.doc, Outcome.SKIPPED,
                           reason=f"it may generate {bound} tokens; {ctx.client.tokens} of the "
                                  f"ceiling of {ctx.config.token_ceiling} are spent")
    return run_check(check, ctx)


def connect(config: RunConfig, transport: httpx.BaseTransport | None = None,
            api: Spec | None = None) -> Context:
    """A Context for `config` and `api` (spec() by default), after GET /v1/models; the
    caller closes ctx.client."""
    config.validate()
    api = api if api is not None else spec()
    client = Client(config.base_url, config.api_key, timeout=config.timeout, transport=transport)
    try:
        return Context(config, client, discover(client, config.model, api), api=api)
    except BaseException:
        client.close()
        raise


def run(config: RunConfig, checks: Sequence[Check], *, progress: Progress | None = None,
        transport: httpx.BaseTransport | None = None) -> RunReport:
    """Run `checks` (already selected) in order; raise ConfigError/Unreachable before any check."""
    report = RunReport(config.base_url, config.model, config.profile, token_ceiling=config.token_ceiling,
                       versions=versions())
    start = time.perf_counter()
    ctx = connect(config, transport)
    with ctx.client:
        report.server_max_model_len = ctx.max_model_len
        for check in checks:
            if progress:
                progress(check, None)
            result = execute(check, ctx)
            report.results.append(result)
            if progress:
                progress(check, result)
        report.tokens = ctx.client.tokens
    report.duration = time.perf_counter() - start
    return report
