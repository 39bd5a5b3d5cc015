"""fields.yaml: each field's types, ranges and enums, from its schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from conformance.golden.cases import GOLDEN_LIST_ITEMS, Cases, case, generates, satisfy, show


class FieldCases(Cases):
    """fields.yaml: unknown, missing, wrong type, ranges."""

    def fields(self) -> Iterator[dict[str, Any]]:
        m = self.api.messages
        req = self.api.schema("CompletionRequest")
        for name in (
            "best_of",
            "suffix",
            "logit_bias",
            "vllm_xargs",
            "request_id",
            "prompt_embeds",
            "response_format",
            "use_beam_search",
            "kv_transfer_params",
            "cache_salt",
        ):
            yield case(
                f"unknown.{name}",
                "refused as an unknown field",
                ["validation"],
                {**self.base, name: 1},
                400,
                self.invalid(name, m["unknown_field"].format(field=name)),
            )
        for name in ("best_of", "suffix"):  # null leaves out only a field the API knows
            yield case(
                f"unknown.{name}.null",
                "refused as an unknown field though null",
                ["validation"],
                {**self.base, name: None},
                400,
                self.invalid(name, m["unknown_field"].format(field=name)),
            )
        for name in req["required"]:
            body = {k: v for k, v in self.base.items() if k != name}
            yield case(
                f"missing.{name}",
                "required field left out",
                ["validation"],
                body,
                400,
                self.invalid(name, m["missing_field"].format(param=name)),
            )
            yield case(
                f"missing.{name}.null",
                "null means left out",
                ["validation"],
                {**body, name: None},
                400,
                self.invalid(name, m["missing_field"].format(param=name)),
            )
        for name, prop in req["properties"].items():
            for label, value, expected in _wrong_types(prop, m):
                yield case(
                    f"type.{name}.{label}",
                    "strict types",
                    ["validation"],
                    {**self.base, name: value},
                    400,
                    self.invalid(name, m["invalid_type"].format(param=name, expected=expected)),
                )
        for name, prop in req["properties"].items():
            yield from self._ranges(name, prop)
        union = [
            ("stop.max_items", "stop", ["a", "b", "c", "d", "e"], "maxItems", 4),
            ("stop.empty_string", "stop", "", "minLength", 1),
            ("prompt.empty_array", "prompt", [], "minItems", 1),
            ("prompt.empty_token_ids", "prompt", [[]], "minItems", 1),
            ("priority.not_an_integer", "priority", "abc", "pattern", None),
            (
                "output_residual_stream.duplicates",
                "output_residual_stream",
                [1, 1],
                "uniqueItems",
                True,
            ),
        ]
        for label, name, value, keyword, limit in union:
            yield case(
                f"range.{label}",
                f"{keyword} of {name}",
                ["validation"],
                {**self.base, name: value},
                400,
                self.invalid(
                    name,
                    m["range"][keyword].format(param=name, value=show(value), limit=show(limit)),
                ),
            )
        yield case(
            "range.stop.max_items.at",
            "stop takes 4 strings",
            ["validation"],
            {**self.base, "stop": ["a", "b", "c", "d"]},
            200,
            generates=1,
        )
        yield case(
            "type.null_is_left_out",
            "null means left out, for every optional field",
            ["validation"],
            {
                **self.base,
                **{
                    k: None
                    for k in req["properties"]
                    if k not in req["required"] and k != "max_tokens"
                },
            },
            200,
            generates=1,
        )
        yield case(
            "type.priority.string_of_integer",
            "priority also takes an integer in a string",
            ["validation"],
            {**self.base, "priority": "-5"},
            200,
            generates=1,
        )
        yield case(
            "type.integer_as_float",
            "2.0 is an integer",
            ["validation"],
            {**self.base, "max_tokens": 1.0},
            200,
            generates=1,
        )
        yield case(
            "type.temperature.integer",
            "a whole number is a valid decimal",
            ["validation"],
            {**self.base, "temperature": 1},
            200,
            generates=1,
        )
        yield case(
            "type.bad_words.strings",
            "bad_words takes an array of strings",
            ["validation"],
            {**self.base, "bad_words": ["sky"]},
            200,
            generates=1,
        )
        for name, prop in req["properties"].items():
            if "x-default" in prop and name not in self.base:
                yield case(
                    f"default.{name}",
                    "its x-default, sent explicitly, is accepted",
                    ["validation"],
                    {**self.base, name: prop["x-default"]},
                    200,
                    generates=1,
                )

    def _ranges(self, name: str, prop: dict[str, Any]) -> Iterator[dict[str, Any]]:
        templates = self.api.messages["range"]
        numeric = "integer" in prop.get("type", []) and "integer" or "number"
        step = 1 if numeric == "integer" else 0.01
        bounds = [
            ("minimum", -step, True),
            ("maximum", step, True),
            ("exclusiveMinimum", 0, False),
            ("exclusiveMaximum", 0, False),
        ]
        for keyword, past, inclusive in bounds:
            if keyword not in prop:
                continue
            limit = prop[keyword]
            if abs(limit) >= 2**63 - 1:
                past = 1 if limit > 0 else -1
                bad, good = limit + past, limit
            elif inclusive:
                bad, good = _num(limit + past), limit
            else:
                bad, good = limit, _num(limit + (step if keyword == "exclusiveMinimum" else -step))
            body_ok, n_ok = self._with(name, good)
            yield case(
                f"range.{name}.{keyword}.at",
                f"{keyword} {limit}: the bound is valid",
                ["validation"],
                body_ok,
                200,
                generates=n_ok,
            )
            yield case(
                f"range.{name}.{keyword}.past",
                f"{keyword} {limit}: one past it",
                ["validation"],
                self._with(name, bad)[0],
                400,
                self.invalid(
                    name,
                    templates[keyword].format(param=name, value=show(bad), limit=show(limit)),
                ),
            )
        item = _item_example(prop)
        for keyword, delta in (("minItems", -1), ("maxItems", 1)):
            if keyword not in prop or item is None or prop[keyword] > GOLDEN_LIST_ITEMS:
                continue
            limit = prop[keyword]
            good = [item(i) for i in range(limit)]
            bad = [item(i) for i in range(limit + delta)]
            body_ok, n_ok = self._with(name, good)
            yield case(
                f"range.{name}.{keyword}.at",
                f"{keyword} {limit}",
                ["validation"],
                body_ok,
                200,
                generates=n_ok,
            )
            yield case(
                f"range.{name}.{keyword}.past",
                f"{keyword} {limit}: one past it",
                ["validation"],
                self._with(name, bad)[0],
                400,
                self.invalid(name, templates[keyword].format(param=name, limit=limit)),
            )

    def _with(self, name: str, value: Any) -> tuple[dict[str, Any], int]:
        """The base body with one field set, plus what the spec's cross-field rules then need
        of the others (cases.satisfy)."""
        body = satisfy(self.api, {**self.base, name: value}, keep=name)
        if (
            name == "min_tokens"
        ):  # x-token-rules' min_tokens_above_max_tokens: arithmetic no schema states
            body["max_tokens"] = max(1, value if isinstance(value, int) else 1)
        return body, generates(self.api, body)


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(x, 10)


def _wrong_types(prop: dict[str, Any], m: dict[str, Any]) -> Iterator[tuple[str, Any, str]]:
    types = prop.get("type") or [b.get("type") for b in prop.get("anyOf", [])]
    types = {t for t in (types if isinstance(types, list) else [types]) if t}
    expected = prop["x-expected"]
    if types & {"integer", "number"}:
        if "string" not in types:
            yield "string", "2", expected
        yield "boolean", True, expected
        yield "array", [1], expected
    if "integer" in prop.get("type", []):
        yield "fraction", 1.5, m["expected_integer"]
    if "boolean" in types:
        yield "integer", 1, expected
        yield "string", "true", expected
    if "string" in types and not types & {"integer", "array"}:
        yield "integer", 1, expected
    if "array" in types:
        yield "object", {"a": 1}, expected
    if "object" in types:
        yield "string", "x", expected


def _item_example(prop: dict[str, Any]) -> Any:
    items = prop.get("items", {})
    kind = items.get("type")
    if kind == "integer":
        return lambda i: i
    if kind == "string":
        return lambda i: f"s{i}"
    return None
