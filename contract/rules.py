"""Cross-field rules (x-rules) and model rules (x-model-rules).

An x-rule's JSON Schema is its entry of CompletionRequest's allOf (Spec.rules gives
it as `when`, what a breaking body matches: `not` the entry).

Each x-rule is a JSON Schema that a *breaking* body matches. jsonschema-rs's
`is_valid` answers that without raising, which keeps the common case (no rule
broken) under a microsecond; fastjsonschema would raise inside every anyOf.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs

from contract.errors import RuleViolation, raise_first, rule_error
from contract.spec import ModelInfo, Spec


class Rules:
    """One spec's cross-field rules (compiled once) and model rules."""

    def __init__(self, api: Spec) -> None:
        self._any = jsonschema_rs.validator_for({"anyOf": [rule["when"] for rule in api.rules]})
        self._each = [(rule, jsonschema_rs.validator_for(rule["when"])) for rule in api.rules]
        self.model_rules = api.model_rules
        self._top_k = api.defaults("CompletionRequest")["top_k"]
        self._token_id_fields = api.request_fields("token_ids")  # the prompt's ids besides

    def iter_errors(self, body: dict[str, Any]) -> list[RuleViolation]:
        """Every broken cross-field rule, in the spec's order."""
        return [rule_error(rule, **body) for rule, check in self._each if check.is_valid(body)]

    def check(self, body: dict[str, Any]) -> None:
        if not self._any.is_valid(body):
            return
        raise_first(self.iter_errors(body))

    def check_model(self, body: dict[str, Any], model: ModelInfo) -> None:
        """Ranges that depend on the model (the steering vectors are checked by tensors.py)."""
        rules = self.model_rules
        for param, ids in _token_id_lists(body, self._token_id_fields):
            # max() runs in C; a 100,000-token prompt costs one pass.
            if ids and max(ids) >= model.vocab_size:
                bad = next(i for i in ids if i >= model.vocab_size)
                raise rule_error(
                    rules["token_id_in_vocab"],
                    param,
                    token_id=bad,
                    param=param,
                    vocab_size=model.vocab_size,
                )
        if body.get("top_k", self._top_k) > model.vocab_size:
            raise rule_error(
                rules["top_k_in_vocab"], "top_k", value=body["top_k"], vocab_size=model.vocab_size
            )
        for layer in body.get("output_residual_stream", ()):
            if layer >= model.num_layers:
                raise rule_error(
                    rules["layer_in_range"],
                    "output_residual_stream",
                    layer=layer,
                    param="output_residual_stream",
                    num_layers=model.num_layers,
                )


def _token_id_lists(body: dict[str, Any], fields: tuple[str, ...]) -> list[tuple[str, list[int]]]:
    prompt = body["prompt"]
    lists: list[tuple[str, list[int]]] = []
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
        lists.append(("prompt", prompt))
    elif isinstance(prompt, list) and prompt and isinstance(prompt[0], list):
        lists.extend(("prompt", ids) for ids in prompt)
    for field in fields:
        if field in body:
            lists.append((field, body[field]))
    return lists
