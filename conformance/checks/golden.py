"""golden:<case id> — the golden cases shipped in conformance/golden/, one check each.

The whole error body is compared (status, type, code, param, message) with the
request id masked; the request id's format and the X-Request-Id header are
checked too. A case that the server must accept (status 200) generates tokens,
so it runs only in the full profile; one that would generate more than
CHEAP_TOKENS is made cheap: a stream is closed after its first event, and a
request without stream is sent with allowed_token_ids set to the model's end
tokens, so that it stops after one token (the rules it tests do not look at
allowed_token_ids).

A case that expects a refusal is sent with `max_tokens: 1` and `n: 1` added
where its body has neither, or, when it needs `max_tokens` missing or large, as
a stream closed after its first event (or with the end tokens as its only
allowed_token_ids), as conformance/golden/cheap_requests.json says (written
offline by conformance.golden.cheap, where the contract refuses each changed
request exactly as the original one): a server that wrongly accepts it writes
one token, or one event. Every case is counted at its worst case
(conformance.wire.token_cost) by the ledger.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache, partial
from typing import Any

from conformance.checks.helpers.claims import shrink
from conformance.checks.helpers.common import cheap_by_end_tokens, first_chunk_accepted
from conformance.engine.config import RunConfig
from conformance.engine.context import Context
from conformance.engine.registry import register
from conformance.golden import HERE, Case, load_cases
from conformance.wire.client import AUTH_DEFAULT, Reply
from conformance.wire.ledger import CHEAP_TOKENS
from conformance.wire.token_cost import CostModel


def _token_bound(case: Case) -> int:
    return min(case.generates, CHEAP_TOKENS) if case.generates else 0


# Golden cases whose requests or expected bodies are built from the model's layers and
# hidden size (layer 31, vectors of 4,096, the capture cap): fixed data for the spec's numbers.
DIMENSION_TAGS = frozenset({"lens", "steering"})
DIMENSION_IDS = ("steering.", "model.layers", "caps.capture")


def depends_on_dimensions(case: Case) -> bool:
    return bool(DIMENSION_TAGS & set(case.tags)) or case.id.startswith(DIMENSION_IDS)


# Fields that keep a request from stopping at its end tokens: it cannot be made cheap by them.
HOLDS_THE_END = frozenset({"allowed_token_ids", "min_tokens", "ignore_eos"})

CHEAP_TABLE = HERE / "cheap_requests.json"  # written by python -m conformance.golden.cheap


@cache
def _cheap_table() -> dict[str, Any]:
    """The table, read once; a missing one is an error (an install that lost it would send the
    refused cases uncapped, or skip them, and still pass): never an empty table."""
    table: dict[str, Any] = json.loads(CHEAP_TABLE.read_text(encoding="utf-8"))
    return table


def refusal_request(case: Case) -> tuple[dict[str, Any] | None, bool]:
    """(the body to send for a refused case made cheap, or None to send its bytes as they are;
    whether to send it as a stream closed after its first event)."""
    entry = _cheap_table().get(case.id)
    if entry is None or entry["body_sha256"] != hashlib.sha256(case.body or b"").hexdigest()[:16]:
        return None, False
    return {**json.loads(case.body or b"{}"), **entry["add"]}, entry["close_after_first_event"]


def refusal_body(case: Case) -> bytes | None:
    """The bytes a refused case is sent with, when not its own."""
    body, _ = refusal_request(case)
    return None if body is None else json.dumps(body).encode()


def _accepted_body(
    case: Case, model_eos: list[int], cost: CostModel
) -> tuple[dict[str, Any], bool]:
    """(the body an accepted case is sent with, whether its stream is closed after one event):
    a stream as first_chunk_accepted sends it, a body without stream with the end tokens added."""
    body = json.loads(case.body or b"{}")
    if case.generates <= CHEAP_TOKENS:
        return body, False
    if body.get("stream") is True:
        if cheap_by_end_tokens(body, cost):
            return {**body, "allowed_token_ids": sorted(cost.end_tokens)}, False
        return body, True
    if not HOLDS_THE_END & set(body):
        body["allowed_token_ids"] = model_eos
    return body, False


def worst_case(case: Case, cost: CostModel, config: RunConfig) -> int:
    """What the case may cost if the server does not conform."""
    if case.method != "POST" or case.path not in cost.generating:
        return 0
    if case.expect_status == 200:
        body, closed_early = _accepted_body(
            case, list(config.api.models[config.model].eos_token_ids), cost
        )
        return min(cost.body(body), CHEAP_TOKENS) if closed_early else cost.body(body)
    refused, closed_early = refusal_request(case)
    worst = cost.body(case.body or b"" if refused is None else refused)
    return min(worst, CHEAP_TOKENS) if closed_early else worst


def run_case(case: Case, ctx: Context) -> None:
    assumed, served = ctx.spec_model, ctx.model
    if "caps" in case.tags:
        ctx.need_given("max_model_len", "the case")
    if "caps" in case.tags and served.max_model_len != assumed.max_model_len:
        shrink(
            ctx,
            "max_model_len",
            f"the golden cap cases assume max_model_len {assumed.max_model_len}; this server "
            f"reports {served.max_model_len} (the caps: checks cover it)",
        )
    if depends_on_dimensions(case) and (served.num_layers, served.hidden_size) != (
        assumed.num_layers,
        assumed.hidden_size,
    ):
        shrink(
            ctx,
            "num_layers",
            f"the golden lens cases assume num_layers {assumed.num_layers} and hidden_size "
            f"{assumed.hidden_size}; this server reports {served.num_layers} and "
            f"{served.hidden_size} (the lens: and caps: checks cover it)",
        )
    auth = AUTH_DEFAULT if case.auth == "default" else case.auth
    if case.expect_status == 200:
        return _accepted(case, ctx, auth)
    body, closed_early = refusal_request(case)
    reply: Reply
    if closed_early:
        reply = ctx.client.stream(
            case.path, body, headers=case.headers, auth=auth, stop_after_events=1
        )
    else:
        reply = ctx.client.request(
            case.method,
            case.path,
            content=refusal_body(case) or case.body,
            headers=case.headers,
            auth=auth,
        )
    ctx.expect_response(reply, case.expect_status, case.expect_body)


def _accepted(case: Case, ctx: Context, auth: str) -> None:
    body = json.loads(case.body or b"{}")
    if case.generates > CHEAP_TOKENS and body.get("stream") is True:
        return first_chunk_accepted(ctx, body, path=case.path, headers=case.headers, auth=auth)
    if case.generates > CHEAP_TOKENS:
        if HOLDS_THE_END & set(body):
            ctx.skip(f"it would generate {case.generates} tokens and cannot be made cheap")
        body["allowed_token_ids"] = list(ctx.model.eos_token_ids)
    reply = ctx.client.request(case.method, case.path, body=body, headers=case.headers, auth=auth)
    ctx.expect_response(reply, 200, None)
    ctx.expect_request_id(reply, in_body=False)


def _case_worst(case: Case, config: RunConfig, cost: CostModel) -> int:
    return worst_case(case, cost, config)


# The wrong deployments a golden case must fail (Check.catches), by case id.
CATCHES = {"range.logprobs.maximum.at": ("wrong:logprobs capped at 5",)}

_cheap_table()  # read as the cases register: a missing table fails the import, not a check
for _case in load_cases():
    register(
        f"golden:{_case.id}",
        # its feature tags among them (generated from the spec's x-kind: golden/generate.py)
        tags=dict.fromkeys(("golden", *_case.tags)),
        doc=_case.doc,
        tokens=_token_bound(_case),
        worst=partial(_case_worst, _case),
        catches=CATCHES.get(_case.id, ()),
    )(partial(run_case, _case))
