"""golden:<case id> — the golden cases shipped in conformance/golden/, one check each.

The whole error body is compared (status, type, code, param, message) with the
request id masked; the request id's format and the X-Request-Id header are
checked too. A case that the server must accept (status 200) generates tokens,
so it runs only in the full profile; one that would generate more than
CHEAP_TOKENS is made cheap: a stream is closed after its first event, and a
request without stream is sent with allowed_token_ids set to the model's end
tokens, so that it stops after one token (the rules it tests do not look at
allowed_token_ids).
"""
from __future__ import annotations

import json
from functools import partial

from conformance.checks.common import first_chunk_accepted
from conformance.client import AUTH_DEFAULT
from conformance.config import CHEAP_TOKENS
from conformance.context import Context
from conformance.golden import Case, load_cases
from conformance.registry import REGISTRY, Check

# Golden tags that name a feature a user may include or skip (see README).
LENS_FIELDS = {"output_residual_stream": "activations", "apply_steering_vectors": "steering",
               "logprobs": "logprobs", "prompt_logprobs": "logprobs", "stream": "streaming"}


def _feature_tags(case: Case) -> tuple[str, ...]:
    try:
        body = json.loads(case.body or b"{}")
    except ValueError:
        return ()
    if not isinstance(body, dict):
        return ()
    return tuple(sorted({tag for name, tag in LENS_FIELDS.items() if body.get(name) not in (None, False)}))


def _token_bound(case: Case) -> int:
    return min(case.generates, CHEAP_TOKENS) if case.generates else 0


# Golden cases whose requests or expected bodies are built from the model's layers and
# hidden size (layer 31, vectors of 4,096, the capture cap): fixed data for the spec's numbers.
DIMENSION_TAGS = frozenset({"lens", "steering"})
DIMENSION_IDS = ("steering.", "model.layers", "caps.capture")


def depends_on_dimensions(case: Case) -> bool:
    return bool(DIMENSION_TAGS & set(case.tags)) or case.id.startswith(DIMENSION_IDS)


def run_case(case: Case, ctx: Context) -> None:
    assumed, served = ctx.spec_model, ctx.model
    if "caps" in case.tags and served.max_model_len != assumed.max_model_len:
        ctx.skip(f"the golden cap cases assume max_model_len {assumed.max_model_len}; this server "
                 f"reports {served.max_model_len} (the caps: checks cover it)")
    if depends_on_dimensions(case) and (served.num_layers, served.hidden_size) != (
            assumed.num_layers, assumed.hidden_size):
        ctx.skip(f"the golden lens cases assume num_layers {assumed.num_layers} and hidden_size "
                 f"{assumed.hidden_size}; this server reports {served.num_layers} and "
                 f"{served.hidden_size} (the lens: and caps: checks cover it)")
    auth = AUTH_DEFAULT if case.auth == "default" else case.auth
    if case.expect_status == 200:
        return _accepted(case, ctx, auth)
    reply = ctx.client.request(case.method, case.path, content=case.body,
                               headers=case.headers, auth=auth)
    ctx.expect_response(reply, case.expect_status, case.expect_body)


def _accepted(case: Case, ctx: Context, auth: str) -> None:
    body = json.loads(case.body or b"{}")
    if case.generates > CHEAP_TOKENS and body.get("stream") is True:
        return first_chunk_accepted(ctx, body, path=case.path, headers=case.headers, auth=auth)
    if case.generates > CHEAP_TOKENS:
        if {"allowed_token_ids", "min_tokens", "ignore_eos"} & set(body):
            ctx.skip(f"it would generate {case.generates} tokens and cannot be made cheap")
        body["allowed_token_ids"] = list(ctx.model.eos_token_ids)
    reply = ctx.client.request(case.method, case.path, body=body, headers=case.headers, auth=auth)
    ctx.expect_response(reply, 200, None)
    ctx.expect_request_id(reply, in_body=False)


def register_golden(cases: list[Case] | None = None) -> list[Check]:
    out = []
    for case in cases if cases is not None else load_cases():
        tags = tuple(dict.fromkeys(("golden", *case.tags, *_feature_tags(case))))
        out.append(REGISTRY.add(Check(f"golden:{case.id}", partial(run_case, case), tags,
                                      case.doc, _token_bound(case))))
    return out


register_golden()
