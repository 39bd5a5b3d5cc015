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
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

from contract.metrics import MetricsContract

SPEC_ENV = "ACS_OPENAPI"
# A checkout's (and an editable install's) spec: the top-level file people edit.
CHECKOUT_PATH = Path(__file__).resolve().parent.parent / "openapi.yaml"
_REQUIRED_EXTENSIONS = (
    "x-models",
    "x-caps",
    "x-error-codes",
    "x-messages",
    "x-rules",
    "x-model-rules",
    "x-token-rules",
    "x-request-id",
    "x-check-order",
)


class SpecError(Exception):
    """openapi.yaml is missing, not valid OpenAPI, or lacks what the core reads."""


# x-check-order's stages. Where stages are independent (preflight's auth, body_size,
# transfer_coding and media_type; the schema's four) the spec's order runs them. These groups need what the
# group before them gives (the route, a parsed body, a body that fits the schema, the
# model, the token counts), so their order is fixed: a spec that reorders across them
# fails at load instead of being silently ignored.
CHECK_STAGES: tuple[frozenset[str], ...] = (
    frozenset({"route"}),
    frozenset({"auth", "body_size", "transfer_coding", "media_type"}),
    frozenset({"json"}),
    frozenset({"unknown_field", "required", "type", "range"}),
    frozenset({"cross_field"}),
    frozenset({"model"}),
    frozenset({"token_caps"}),
    frozenset({"budget"}),
)


def _check_order(order: Any) -> str | None:
    """Why x-check-order cannot be followed, or None."""
    known = [stage for group in CHECK_STAGES for stage in group]
    if not isinstance(order, list) or sorted(order) != sorted(known):
        return f"x-check-order must list each of {sorted(known)} once"
    groups = [next(i for i, g in enumerate(CHECK_STAGES) if stage in g) for stage in order]
    if groups != sorted(groups):
        return "x-check-order reorders stages that depend on each other (contract/spec.py CHECK_STAGES)"
    return None


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
    capture_elements: int  # x-caps.capture_elements of the model's spec

    @property
    def capture_cap(self) -> int:
        """Layers x tokens one capture may hold: floor(capture_elements / hidden)."""
        return self.capture_elements // self.hidden_size


@dataclass(frozen=True)
class Route:
    path: str
    method: str  # upper case
    operation_id: str
    needs_auth: bool
    has_body: bool


