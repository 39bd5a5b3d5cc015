"""What the contract expects, read from openapi.yaml (never written out in Python)."""
from __future__ import annotations

import re
from functools import cache
from typing import Any

from conformance.golden import REQUEST_ID_MASK
from contract import spec


@cache
def request_id_re() -> re.Pattern[str]:
    """`prefix` + `hex_digits` lowercase hex digits (x-request-id)."""
    rid = spec().request_id
    return re.compile(rf"{re.escape(rid['prefix'])}[0-9a-f]{{{rid['hex_digits']}}}")


def status_of(code: str) -> int:
    return spec().error_codes[code]["status"]


def error_body(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """The whole error body for `code`, its request id masked."""
    return {"error": {"message": message, "type": spec().error_codes[code]["type"],
                      "param": param, "code": code},
            "request_id": REQUEST_ID_MASK}


def message(key: str, **fields: Any) -> str:
    """An x-messages template, filled."""
    return spec().messages[key].format(**fields)


def token_rule(rule_id: str) -> dict[str, Any]:
    return spec().token_rules[rule_id]


def token_rule_body(rule_id: str, **fields: Any) -> dict[str, Any]:
    rule = token_rule(rule_id)
    return error_body(rule["code"], rule["message"].format(**fields), rule["param"])


def steering_body(reason: str, param: str, **fields: Any) -> dict[str, Any]:
    """The 400 for a bad steering vector, with the reason's template (x-model-rules)."""
    rule = spec().model_rules["steering_vector"]
    text = rule["message"].format(param=param, reason=rule["reasons"][reason].format(**fields))
    return error_body(rule["code"], text, param)


def mask(body: Any) -> Any:
    if isinstance(body, dict) and "request_id" in body:
        return {**body, "request_id": REQUEST_ID_MASK}
    return body


def event_schemas() -> dict[str, dict[str, Any]]:
    """kind -> inlined schema, from x-event-schemas under the stream's 200 response."""
    return spec().event_schemas
