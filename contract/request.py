"""validate_completion: a parsed body in, a checked request out, or the first ApiError.

Stages, in the spec's order (x-check-order): unknown field, required, type and
range (their order read from the spec by schema.py), then cross-field rules,
model, token caps (each needs what the one before gives; load_spec refuses a spec
that reorders them). The Budget comes after, in the server, through contract.budget.hold.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Iterator, Mapping

from contract.caps import check_generated_cap, resolve_max_tokens
from contract.errors import ApiError, InvalidJson, ModelNotFound
from contract.rules import check_model_rules, check_rules, iter_rule_errors
from contract.schema import request_schema
from contract.spec import ModelInfo, spec
from contract.steering import SteeringVector, decode_vectors
from contract.tokens import encode


@cache
def _request_defaults() -> dict[str, Any]:
    # Read ~14 times a request (the engine's settings, n, stream): spec().defaults builds
    # its cache key and looks it up on every call.
    return spec().defaults("CompletionRequest")


@dataclass(frozen=True)
class CompletionRequest:
    body: dict[str, Any]               # the client's fields, nulls removed
    model: ModelInfo
    prompts: list[list[int]]           # token ids of each prompt, as vLLM counts them
    prompt_texts: list[str] | None     # the strings, when the prompts were strings
    max_tokens: int
    max_tokens_defaulted: bool
    steering: list[SteeringVector] = field(default_factory=list)

    def option(self, name: str) -> Any:
        """The field's value, or what leaving it out means (its x-default; None without one)."""
        body = self.body
        if name in body:
            return body[name]
        return _request_defaults().get(name)

    @property
    def n(self) -> int:
        return int(self.option("n"))

    @property
    def stream(self) -> bool:
        return bool(self.option("stream"))

    @property
    def prompt_token_counts(self) -> list[int]:
        return [len(p) for p in self.prompts]

    @property
    def layers(self) -> list[int] | None:
        return self.body.get("output_residual_stream")


# A `\uD800`-`\uDFFF` escape, in either case: where a lone surrogate can come from once
# the text is strict UTF-8. A pair of them is a valid character; the parsed strings tell.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _no_constant(name: str) -> Any:
    raise ValueError(name)


# One decoder for every body: json.loads with a keyword argument builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def parse_json(raw: bytes) -> dict[str, Any]:
    """Strict JSON (RFC 8259, I-JSON): UTF-8 text of Unicode scalar values, no NaN or
    Infinity, and the top level must be an object.

    Every string of the body, keys included, is checked here, once: a lone surrogate
    would otherwise reach the tokenizer, jsonschema-rs or the error body's encoder."""
    try:
        # Strict UTF-8 refuses raw surrogates (ED A0 80), which json.loads(bytes) would
        # let through (it decodes with surrogatepass); a BOM is ignored, as RFC 8259 allows.
        body = _DECODER.decode(raw.decode("utf-8-sig"))
    except (ValueError, RecursionError):
        # UnicodeDecodeError is a ValueError too; the parser's own words stay out of the body.
        raise InvalidJson.from_template("invalid_json") from None
    if _SURROGATE_ESCAPE.search(raw) and _has_surrogate(body):
        raise InvalidJson.from_template("invalid_json")
    if not isinstance(body, dict):
        raise InvalidJson.from_template("not_json_object")
    return body


def _has_surrogate(value: Any) -> bool:
    """Whether any string in the parsed value (keys too) holds a lone surrogate."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _prompts(body: dict[str, Any], model: ModelInfo) -> tuple[list[list[int]], list[str] | None]:
    prompt = body["prompt"]
    add_special = body.get("add_special_tokens", spec().defaults("CompletionRequest")["add_special_tokens"])
    if isinstance(prompt, str):
        texts = [prompt]
    elif isinstance(prompt[0], str):
        texts = prompt
    elif isinstance(prompt[0], int):
        return [prompt], None
    else:
        return list(prompt), None
    return [encode(model, t, add_special) for t in texts], texts


def _prompt_count(prompt: Any) -> int:
    """How many prompts: a string or a list of token ids is one."""
    return len(prompt) if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)) else 1


def _truncate(prompts: list[list[int]], keep: int | None, model: ModelInfo) -> list[list[int]]:
    if keep is None or keep == 0:
        return prompts
    keep = model.max_model_len if keep == -1 else keep
    return [p[-keep:] for p in prompts]


def iter_errors(body: dict[str, Any]) -> Iterator[ApiError]:
    """Every schema error, then (for a body whose schema holds) every broken cross-field rule.

    Diagnostics and the conformance suite want them all; a server wants the first,
    which is what validate_completion raises.
    """
    body = {k: v for k, v in body.items() if v is not None}
    schema_errors = list(request_schema().iter_errors(body))
    yield from schema_errors
    if not schema_errors:
        yield from iter_rule_errors(body)


def prepare_validation() -> None:
    """Build what validation otherwise builds on first use: the compiled request schema
    (~20 ms, more on a busy machine). A server calls it before it forks its workers, so
    that no worker's first request waits for it."""
    request_schema()


def validate_completion(body: Any, models: Mapping[str, ModelInfo] | None = None) -> CompletionRequest:
    """Check a parsed body against the spec; `models` overrides the spec's (a deployment's max_model_len)."""
    if not isinstance(body, dict):
        raise InvalidJson.from_template("not_json_object")
    body = {k: v for k, v in body.items() if v is not None}
    request_schema().validate(body)
    body = request_schema().coerce(body)
    check_rules(body)
    models = spec().models if models is None else models
    model = models.get(body["model"])
    if model is None:
        raise ModelNotFound.from_template("model_not_found", "model", model=body["model"])
    check_model_rules(body, model)
    steering = decode_vectors(body["apply_steering_vectors"], model) if "apply_steering_vectors" in body else []
    check_generated_cap(body, _prompt_count(body["prompt"]))
    prompts, texts = _prompts(body, model)
    prompts = _truncate(prompts, body.get("truncate_prompt_tokens"), model)
    max_tokens = resolve_max_tokens(body, [len(p) for p in prompts], model)
    return CompletionRequest(body, model, prompts, texts, max_tokens,
                             body.get("max_tokens") is None, steering)