@dataclass(frozen=True, eq=False)
class Spec:
    path: Traversable
    raw: dict[str, Any]

    @cached_property
    def version(self) -> str:
        """info.version: the contract's version, which every report records."""
        return str(self.raw["info"]["version"])

    @cached_property
    def caps(self) -> dict[str, int]:
        return self.raw["x-caps"]

    @cached_property
    def messages(self) -> dict[str, Any]:
        return self.raw["x-messages"]

    @cached_property
    def error_codes(self) -> dict[str, dict[str, Any]]:
        return self.raw["x-error-codes"]

    def special_tokens(self, model: str) -> dict[int, str]:
        """A model's special tokens (x-models `special_tokens`): id -> its text."""
        return {int(k): v for k, v in self.raw["x-models"][model].get("special_tokens", {}).items()}

    def special_token_pattern(self, model: str) -> str | None:
        """What every special token's text of a model matches (x-models
        `special_token_pattern`), beyond those `special_tokens` lists; None if it says none."""
        pattern = self.raw["x-models"][model].get("special_token_pattern")
        return None if pattern is None else str(pattern)

    def error_headers(self, code: str) -> dict[str, str]:
        """The headers an error code carries (x-error-codes `headers`), each with its value:
        the const of its schema in components/headers."""
        return _error_headers(self, code)

    @cached_property
    def rules(self) -> list[dict[str, Any]]:
        """x-rules, each with `schema` (its entry in CompletionRequest's allOf, which a
        body must match) and `when` (the JSON Schema a body breaking it matches)."""
        entries = rule_schemas(self.raw)
        return [
            {**r, "schema": entries[r["id"]], "when": {"not": entries[r["id"]]}}
            for r in self.raw["x-rules"]
        ]

    @cached_property
    def token_rules(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.raw["x-token-rules"]}

    @cached_property
    def model_rules(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.raw["x-model-rules"]}

    @cached_property
    def check_order(self) -> tuple[str, ...]:
        """x-check-order: when a request breaks several rules, the first stage reports."""
        return tuple(self.raw["x-check-order"])

    def in_check_order(self, stages: Any) -> list[str]:
        """`stages` (names of x-check-order) in the spec's order."""
        return [stage for stage in self.check_order if stage in stages]

    @cached_property
    def request_id(self) -> dict[str, Any]:
        return self.raw["x-request-id"]

    @cached_property
    def models(self) -> dict[str, ModelInfo]:
        return {
            name: ModelInfo(
                name=name,
                hf_id=m["hf_id"],
                num_layers=m["num_layers"],
                hidden_size=m["hidden_size"],
                vocab_size=m["vocab_size"],
                dtype=m["dtype"],
                bos_token_id=m["bos_token_id"],
                eos_token_ids=tuple(m["eos_token_ids"]),
                max_model_len=m["max_model_len"],
                tokenizer_encoding=m["tokenizer"]["encoding"],
                capture_elements=self.caps["capture_elements"],
            )
            for name, m in self.raw["x-models"].items()
        }

    @cached_property
    def default_model(self) -> str:
        return next(iter(self.raw["x-models"]))

    @cached_property
    def routes(self) -> tuple[Route, ...]:
        """Every operation of the spec's paths, in the spec's order."""
        out = []
        for path, item in self.raw["paths"].items():
            for method, op in item.items():
                needs_auth = op.get("security", self.raw.get("security")) != []
                out.append(
                    Route(path, method.upper(), op["operationId"], needs_auth, "requestBody" in op)
                )
        return tuple(out)

    def route(self, operation_id: str) -> Route:
        """The route of an operation (createCompletion: POST /v1/completions)."""
        return next(r for r in self.routes if r.operation_id == operation_id)

    @cached_property
    def completions_path(self) -> str:
        """POST's path of createCompletion: /v1/completions."""
        return self.route("createCompletion").path

    def operation(self, operation_id: str) -> dict[str, Any]:
        """An operation's raw OpenAPI object."""
        r = self.route(operation_id)
        return self.raw["paths"][r.path][r.method.lower()]

    @cached_property
    def event_schemas(self) -> dict[str, dict[str, Any]]:
        """kind -> inlined schema, from x-event-schemas under the stream's 200 response."""
        op = self.operation("createCompletion")
        refs = op["responses"]["200"]["content"]["text/event-stream"]["x-event-schemas"]
        return {kind: self.schema(ref["$ref"].rsplit("/", 1)[1]) for kind, ref in refs.items()}

    @cached_property
    def response_headers(self) -> dict[str, Any]:
        """components/headers: the headers a server sends (X-Request-Id, ...)."""
        return self.raw["components"]["headers"]

    @cached_property
    def mock_headers(self) -> dict[str, str]:
        """x-mock-headers: the mock's own test headers, name -> description ({} without)."""
        return self.raw.get("x-mock-headers", {})

    @cached_property
    def mock_faults(self) -> dict[str, Any]:
        """x-mock-faults: the statuses and messages of the mock's faults ({} without)."""
        return self.raw.get("x-mock-faults", {})

    @cached_property
    def metrics(self) -> MetricsContract:
        """x-metrics: the vLLM families a deployment's /metrics must hold, and the mock's KV cache."""
        return MetricsContract.from_raw(self.raw["x-metrics"])

    @cached_property
    def mock_cassette(self) -> dict[str, Any]:
        """x-mock-cassette: the mock's record and replay format and messages ({} without)."""
        return self.raw.get("x-mock-cassette", {})

    @cached_property
    def protocol_refusals(self) -> dict[str, frozenset[int]]:
        """x-protocol-refusals: kind of request -> the statuses that refuse it at the protocol level
        (RFC 9112 6.1, RFC 9110 15.6.6), whoever writes them ({} without)."""
        return {k: frozenset(v) for k, v in self.raw.get("x-protocol-refusals", {}).items()}

    @cached_property
    def batch_effects(self) -> dict[str, float]:
        """x-batch-effects: how far two answers of one request may differ (logprob_nats,
        near_tie_nats), the documentation's one exception to repeatability."""
        return {k: float(v) for k, v in self.raw["x-batch-effects"].items()}

    @cached_property
    def greedy_below(self) -> float:
        """vLLM samples greedily below this temperature; the spec's greedy_n rule names it."""
        rule = self.rule("x-rules", "greedy_n")
        return float(rule["schema"]["then"]["properties"]["temperature"]["minimum"])

    @cached_property
    def wire_dtypes(self) -> dict[str, tuple[str, str]]:
        """A model's dtype -> (the dtype its tensors travel in, their original_dtype), from
        the steering_vector rule's dtype_pairs: bfloat16 travels as int16, torch.bfloat16."""
        pairs = self.model_rules["steering_vector"]["dtype_pairs"].items()
        return {original.rpartition(".")[2]: (wire, original) for wire, original in pairs}

    def rule(self, table: str, rule_id: str) -> dict[str, Any]:
        """One rule of x-rules (as `rules` gives it, with schema and when), x-model-rules
        or x-token-rules by its id."""
        rows = self.rules if table == "x-rules" else self.raw[table]
        return next(r for r in rows if r["id"] == rule_id)

    def defaults(self, name: str) -> dict[str, Any]:
        """A component schema's x-default values: what a field left out or null means."""
        return _defaults(self, name)

    @cached_property
    def request_kinds(self) -> dict[str, dict[str, Any]]:
        """Each CompletionRequest field -> its x-kind, every key present (KIND_DEFAULTS where the
        spec says nothing): how it bounds or multiplies tokens, whether it is a list of token
        ids, its feature tag, where the reference sends it, whether JSON Schema says its rules."""
        props = self.raw["components"]["schemas"][REQUEST_SCHEMA]["properties"]
        return {f: {**KIND_DEFAULTS, **p.get(KIND_KEY, {})} for f, p in props.items()}

    def request_fields(self, key: str, value: Any = True) -> tuple[str, ...]:
        """The CompletionRequest fields whose x-kind `key` is `value`, in the schema's order."""
        return tuple(f for f, kind in self.request_kinds.items() if kind[key] == value)

    def token_fields(self, tokens: str) -> tuple[str, ...]:
        """The fields, of the API and of x-lax-fields (other servers' that a lax server reads),
        whose x-kind `tokens` is `tokens` (sequences or length): what prices a request."""
        lax = self.raw.get(LAX_KEY, {})
        return self.request_fields("tokens", tokens) + tuple(
            f for f, kind in lax.items() if kind.get("tokens") == tokens
        )

    def resolve(self, node: Any) -> Any:
        """Any part of the spec with every local $ref inlined."""
        return _inline(node, self.raw)

    def schema(self, name: str) -> dict[str, Any]:
        """A component schema with every local $ref inlined (our schemas do not recurse)."""
        return _inline(self.raw["components"]["schemas"][name], self.raw)


