"""What every family of golden cases shares (fields.py, rules.py, caps.py, lens.py,
http_cases.py): a minimal body, a case, and expected error bodies built from the spec's
templates and numbers, not by calling the core."""

from __future__ import annotations

import json
from typing import Any

from conformance.spec.bodies import REQUEST_ID_MASK
from contract.spec import Spec

PROMPT = "The sky is"
FILLER = 791  # an ordinary token of the vocabulary (" The"): prompts of a chosen length


# A list bound past this is held by robust:lists.past_bound, which builds its bodies at run time:
# a golden case of a thousand items would be a page no reviewer reads.
GOLDEN_LIST_ITEMS = 16


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
