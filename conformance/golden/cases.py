"""What every family of golden cases shares (fields.py, rules.py, caps.py, lens.py,
http_cases.py): a minimal body, a case, and expected error bodies built from the spec's
templates and numbers, not by calling the core."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonschema

from conformance.golden import expand
from conformance.spec.bodies import REQUEST_ID_MASK
from conformance.wire.token_cost import CostModel
from contract.spec import REQUEST_SCHEMA, Spec

PROMPT = "The sky is"
FILLER = 791  # an ordinary token of the vocabulary (" The"): prompts of a chosen length


# A list bound past this is held by robust:lists.past_bound, which builds its bodies at run time:
# a golden case of a thousand items would be a page no reviewer reads.
GOLDEN_LIST_ITEMS = 16


def satisfy(api: Spec, body: dict[str, Any], keep: str | None = None) -> dict[str, Any]:
    """`body` with what the spec's cross-field rules need of it filled in: each entry of
    CompletionRequest's allOf whose `if` the body meets and whose `then` it breaks has its
    `then` met (its required fields given a value, its consts set, its minima reached, a field
    it types null left out, into nested objects). `keep`, the field a case is about, is never
    changed: where the `then` is on it, the `if` is left unmet instead (by the consts of what
    it must not meet). What no filling meets is left broken, for the generator's own check of
    its accepted cases to name (generate.py)."""
    body = copy.deepcopy(body)
    request = api.schema(REQUEST_SCHEMA)
    entries = [e for e in request.get("allOf", []) if "if" in e]
    for _ in range(len(entries) + 1):
        broken = next(
            (e for e in entries if _holds(e["if"], body) and not _holds(e["then"], body)), None
        )
        if broken is None:
            break
        before = copy.deepcopy(body)
        _fill(broken["then"], body, keep, request["properties"])
        if _holds(broken["if"], body) and not _holds(broken["then"], body):
            _fill(broken["if"].get("not", {}), body, keep, request["properties"])
        if body == before:
            break
    return body


def _holds(schema: dict[str, Any], body: Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(body)


def _fill(
    schema: dict[str, Any], target: dict[str, Any], keep: str | None, fields: dict[str, Any]
) -> None:
    props = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in target and name != keep:
            target[name] = _value(props.get(name, {}), fields.get(name, {}))
    for name, sub in props.items():
        value = target.get(name)
        if name == keep:
            continue
        if "const" in sub:
            target[name] = sub["const"]
        elif sub.get("type") == "null":
            target.pop(name, None)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in sub and value < sub["minimum"]:
                target[name] = sub["minimum"]
        elif isinstance(value, dict):
            _fill(sub, value, None, fields.get(name, {}).get("properties", {}))


def _value(sub: dict[str, Any], field: dict[str, Any]) -> Any:
    """A value for a field a rule requires: the rule's const or minimum, else the field's own
    default or minimum."""
    for schema, key in ((sub, "const"), (sub, "minimum"), (field, "x-default"), (field, "minimum")):
        if schema.get(key) is not None:
            return schema[key]
    return True if field.get("type") in ("boolean", ["boolean", "null"]) else 1


def generates(api: Spec, body: dict[str, Any]) -> int:
    """The tokens an accepted case generates at most: what the gate prices it at (prompts x n
    x max_tokens, and any field the spec says multiplies sequences)."""
    model = api.models[body.get("model", api.default_model)]
    return CostModel.of(api, model.max_model_len).body(expand(body))


def error(code: str, message: str, param: str | None, api: Spec) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": api.error_codes[code]["type"],
            "param": param,
            "code": code,
        },
        "request_id": REQUEST_ID_MASK,
    }


def case(
    cid: str,
    doc: str,
    tags: list[str],
    body: Any,
    status: int,
    error: dict[str, Any] | None = None,
    generates: int = 0,
    path: str = "/v1/completions",
    method: str = "POST",
    **request: Any,
) -> dict[str, Any]:
    req: dict[str, Any] = {"method": method, "path": path, **request}
    if body is not None:
        req["body"] = body
    expect: dict[str, Any] = {"status": status}
    if error is not None:
        expect["body"] = error
    if status == 200:
        expect["generates"] = generates
    return {"id": cid, "doc": doc, "tags": tags, "request": req, "expect": expect}


def show(value: Any) -> str:
    return json.dumps(value)


class Cases:
    """What every family of cases shares: the spec, its default model, a minimal body,
    and expected error bodies built from the spec's templates."""

    def __init__(self, api: Spec) -> None:
        self.api = api
        self.model = api.models[api.default_model]
        self.base = {"model": self.model.name, "prompt": PROMPT, "max_tokens": 1}

    def invalid(
        self, param: str | None, message: str, code: str = "invalid_request"
    ) -> dict[str, Any]:
        return error(code, message, param, self.api)

    def rule(self, rid: str, table: str = "x-rules", **fields: Any) -> dict[str, Any]:
        rule = self.api.rule(table, rid)
        return error(rule["code"], rule["message"].format(**fields), rule.get("param"), self.api)

    def _model_msg(self, rid: str, **fields: Any) -> str:
        return self.api.model_rules[rid]["message"].format(**fields)