RULE_KEY = "x-rule"
REQUEST_SCHEMA = "CompletionRequest"
KIND_KEY = "x-kind"
LAX_KEY = "x-lax-fields"
# x-kind's keys, each with its values and its default (the first value; None: unset)
KINDS: dict[str, tuple[Any, ...]] = {
    "tokens": (None, "sequences", "length"),
    "token_ids": (False, True),
    "feature": (None, "activations", "steering", "logprobs", "streaming"),
    "vllm": ("body", "xargs", "set", "core", "none"),
    "schema": (None, "beyond"),
}
KIND_DEFAULTS = {key: values[0] for key, values in KINDS.items()}


def _token_id_problem(raw: dict[str, Any], fields: list[str]) -> str | None:
    """Where a list of token ids (x-kind token_ids) is not yet held to the vocabulary: the
    token_id_in_vocab rule's params and each model's ranges in the request schema's allOf."""
    rule: dict[str, Any] = next(
        (r for r in raw["x-model-rules"] if r.get("id") == "token_id_in_vocab"), {}
    )
    missing = [f for f in fields if f not in rule.get("params", ())]
    if missing:
        return f"x-model-rules token_id_in_vocab's params lack {missing} (x-kind token_ids)"
    for entry in raw["components"]["schemas"][REQUEST_SCHEMA].get("allOf", []):
        if "x-model" in entry:
            ranged = entry.get("then", {}).get("properties", {})
            missing = [
                f for f in fields if "exclusiveMaximum" not in ranged.get(f, {}).get("items", {})
            ]
            if missing:
                return (
                    f"{REQUEST_SCHEMA}'s allOf entry of x-model {entry['x-model']} holds no items "
                    f"bound (the vocabulary) for {missing} (x-kind token_ids)"
                )
    return None


