"""Which refused golden cases can be sent cheaply, written once to cheap_requests.json.

A case that expects a refusal costs nothing against a conforming server, but a
server that wrongly accepts it generates for it: up to its max_model_len per
sequence when the case leaves `max_tokens` out. So the suite sends such a case
with `max_tokens: 1` and `n: 1` added where its body has neither, or, when it
needs `max_tokens` missing or large, as a stream it closes after the first event
(`stream: true` added, if absent), or with `allowed_token_ids` set to the end
tokens, or both (a server that has shown it stops at the end tokens and wrongly
accepts the stream then writes one token a sequence, not a tail past the close);
each only where the contract refuses the changed request exactly as the
original one (same code, param and message).

The contract decides that here, offline, so the suite (conformance/checks) never
runs the core's validators against the servers it judges; `python -m
conformance.golden.cheap` rewrites the file (from contract.spec(); the functions take the
spec) and a test checks it is fresh. A case missing from the file (or whose body changed
since) is sent as it is and counted at its worst case.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from conformance.golden import HERE, Case, load_cases
from conformance.wire.token_cost import CostModel, cheapest, generating_paths
from contract import ApiError, Contract, ModelInfo, Spec, spec

OUT = HERE / "cheap_requests.json"
STREAM_FIELD = {"stream": True}
# Statuses decided by the body's bytes, which must stay as they are.
SIZE_STATUSES = {413}
NOT_COMPARABLE = ("not comparable",)


def body_digest(body: bytes | None) -> str:
    return hashlib.sha256(body or b"").hexdigest()[:16]


def json_object(case: Case) -> dict[str, Any] | None:
    """The body as a JSON object, when re-encoding it gives back the same bytes."""
    try:
        body = json.loads(case.body or b"")
    except ValueError:
        return None
    return body if isinstance(body, dict) and json.dumps(body).encode() == case.body else None


@cache
def _contract(api: Spec) -> Contract:
    return Contract(api)


def verdict(contract: Contract, body: dict[str, Any]) -> tuple[Any, ...] | None:
    """The contract's refusal of a completion body (code, param, message), or None."""
    try:
        contract.validate_completion(body)
    except ApiError as exc:
        error = contract.errors.body(exc, "")["error"]
        return exc.code, error["param"], error["message"]
    except Exception:
        return NOT_COMPARABLE
    return None


def _model(api: Spec, body: dict[str, Any]) -> ModelInfo:
    """The body's model, or the spec's default one."""
    return api.models.get(str(body.get("model"))) or api.models[api.default_model]


def derive(case: Case, api: Spec) -> dict[str, Any] | None:
    """{"add": fields, "close_after_first_event": bool} for a refused case of `api`, or None."""
    body = json_object(case)
    if (
        case.expect_status == 200
        or case.expect_status in SIZE_STATUSES
        or body is None
        or case.method != "POST"
        or case.path not in generating_paths(api)
    ):
        return None
    # the chat route is refused whatever the body; a body the contract accepts is refused
    # before it is read (key, media type): either way added fields change nothing
    completions = case.path == api.completions_path
    contract = _contract(api)
    original = verdict(contract, body) if completions else None
    if original == NOT_COMPARABLE:
        return None

    def alike(extra: dict[str, Any]) -> bool:
        return original is None or verdict(contract, {**body, **extra}) == original

    missing = {k: v for k, v in cheapest(api).items() if k not in body}
    add = next((e for e in (missing, *({k: v} for k, v in missing.items())) if e and alike(e)), {})
    close = False
    end_tokens: dict[str, Any] = {"allowed_token_ids": list(_model(api, body).eos_token_ids)}
    free_end = "allowed_token_ids" not in body
    if CostModel.of(api, _model(api, body).max_model_len).body({**body, **add}) > 1 and completions:
        if body.get("stream") is True:
            close = True
        elif "stream" not in body and alike({**add, **STREAM_FIELD}):
            add, close = {**add, **STREAM_FIELD}, True
        elif free_end and alike({**add, **end_tokens}):
            add = {**add, **end_tokens}
        # a stream closed early with the end tokens too: where the server has shown it stops
        # there, one that wrongly accepts it writes a token a sequence, not a tail the meter
        # cannot see after the close
        if close and free_end and alike({**add, **end_tokens}):
            add = {**add, **end_tokens}
    if not add and not close:
        return None
    return {"body_sha256": body_digest(case.body), "add": add, "close_after_first_event": close}


def table(api: Spec, cases: list[Case] | None = None) -> dict[str, Any]:
    out = {}
    for case in cases if cases is not None else load_cases():
        entry = derive(case, api)
        if entry is not None:
            out[case.id] = entry
    return out


def render(api: Spec, cases: list[Case] | None = None) -> str:
    return json.dumps(table(api, cases), indent=1, sort_keys=True) + "\n"


def write(api: Spec, path: Path = OUT) -> Path:
    path.write_text(render(api), encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write(spec()))
