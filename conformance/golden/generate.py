"""Write the golden cases that follow from openapi.yaml: fields, rules, caps, lens, http.

Expected bodies are built here from the spec's templates and numbers, not by
calling the core, so running the cases through the core checks the core.
`python -m conformance.golden` rewrites the files; a test checks they are fresh.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import yaml

from conformance.golden import HERE
from conformance.spec.bodies import REQUEST_ID_MASK
from contract.spec import Spec, spec
from contract.tensors import encode_tensor

PROMPT = "The sky is"
FILLER = 791  # an ordinary token of the vocabulary (" The"): prompts of a chosen length
# A list bound past this is held by robust:lists.past_bound, which builds its bodies at run time:
# a golden case of a thousand items would be a page no reviewer reads.
GOLDEN_LIST_ITEMS = 16
GENERATED_FILES = ("fields.yaml", "rules.yaml", "caps.yaml", "lens.yaml", "http.yaml")


def _error(code: str, message: str, param: str | None, api: Spec) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": api.error_codes[code]["type"],
            "param": param,
            "code": code,
        },
        "request_id": REQUEST_ID_MASK,
    }


def _case(
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


def _show(value: Any) -> str:
    return json.dumps(value)


class _Cases:
    """What every family of cases shares: the spec, its default model, a minimal body,
    and expected error bodies built from the spec's templates."""

    def __init__(self, api: Spec) -> None:
        self.api = api
        self.model = api.models[api.default_model]
        self.base = {"model": self.model.name, "prompt": PROMPT, "max_tokens": 1}

    def invalid(
        self, param: str | None, message: str, code: str = "invalid_request"
    ) -> dict[str, Any]:
        return _error(code, message, param, self.api)

    def rule(self, rid: str, table: str = "x-rules", **fields: Any) -> dict[str, Any]:
        rule = self.api.rule(table, rid)
        return _error(rule["code"], rule["message"].format(**fields), rule.get("param"), self.api)

    def _model_msg(self, rid: str, **fields: Any) -> str:
        return self.api.model_rules[rid]["message"].format(**fields)


