"""Which rule of openapi.yaml an error body names: its code, param and message
matched against the templates of x-rules, x-model-rules and x-token-rules.

The coverage report and the plain-schemathesis test both need to recognise a
rule from an answer alone; every template is read from the spec, so a rule
added there is recognised without a change here.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import cache
from typing import Any

from contract import Spec

RULE_GROUPS = ("x-rules", "x-model-rules", "x-token-rules")


@dataclass(frozen=True)
class RuleTemplate:
    group: str  # x-rules, x-model-rules or x-token-rules
    id: str
    code: str
    params: tuple[str, ...]  # empty: any param (a template that names it)
    pattern: re.Pattern[str]

    @property
    def key(self) -> str:
        return f"{self.group}:{self.id}"


def _regex(template: str, fills: dict[str, str] | None = None) -> str:
    """A message template as a regex: each {name} matches anything (or its fill)."""
    out = []
    for literal, name, _spec, _conv in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if name is not None:
            out.append((fills or {}).get(name, ".+?"))
    return "".join(out)


def _rules(api: Spec, group: str) -> list[dict[str, Any]]:
    if group == "x-rules":
        return api.rules
    return list((api.model_rules if group == "x-model-rules" else api.token_rules).values())


@cache
def _templates(api: Spec) -> tuple[RuleTemplate, ...]:
    out = []
    for group in RULE_GROUPS:
        for rule in _rules(api, group):
            params = tuple(rule.get("params") or ([rule["param"]] if "param" in rule else []))
            fills = None
            if "reasons" in rule:  # a steering vector's message names one of its reasons
                fills = {
                    "reason": "(?:" + "|".join(_regex(r) for r in rule["reasons"].values()) + ")"
                }
            out.append(
                RuleTemplate(
                    group,
                    rule["id"],
                    rule["code"],
                    params,
                    re.compile(_regex(rule["message"], fills) + r"\Z", re.S),
                )
            )
    return tuple(out)


def templates(api: Spec) -> tuple[RuleTemplate, ...]:
    """Every rule's template, of `api`."""
    return _templates(api)


def all_rule_keys(api: Spec) -> list[str]:
    """Every rule of the spec, as `group:id`."""
    return [t.key for t in templates(api)]


def rule_for(error: Any, api: Spec) -> str | None:
    """The `group:id` of the rule of `api` whose code and message template the error body matches."""
    if not isinstance(error, dict):
        return None
    inner = error.get("error")
    err = inner if isinstance(inner, dict) else error
    code, message, param = err.get("code"), err.get("message"), err.get("param")
    if not isinstance(message, str):
        return None
    for t in templates(api):
        if t.code != code or not t.pattern.match(message):
            continue
        # Model rules name the param they found (params lists the candidates).
        if (
            t.params
            and param is not None
            and not any(
                param == p or str(param).startswith(p + "[") or str(param).startswith(p + ".")
                for p in t.params
            )
        ):
            continue
        return t.key
    return None
