"""Load openapi.yaml once, check it, and expose what the core needs from it.

The file is validated with openapi-spec-validator at load, and the `x-`
extensions the core reads are checked for presence, so a broken spec fails at
start with one clear error instead of at the first request.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import yaml

SPEC_ENV = "ACS_OPENAPI"
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "openapi.yaml"
_REQUIRED_EXTENSIONS = (
    "x-models", "x-caps", "x-error-codes", "x-messages", "x-rules",
    "x-model-rules", "x-token-rules", "x-request-id", "x-check-order",
)


class SpecError(Exception):
    """openapi.yaml is missing, not valid OpenAPI, or lacks what the core reads."""


@dataclass(frozen=True)
class ModelInfo:
    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    dtype: str
    bos_token_id: int
    eos_token_ids: tuple[int, ...]
    max_model_len: int
    tokenizer_encoding: str

    @property
    def capture_cap(self) -> int:
        """Layers x tokens one capture may hold: floor(capture_elements / hidden)."""
        return spec().caps["capture_elements"] // self.hidden_size


@dataclass(frozen=True, eq=False)
class Spec:
    path: Path
    raw: dict[str, Any]

    @cached_property
    def caps(self) -> dict[str, int]:
        return self.raw["x-caps"]

    @cached_property
    def messages(self) -> dict[str, Any]:
        return self.raw["x-messages"]

    @cached_property
    def error_codes(self) -> dict[str, dict[str, Any]]:
        return self.raw["x-error-codes"]

    @cached_property
    def rules(self) -> list[dict[str, Any]]:
        """x-rules, each with `schema` (its entry in CompletionRequest's allOf, which a
        body must match) and `when` (the JSON Schema a body breaking it matches)."""
        entries = rule_schemas(self.raw)
        return [{**r, "schema": entries[r["id"]], "when": {"not": entries[r["id"]]}}
                for r in self.raw["x-rules"]]

    def rule(self, rule_id: str) -> dict[str, Any]:
        return next(r for r in self.rules if r["id"] == rule_id)

    @cached_property
    def token_rules(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.raw["x-token-rules"]}

    @cached_property
    def model_rules(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.raw["x-model-rules"]}

    @cached_property
    def request_id(self) -> dict[str, Any]:
        return self.raw["x-request-id"]

    @cached_property
    def models(self) -> dict[str, ModelInfo]:
        return {
            name: ModelInfo(
                name=name, hf_id=m["hf_id"], num_layers=m["num_layers"],
                hidden_size=m["hidden_size"], vocab_size=m["vocab_size"],
                dtype=m["dtype"], bos_token_id=m["bos_token_id"],
                eos_token_ids=tuple(m["eos_token_ids"]),
                max_model_len=m["max_model_len"],
                tokenizer_encoding=m["tokenizer"]["encoding"],
            )
            for name, m in self.raw["x-models"].items()
        }

    @cached_property
    def default_model(self) -> str:
        return next(iter(self.raw["x-models"]))

    def defaults(self, name: str) -> dict[str, Any]:
        """A component schema's x-default values: what a field left out or null means."""
        return _defaults(self, name)

    def resolve(self, node: Any) -> Any:
        """Any part of the spec with every local $ref inlined."""
        return _inline(node, self.raw)

    def schema(self, name: str) -> dict[str, Any]:
        """A component schema with every local $ref inlined (our schemas do not recurse)."""
        return _inline(self.raw["components"]["schemas"][name], self.raw)


RULE_KEY = "x-rule"
REQUEST_SCHEMA = "CompletionRequest"


def rule_schemas(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """x-rule id -> its entry of the request schema's allOf (x- keys removed)."""
    entries = raw["components"]["schemas"][REQUEST_SCHEMA].get("allOf", [])
    return {e[RULE_KEY]: {k: v for k, v in e.items() if not k.startswith("x-")}
            for e in entries if RULE_KEY in e}


@cache
def _defaults(s: Spec, name: str) -> dict[str, Any]:
    props = s.schema(name)["properties"]
    return {field: p["x-default"] for field, p in props.items() if "x-default" in p}


def _inline(node: Any, root: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/"):
            target: Any = root
            for part in ref[2:].split("/"):
                target = target[part]
            return _inline(copy.deepcopy(target), root)
        return {k: _inline(v, root) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, root) for v in node]
    return node


def load_spec(path: str | os.PathLike[str] | None = None) -> Spec:
    """Read and check a spec file; raise SpecError with the reason if it is unusable."""
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

    p = Path(path or os.environ.get(SPEC_ENV) or DEFAULT_PATH)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read {p}: {exc}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{p} is not a YAML mapping")
    try:
        validate(raw)
    except OpenAPIValidationError as exc:
        raise SpecError(f"{p} is not valid OpenAPI: {exc.message}") from None
    missing = [k for k in _REQUIRED_EXTENSIONS if k not in raw]
    if missing:
        raise SpecError(f"{p} lacks the extensions {', '.join(missing)}")
    ids, entries = [r["id"] for r in raw["x-rules"]], rule_schemas(raw)
    if set(ids) != set(entries):
        raise SpecError(f"{p}: x-rules {sorted(set(ids) - set(entries))} have no entry in "
                        f"{REQUEST_SCHEMA}'s allOf, and {sorted(set(entries) - set(ids))} no x-rules entry")
    return Spec(path=p, raw=raw)


@cache
def spec() -> Spec:
    """The process's spec, loaded once."""
    return load_spec()