class FieldCases(_Cases):
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
            yield _case(
                f"unknown.{name}",
                "refused as an unknown field",
                ["validation"],
                {**self.base, name: 1},
                400,
                self.invalid(name, m["unknown_field"].format(field=name)),
            )
        for name in ("best_of", "suffix"):  # null leaves out only a field the API knows
            yield _case(
                f"unknown.{name}.null",
                "refused as an unknown field though null",
                ["validation"],
                {**self.base, name: None},
                400,
                self.invalid(name, m["unknown_field"].format(field=name)),
            )
        for name in req["required"]:
            body = {k: v for k, v in self.base.items() if k != name}
            yield _case(
                f"missing.{name}",
                "required field left out",
                ["validation"],
                body,
                400,
                self.invalid(name, m["missing_field"].format(param=name)),
            )
            yield _case(
                f"missing.{name}.null",
                "null means left out",
                ["validation"],
                {**body, name: None},
                400,
                self.invalid(name, m["missing_field"].format(param=name)),
            )
        for name, prop in req["properties"].items():
            for label, value, expected in _wrong_types(prop, m):
                yield _case(
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
            yield _case(
                f"range.{label}",
                f"{keyword} of {name}",
                ["validation"],
                {**self.base, name: value},
                400,
                self.invalid(
                    name,
                    m["range"][keyword].format(param=name, value=_show(value), limit=_show(limit)),
                ),
            )
        yield _case(
            "range.stop.max_items.at",
            "stop takes 4 strings",
            ["validation"],
            {**self.base, "stop": ["a", "b", "c", "d"]},
            200,
            generates=1,
        )
        yield _case(
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
        yield _case(
            "type.priority.string_of_integer",
            "priority also takes an integer in a string",
            ["validation"],
            {**self.base, "priority": "-5"},
            200,
            generates=1,
        )
        yield _case(
            "type.integer_as_float",
            "2.0 is an integer",
            ["validation"],
            {**self.base, "max_tokens": 1.0},
            200,
            generates=1,
        )
        yield _case(
            "type.temperature.integer",
            "a whole number is a valid decimal",
            ["validation"],
            {**self.base, "temperature": 1},
            200,
            generates=1,
        )
        yield _case(
            "type.bad_words.strings",
            "bad_words takes an array of strings",
            ["validation"],
            {**self.base, "bad_words": ["sky"]},
            200,
            generates=1,
        )
        for name, prop in req["properties"].items():
            if "x-default" in prop and name not in self.base:
                yield _case(
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
            yield _case(
                f"range.{name}.{keyword}.at",
                f"{keyword} {limit}: the bound is valid",
                ["validation"],
                body_ok,
                200,
                generates=n_ok,
            )
            yield _case(
                f"range.{name}.{keyword}.past",
                f"{keyword} {limit}: one past it",
                ["validation"],
                self._with(name, bad)[0],
                400,
                self.invalid(
                    name,
                    templates[keyword].format(param=name, value=_show(bad), limit=_show(limit)),
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
            yield _case(
                f"range.{name}.{keyword}.at",
                f"{keyword} {limit}",
                ["validation"],
                body_ok,
                200,
                generates=n_ok,
            )
            yield _case(
                f"range.{name}.{keyword}.past",
                f"{keyword} {limit}: one past it",
                ["validation"],
                self._with(name, bad)[0],
                400,
                self.invalid(name, templates[keyword].format(param=name, limit=limit)),
            )

    def _with(self, name: str, value: Any) -> tuple[dict[str, Any], int]:
        """The base body with one field set, plus what the spec's cross-field rules then need
        (each `if`/`then` of CompletionRequest's allOf, met by the consts it names: its `then`'s,
        or, where `then` is on `name` itself, those of the `if` it must not meet)."""
        body = {**self.base, name: value}
        for rule in self.api.schema("CompletionRequest").get("allOf", []):
            if "if" in rule and _holds(rule["if"], body) and not _holds(rule["then"], body):
                body.update(_consts(rule["then"], name) or _consts(rule["if"].get("not", {}), name))
        if (
            name == "min_tokens"
        ):  # x-token-rules' min_tokens_above_max_tokens: arithmetic no schema states
            body["max_tokens"] = max(1, value if isinstance(value, int) else 1)
        n = body.get("n", 1) if isinstance(body.get("n", 1), int) else 1
        prompts = (
            len(body["prompt"])
            if isinstance(body["prompt"], list)
            and body["prompt"]
            and isinstance(body["prompt"][0], (str, list))
            else 1
        )
        mt = body["max_tokens"] if isinstance(body["max_tokens"], int) else 1
        return body, n * prompts * mt


class RuleCases(_Cases):
    """rules.yaml: the cross-field rules (x-rules) and an unknown model."""

    def rules(self) -> Iterator[dict[str, Any]]:
        b = {"model": self.model.name, "prompt": PROMPT}
        t = ["validation"]
        threshold = self.api.greedy_below
        examples: dict[str, list[tuple[str, dict[str, Any]]]] = {
            "max_tokens_required": [
                ("n", {**b, "n": 2}),
                ("prompts", {**b, "prompt": [PROMPT, PROMPT]}),
                ("token_prompts", {**b, "prompt": [[FILLER], [FILLER]]}),
            ],
            "greedy_n": [
                ("zero", {**b, "n": 2, "max_tokens": 1, "temperature": 0}),
                ("below", {**b, "n": 2, "max_tokens": 1, "temperature": threshold * 0.9}),
            ],
            "stream_options_without_stream": [
                ("absent", {**b, "max_tokens": 1, "stream_options": {"include_usage": True}}),
                ("false", {**b, "max_tokens": 1, "stream": False, "stream_options": {}}),
            ],
            "continuous_usage_without_include_usage": [
                (
                    "absent",
                    {
                        **b,
                        "max_tokens": 1,
                        "stream": True,
                        "stream_options": {"continuous_usage_stats": True},
                    },
                )
            ],
            "prompt_logprobs_with_stream": [
                ("", {**b, "max_tokens": 1, "stream": True, "prompt_logprobs": 1})
            ],
            "lens_one_prompt": [
                (
                    "capture",
                    {
                        **b,
                        "max_tokens": 1,
                        "prompt": [PROMPT, PROMPT],
                        "output_residual_stream": [0],
                    },
                )
            ],
            "lens_one_choice": [
                ("capture", {**b, "max_tokens": 1, "n": 2, "output_residual_stream": [0]})
            ],
        }
        for rid, cases in examples.items():
            for label, body in cases:
                cid = f"rule.{rid}" + (f".{label}" if label else "")
                yield _case(cid, f"x-rules {rid}", t, body, 400, self.rule(rid))
        ok = [
            ("greedy_n.at_threshold", {**b, "n": 2, "max_tokens": 1, "temperature": threshold}, 2),
            (
                "stream_options.with_stream",
                {
                    **b,
                    "max_tokens": 1,
                    "stream": True,
                    "stream_options": {"include_usage": True, "continuous_usage_stats": True},
                },
                1,
            ),
        ]
        for label, body, generates in ok:
            yield _case(
                f"rule.ok.{label}",
                "the rule's boundary is valid",
                t,
                body,
                200,
                generates=generates,
            )
        yield _case(
            "model.unknown",
            "unknown model",
            t,
            {**self.base, "model": "no-such-model"},
            404,
            _error(
                "model_not_found",
                self.api.messages["model_not_found"].format(model="no-such-model"),
                "model",
                self.api,
            ),
        )


class CapCases(_Cases):
    """caps.yaml: caps that need the tokenizer, and the model's limits."""

    def caps(self) -> Iterator[dict[str, Any]]:
        c, m, t = self.api.caps, self.model, ["caps"]
        b = {"model": m.name, "prompt": PROMPT}
        cap, wait = c["max_generated_tokens"], c["max_tokens_without_stream"]
        half = cap // 2
        yield _case(
            "caps.generated.at",
            "prompts x n x max_tokens at the cap",
            t,
            {**b, "n": 2, "max_tokens": half, "stream": True},
            200,
            generates=2 * half,
        )
        yield _case(
            "caps.generated.past",
            "prompts x n x max_tokens one past the cap",
            t,
            {**b, "n": 2, "max_tokens": half + 1, "stream": True},
            400,
            self.rule(
                "generated_tokens_cap",
                "x-token-rules",
                cap=cap,
                n=2,
                max_tokens=half + 1,
                prompts=1,
                total=2 * (half + 1),
            ),
        )
        yield _case(
            "caps.generated.prompts.past",
            "two prompts count twice",
            t,
            {**b, "prompt": [PROMPT, PROMPT], "max_tokens": half + 1, "stream": True},
            400,
            self.rule(
                "generated_tokens_cap",
                "x-token-rules",
                cap=cap,
                n=1,
                max_tokens=half + 1,
                prompts=2,
                total=2 * (half + 1),
            ),
        )
        yield _case(
            "caps.generated.single.past",
            "one sequence over the cap",
            t,
            {**b, "max_tokens": cap + 1, "stream": True},
            400,
            self.rule(
                "generated_tokens_cap",
                "x-token-rules",
                cap=cap,
                n=1,
                max_tokens=cap + 1,
                prompts=1,
                total=cap + 1,
            ),
        )
        yield _case(
            "caps.without_stream.at",
            "max_tokens at the no-stream limit",
            t,
            {**b, "max_tokens": wait},
            200,
            generates=wait,
        )
        # the prompt fills the context: the no-stream cap comes first (x-token-rules' order),
        # and a server that wrongly accepts the request has room for one token only
        yield _case(
            "caps.without_stream.past",
            "max_tokens one past the no-stream limit, checked before the context",
            t,
            {
                **b,
                "prompt": {"$token_ids": {"count": m.max_model_len - 1, "id": FILLER}},
                "max_tokens": wait + 1,
            },
            400,
            self.rule(
                "deadline_infeasible",
                "x-token-rules",
                cap=wait,
                max_tokens=wait + 1,
                minutes=c["wait_seconds"] // 60,
            ),
        )
        # One tags list for the family: the YAML writes it once and refers to it after.
        yield from self._context(b, t)
        yield from self._capture(b)
        yield from self._model_limits(b)
        yield from self._body(b, t)

    def _context(self, b: dict[str, Any], t: list[str]) -> Iterator[dict[str, Any]]:
        """max_model_len against the prompt and max_tokens, and min_tokens."""
        m, wait = self.model, self.api.caps["max_tokens_without_stream"]
        fit = m.max_model_len - wait
        yield _case(
            "caps.context.at",
            "prompt + max_tokens = max_model_len",
            t,
            {**b, "prompt": {"$token_ids": {"count": fit, "id": FILLER}}, "max_tokens": wait},
            200,
            generates=wait,
        )
        yield _case(
            "caps.context.past",
            "prompt + max_tokens = max_model_len + 1",
            t,
            {**b, "prompt": {"$token_ids": {"count": fit + 1, "id": FILLER}}, "max_tokens": wait},
            400,
            self.rule(
                "context_length",
                "x-token-rules",
                max_model_len=m.max_model_len,
                total=m.max_model_len + 1,
                prompt_tokens=fit + 1,
                max_tokens=wait,
            ),
        )
        yield _case(
            "caps.default_max_tokens.at",
            "a prompt of max_model_len - 1 leaves one token",
            t,
            {**b, "prompt": {"$token_ids": {"count": m.max_model_len - 1, "id": FILLER}}},
            200,
            generates=1,
        )
        yield _case(
            "caps.default_max_tokens.past",
            "a prompt of max_model_len leaves none",
            t,
            {**b, "prompt": {"$token_ids": {"count": m.max_model_len, "id": FILLER}}},
            400,
            self.rule(
                "prompt_too_long",
                "x-token-rules",
                max_model_len=m.max_model_len,
                prompt_tokens=m.max_model_len,
            ),
        )
        yield _case(
            "caps.prompt_too_long.with_max_tokens",
            "a prompt of max_model_len with max_tokens given: the prompt is the field to fix",
            t,
            {
                **b,
                "prompt": {"$token_ids": {"count": m.max_model_len, "id": FILLER}},
                "max_tokens": 2,
            },
            400,
            self.rule(
                "prompt_too_long",
                "x-token-rules",
                max_model_len=m.max_model_len,
                prompt_tokens=m.max_model_len,
            ),
        )
        yield _case(
            "caps.min_tokens.at",
            "min_tokens = max_tokens",
            t,
            {**b, "max_tokens": 2, "min_tokens": 2},
            200,
            generates=2,
        )
        yield _case(
            "caps.min_tokens.past",
            "min_tokens = max_tokens + 1",
            t,
            {**b, "max_tokens": 2, "min_tokens": 3},
            400,
            self.rule("min_tokens_above_max_tokens", "x-token-rules", min_tokens=3, max_tokens=2),
        )

    def _body(self, b: dict[str, Any], t: list[str]) -> Iterator[dict[str, Any]]:
        """The body size cap (every route)."""
        size = self.api.caps["max_body_bytes"]
        small = {**b, "max_tokens": 1}
        yield _case(
            "caps.body.at",
            "a body of exactly the cap",
            t + ["http"],
            small,
            200,
            generates=1,
            body_bytes=size,
        )
        yield _case(
            "caps.body.past",
            "a body one byte over the cap",
            t + ["http"],
            small,
            413,
            _error(
                "request_too_large",
                self.api.messages["request_too_large"].format(limit=size),
                None,
                self.api,
            ),
            body_bytes=size + 1,
        )

    def _capture(self, b: dict[str, Any]) -> Iterator[dict[str, Any]]:
        m, t = self.model, ["caps", "lens"]
        cap, layers = m.capture_cap, list(range(m.num_layers))
        per_layer = cap // len(layers)  # positions when every layer is captured
        for label, lay, positions in (("all_layers", layers, per_layer), ("one_layer", [0], cap)):
            # positions = prompt tokens + max_tokens - 1, with max_tokens 1 or 2
            prompt_ok = positions - 1
            body = {
                **b,
                "prompt": {"$token_ids": {"count": prompt_ok, "id": FILLER}},
                "max_tokens": 2,
                "output_residual_stream": lay,
            }
            yield _case(
                f"caps.capture.{label}.at",
                "Layers x tokens at the capture cap",
                t,
                body,
                200,
                generates=2,
            )
            yield _case(
                f"caps.capture.{label}.past",
                "Layers x tokens one token past the cap",
                t,
                {**body, "max_tokens": 3},
                400,
                self.rule(
                    "capture_cap",
                    "x-token-rules",
                    cap=cap,
                    layers=len(lay),
                    positions=positions + 1,
                    total=len(lay) * (positions + 1),
                ),
            )

    def _model_limits(self, b: dict[str, Any]) -> Iterator[dict[str, Any]]:
        m, t = self.model, ["validation"]
        vocab = m.vocab_size
        for param in self.api.model_rules["token_id_in_vocab"]["params"]:
            body = {**b, "max_tokens": 1}
            ok = {**body, param: [vocab - 1]}
            bad = {**body, param: [FILLER, vocab]}
            yield _case(f"model.{param}.vocab.at", "the last token id", t, ok, 200, generates=1)
            yield _case(
                f"model.{param}.vocab.past",
                "one past the vocabulary",
                t,
                bad,
                400,
                _error(
                    self.api.model_rules["token_id_in_vocab"]["code"],
                    self._model_msg(
                        "token_id_in_vocab", token_id=vocab, param=param, vocab_size=vocab
                    ),
                    param,
                    self.api,
                ),
            )
        yield _case(
            "model.top_k.at",
            "top_k = vocabulary size",
            t,
            {**b, "max_tokens": 1, "top_k": vocab},
            200,
            generates=1,
        )
        yield _case(
            "model.top_k.past",
            "top_k one past the vocabulary",
            t,
            {**b, "max_tokens": 1, "top_k": vocab + 1},
            400,
            _error(
                self.api.model_rules["top_k_in_vocab"]["code"],
                self._model_msg("top_k_in_vocab", value=vocab + 1, vocab_size=vocab),
                "top_k",
                self.api,
            ),
        )
        yield _case(
            "model.layers.at",
            "the last layer",
            t + ["lens"],
            {**b, "max_tokens": 1, "output_residual_stream": [m.num_layers - 1]},
            200,
            generates=1,
        )
        yield _case(
            "model.layers.past",
            "one past the last layer",
            t + ["lens"],
            {**b, "max_tokens": 1, "output_residual_stream": [0, m.num_layers]},
            400,
            _error(
                self.api.model_rules["layer_in_range"]["code"],
                self._model_msg(
                    "layer_in_range",
                    layer=m.num_layers,
                    param="output_residual_stream",
                    num_layers=m.num_layers,
                ),
                "output_residual_stream",
                self.api,
            ),
        )


class LensCases(_Cases):
    """lens.yaml: steering vectors."""

    def lens(self) -> Iterator[dict[str, Any]]:
        m, t = self.model, ["lens", "steering", "validation"]
        rule = self.api.model_rules["steering_vector"]
        b = {"model": m.name, "prompt": PROMPT, "max_tokens": 1}
        pairs = rule["dtype_pairs"]
        hidden = m.hidden_size
        for dtype, original in pairs.items():
            good = _vector(
                np.zeros((2, hidden), dtype=dtype), original, [0, m.num_layers - 1], scale=2.0
            )
            yield _case(
                f"steering.ok.{dtype}",
                "a valid vector",
                t,
                {**b, "apply_steering_vectors": [good]},
                200,
                generates=1,
            )
        yield _case(
            "steering.ok.positions",
            "a 3-D vector with positions",
            t,
            {
                **b,
                "apply_steering_vectors": [
                    _vector(
                        np.zeros((1, 2, hidden), dtype=np.float16),
                        pairs["float16"],
                        [1],
                        position_indices=[0, 3],
                    )
                ],
            },
            200,
            generates=1,
        )
        yield from self._bad_vectors(b, t)  # the same tags list: the YAML refers to it

    def _bad_vectors(self, b: dict[str, Any], t: list[str]) -> Iterator[dict[str, Any]]:
        """One case per reason the steering_vector rule gives."""
        m = self.model
        rule = self.api.model_rules["steering_vector"]
        pairs = rule["dtype_pairs"]
        hidden = m.hidden_size
        vec = _vector

        def bad(label: str, vector: dict[str, Any], reason: str, **fields: Any) -> dict[str, Any]:
            param = "apply_steering_vectors[0]"
            message = rule["message"].format(
                param=param, reason=rule["reasons"][reason].format(**fields)
            )
            return _case(
                f"steering.{label}",
                f"steering vector: {reason}",
                t,
                {**b, "apply_steering_vectors": [vector]},
                400,
                _error(rule["code"], message, param, self.api),
            )

        f32 = np.zeros((1, hidden), dtype=np.float32)
        yield bad(
            "hidden",
            vec(np.zeros((1, hidden - 1), dtype=np.float32), pairs["float32"], [0]),
            "hidden",
            got=hidden - 1,
            hidden_size=hidden,
        )
        yield bad(
            "rows",
            vec(np.zeros((2, hidden), dtype=np.float32), pairs["float32"], [0]),
            "rows",
            rows=2,
            layers=1,
        )
        yield bad(
            "layer",
            vec(f32, pairs["float32"], [m.num_layers]),
            "layer",
            layer=m.num_layers,
            num_layers=m.num_layers,
        )
        mismatch = vec(f32, pairs["float32"], [0])
        mismatch["activations"]["original_dtype"] = pairs["int16"]
        yield bad(
            "dtype_pair", mismatch, "dtype_pair", dtype="float32", original_dtype=pairs["int16"]
        )
        not_b64 = vec(f32, pairs["float32"], [0])
        not_b64["activations"]["data"] = "not base64!"
        yield bad("base64", not_b64, "base64")
        not_zstd = vec(f32, pairs["float32"], [0])
        not_zstd["activations"]["data"] = "aGVsbG8gd29ybGQ="
        yield bad("zstd", not_zstd, "zstd")
        short = vec(np.zeros((1, hidden // 2), dtype=np.float32), pairs["float32"], [0])
        short["activations"]["shape"] = [1, hidden]
        yield bad("length", short, "length", got=hidden // 2 * 4, want=hidden * 4)
        nan = vec(np.full((1, hidden), np.nan, dtype=np.float32), pairs["float32"], [0])
        yield bad("finite", nan, "finite")
        bf16_inf = vec(np.full((1, hidden), 0x7F80, dtype=np.int16), pairs["int16"], [0])
        yield bad("finite_bf16", bf16_inf, "finite")
        yield bad(
            "positions_2d", vec(f32, pairs["float32"], [0], position_indices=[0]), "positions_2d"
        )
        yield bad(
            "positions_count",
            vec(
                np.zeros((1, 2, hidden), dtype=np.float32),
                pairs["float32"],
                [0],
                position_indices=[0],
            ),
            "positions_count",
            got=1,
            want=2,
        )


class HttpCases(_Cases):
    """http.yaml: route, auth, media type, JSON."""

    def http(self) -> Iterator[dict[str, Any]]:
        msg, t = self.api.messages, ["http", "validation"]
        body = self.base
        yield _case(
            "http.not_found",
            "unknown route",
            t,
            None,
            404,
            _error(
                "not_found",
                msg["not_found"].format(method="GET", path="/v1/nothing"),
                None,
                self.api,
            ),
            path="/v1/nothing",
            method="GET",
        )
        yield _case(
            "http.method_not_allowed",
            "wrong method on a known route",
            t,
            None,
            405,
            _error(
                "method_not_allowed",
                msg["method_not_allowed"].format(
                    method="GET", path="/v1/completions", allow="POST"
                ),
                None,
                self.api,
            ),
            path="/v1/completions",
            method="GET",
        )
        yield _case(
            "http.no_key",
            "no Authorization header",
            t + ["auth"],
            body,
            401,
            _error("invalid_api_key", msg["invalid_api_key"], None, self.api),
            auth="none",
        )
        yield _case(
            "http.not_bearer",
            "a key without the Bearer scheme",
            t + ["auth"],
            body,
            401,
            _error("invalid_api_key", msg["invalid_api_key"], None, self.api),
            auth="Basic abc",
        )
        yield _case(
            "http.empty_bearer",
            "an empty Bearer key",
            t + ["auth"],
            body,
            401,
            _error("invalid_api_key", msg["invalid_api_key"], None, self.api),
            auth="Bearer ",
        )
        yield _case(
            "http.media_type",
            "a body that is not application/json",
            t,
            body,
            415,
            _error("unsupported_media_type", msg["unsupported_media_type"], None, self.api),
            headers={"Content-Type": "text/plain"},
        )
        yield _case(
            "http.content_coding",
            "a body sent with a Content-Encoding (gzip): refused, not read as broken JSON",
            t,
            body,
            415,
            _error("unsupported_media_type", msg["unsupported_content_coding"], None, self.api),
            headers={"Content-Encoding": "gzip"},
        )
        yield _case(
            "http.invalid_json",
            "a body that is not JSON",
            t,
            None,
            400,
            _error("invalid_json", msg["invalid_json"], None, self.api),
            raw_body="{not json",
        )
        yield _case(
            "http.nan",
            "NaN is not JSON",
            t,
            None,
            400,
            _error("invalid_json", msg["invalid_json"], None, self.api),
            raw_body='{"model": %s, "prompt": "x", "temperature": NaN}'
            % json.dumps(self.model.name),
        )
        yield _case(
            "http.not_object",
            "a JSON body that is not an object",
            t,
            None,
            400,
            _error("invalid_json", msg["not_json_object"], None, self.api),
            raw_body="[1, 2]",
        )
        yield _case(
            "http.models", "the models list", ["http"], None, 200, path="/v1/models", method="GET"
        )
        yield _case(
            "http.chat.empty_body",
            "chat is refused whatever the body",
            t,
            None,
            400,
            _error("invalid_request", msg["chat_refused"], None, self.api),
            path="/v1/chat/completions",
            raw_body="{}",
        )


def _vector(values: np.ndarray, original: str, layers: list[int], **extra: Any) -> dict[str, Any]:
    """A steering vector in the wire encoding."""
    return {"activations": encode_tensor(values, original), "layer_indices": layers, **extra}


def _holds(schema: dict[str, Any], body: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(body)


def _consts(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """The fields other than `name` that `schema` fixes to a const."""
    return {
        k: v["const"] for k, v in schema.get("properties", {}).items() if k != name and "const" in v
    }


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


def generate(api: Spec | None = None) -> dict[str, list[dict[str, Any]]]:
    api = api or spec()
    files = {
        "fields.yaml": list(FieldCases(api).fields()),
        "rules.yaml": list(RuleCases(api).rules()),
        "caps.yaml": list(CapCases(api).caps()),
        "lens.yaml": list(LensCases(api).lens()),
        "http.yaml": list(HttpCases(api).http()),
    }
    return {name: [tagged(case, api) for case in cases] for name, cases in files.items()}


def features(body: Any, api: Spec) -> list[str]:
    """The feature tags of a body (its fields' x-kind feature, where the field is sent and
    neither null nor false), sorted: what --include and --skip select golden cases by."""
    if not isinstance(body, dict):
        return []
    kinds = api.request_kinds
    return sorted(
        {
            kinds[name]["feature"]
            for name, value in body.items()
            if name in kinds and kinds[name]["feature"] and value not in (None, False)
        }
    )


def tagged(case: dict[str, Any], api: Spec) -> dict[str, Any]:
    """The case with its body's feature tags after its own."""
    more = [t for t in features(case["request"].get("body"), api) if t not in case["tags"]]
    return {**case, "tags": [*case["tags"], *more]} if more else case


def render(cases: list[dict[str, Any]]) -> str:
    """One case, one block a reviewer can scan: its fields one a line, and a request's
    body, headers and tags (and an expected error) each on one line."""
    head = "# Generated from openapi.yaml by `python -m conformance.golden`; do not edit.\n"
    return head + yaml.dump(
        {"cases": [_scannable(c) for c in cases]},
        Dumper=_Dumper,
        sort_keys=False,
        width=1 << 16,
        allow_unicode=True,
    )


class _Flow(dict):
    """A mapping written on one line."""


class _FlowList(list):
    """A list written on one line."""


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # no &id001 / *id001: every case reads on its own


_Dumper.add_representer(
    _Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True)
)
_Dumper.add_representer(
    _FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)


def _scannable(case: dict[str, Any]) -> dict[str, Any]:
    """The case with its leaves' containers marked for one line each: tags, the request's
    body and headers, and the parts of an expected body (its error object)."""

    def flow(value: Any) -> Any:
        if isinstance(value, dict):
            return _Flow(value)
        return _FlowList(value) if isinstance(value, list) else value

    out = {k: _FlowList(v) if k == "tags" else v for k, v in case.items()}
    out["request"] = {k: flow(v) for k, v in case["request"].items()}
    expect = dict(case["expect"])
    if isinstance(expect.get("body"), dict):
        expect["body"] = {k: flow(v) for k, v in expect["body"].items()}
    out["expect"] = expect
    return out


def write(directory: Path = HERE) -> list[Path]:
    out = []
    for name, cases in generate().items():
        path = directory / name
        path.write_text(render(cases), encoding="utf-8")
        out.append(path)
    return out
