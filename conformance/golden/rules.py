"""rules.yaml: each cross-field rule (x-rules) by the examples it carries in openapi.yaml,
refused and accepted, and an unknown model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from conformance.golden.cases import PROMPT, Cases, case, error, generates


class RuleCases(Cases):
    """rules.yaml: the cross-field rules (x-rules) and an unknown model."""

    def rules(self) -> Iterator[dict[str, Any]]:
        b = {"model": self.model.name, "prompt": PROMPT}
        t = ["validation"]
        for rule in self.api.rules:
            for label, body in rule["examples"]["refused"].items():
                cid = f"rule.{rule['id']}" + (f".{label}" if label else "")
                yield case(
                    cid, f"x-rules {rule['id']}", t, {**b, **body}, 400, self.rule(rule["id"])
                )
        for rule in self.api.rules:
            for label, body in rule["examples"].get("accepted", {}).items():
                yield case(
                    f"rule.ok.{label}",
                    "the rule's boundary is valid",
                    t,
                    {**b, **body},
                    200,
                    generates=generates(self.api, {**b, **body}),
                )
        yield case(
            "model.unknown",
            "unknown model",
            t,
            {**self.base, "model": "no-such-model"},
            404,
            error(
                "model_not_found",
                self.api.messages["model_not_found"].format(model="no-such-model"),
                "model",
                self.api,
            ),
        )
