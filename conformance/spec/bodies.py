"""What the contract expects, read from the run's spec (never written out in Python).

Each function takes the Spec the deployment is checked against (a check passes ctx.api).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from contract import Spec

REQUEST_ID_MASK = "<request_id>"  # an answer's request_id where bodies are compared


@cache
def request_id_re(api: Spec) -> re.Pattern[str]:
    """`prefix` + `hex_digits` lowercase hex digits (x-request-id)."""
    rid = api.request_id
    return re.compile(rf"{re.escape(rid['prefix'])}[0-9a-f]{{{rid['hex_digits']}}}")


def status_of(api: Spec, code: str) -> int:
    return api.error_codes[code]["status"]


def error_body(api: Spec, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    """The whole error body for `code`, its request id masked."""
    return {
        "error": {
            "message": message,
            "type": api.error_codes[code]["type"],
            "param": param,
            "code": code,
        },
        "request_id": REQUEST_ID_MASK,
    }


def message(api: Spec, key: str, **fields: Any) -> str:
    """An x-messages template, filled."""
    return api.messages[key].format(**fields)


def token_rule_body(api: Spec, rule_id: str, **fields: Any) -> dict[str, Any]:
    rule = api.token_rules[rule_id]
    return error_body(api, rule["code"], rule["message"].format(**fields), rule["param"])


def steering_body(api: Spec, reason: str, param: str, **fields: Any) -> dict[str, Any]:
    """The 400 for a bad steering vector, with the reason's template (x-model-rules)."""
    rule = api.model_rules["steering_vector"]
    text = rule["message"].format(param=param, reason=rule["reasons"][reason].format(**fields))
    return error_body(api, rule["code"], text, param)


def mask(body: Any) -> Any:
    if isinstance(body, dict) and "request_id" in body:
        return {**body, "request_id": REQUEST_ID_MASK}
    return body