def _kind_problem(field: str, kind: Any) -> str | None:
    """Why an x-kind is unusable, or None."""
    if not isinstance(kind, dict):
        return f"the {KIND_KEY} of {field} is not a mapping"
    for key, value in kind.items():
        if key not in KINDS:
            return f"the {KIND_KEY} of {field} has {key!r}, not one of {', '.join(KINDS)}"
        if value not in KINDS[key]:
            return f"the {KIND_KEY} of {field} says {key}: {value!r}, not one of {KINDS[key]}"
    return None


def rule_schemas(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """x-rule id -> its entry of the request schema's allOf (x- keys removed)."""
    entries = raw["components"]["schemas"][REQUEST_SCHEMA].get("allOf", [])
    return {
        e[RULE_KEY]: {k: v for k, v in e.items() if not k.startswith("x-")}
        for e in entries
        if RULE_KEY in e
    }


@cache
def _error_headers(api: Spec, code: str) -> dict[str, str]:
    declared = api.response_headers
    return {
        name: str(declared[name]["schema"]["const"])
        for name in api.error_codes[code].get("headers", ())
    }


@cache
def _defaults(api: Spec, name: str) -> dict[str, Any]:
    props = api.schema(name)["properties"]
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


def default_path() -> Traversable:
    """The installed package's copy (a wheel carries one: setup.py), else the checkout's file."""
    packaged = resources.files("contract") / "openapi.yaml"
    return packaged if packaged.is_file() else CHECKOUT_PATH


def load_spec(path: str | os.PathLike[str] | None = None) -> Spec:
    """Read and check a spec file (default: $ACS_OPENAPI, else default_path());
    raise SpecError with the reason if it is unusable."""
    from openapi_spec_validator import validate
    from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

    given = path or os.environ.get(SPEC_ENV)
    p = Path(given) if given else default_path()
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
    declared = raw.get("components", {}).get("headers", {})
    for code, entry in raw["x-error-codes"].items():
        for name in entry.get("headers", ()):
            if "const" not in declared.get(name, {}).get("schema", {}):
                raise SpecError(
                    f"{p}: x-error-codes.{code} names the header {name}, which "
                    f"components/headers does not declare with a const value"
                )
    ids, entries = [r["id"] for r in raw["x-rules"]], rule_schemas(raw)
    if set(ids) != set(entries):
        raise SpecError(
            f"{p}: x-rules {sorted(set(ids) - set(entries))} have no entry in "
            f"{REQUEST_SCHEMA}'s allOf, and {sorted(set(entries) - set(ids))} no x-rules entry"
        )
    bare = [r["id"] for r in raw["x-rules"] if not (r.get("examples") or {}).get("refused")]
    if bare:
        raise SpecError(f"{p}: x-rules {bare} carry no refused example (examples.refused)")
    problem = _check_order(raw["x-check-order"])
    props = raw["components"]["schemas"][REQUEST_SCHEMA]["properties"]
    kinds = {f: v.get(KIND_KEY, {}) for f, v in props.items()} | raw.get(LAX_KEY, {})
    problem = problem or next(filter(None, (_kind_problem(f, k) for f, k in kinds.items())), None)
    problem = problem or _token_id_problem(raw, [f for f, k in kinds.items() if k.get("token_ids")])
    if problem:
        raise SpecError(f"{p}: {problem}")
    return Spec(path=p, raw=raw)


@cache
def spec() -> Spec:
    """The process's spec, loaded once: only the default of the entry points (the
    commands, a factory's default argument); everything below them is handed its Spec."""
    return load_spec()
