"""A request as the core checked it (CompletionRequest), and the body's strict JSON.

contract/api.py's `Contract.validate_completion` builds the request, stage by stage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.errors import InvalidJson
from contract.spec import ModelInfo
from contract.tensors import SteeringVector
from contract.tokens import encode


@dataclass(frozen=True)
class CompletionRequest:
    body: dict[str, Any]  # the client's fields, nulls removed
    model: ModelInfo
    prompts: list[list[int]]  # token ids of each prompt, as vLLM counts them
    prompt_texts: list[str] | None  # the strings, when the prompts were strings
    max_tokens: int
    max_tokens_defaulted: bool
    # The spec's x-default of each field: what leaving it out means (the same dict for every request).
    defaults: Mapping[str, Any] = field(repr=False, compare=False)
    steering: list[SteeringVector] = field(default_factory=list)

    def option(self, name: str) -> Any:
        """The field's value, or what leaving it out means (its x-default; None without one)."""
        body = self.body
        if name in body:
            return body[name]
        return self.defaults.get(name)

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


def prompts_of(
    body: dict[str, Any], model: ModelInfo, add_special_default: bool
) -> tuple[list[list[int]], list[str] | None]:
    """The prompt's token ids (strings tokenized), and its strings when it had strings."""
    prompt = body["prompt"]
    add_special = body.get("add_special_tokens", add_special_default)
    if isinstance(prompt, str):
        texts = [prompt]
    elif isinstance(prompt[0], str):
        texts = prompt
    elif isinstance(prompt[0], int):
        return [prompt], None
    else:
        return list(prompt), None
    return [encode(model, t, add_special) for t in texts], texts


def prompt_count(prompt: Any) -> int:
    """How many prompts: a string or a list of token ids is one."""
    return (
        len(prompt)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list))
        else 1
    )


def truncate(prompts: list[list[int]], keep: int | None, model: ModelInfo) -> list[list[int]]:
    if keep is None or keep == 0:
        return prompts
    keep = model.max_model_len if keep == -1 else keep
    return [p[-keep:] for p in prompts]
