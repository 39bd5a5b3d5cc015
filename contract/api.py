"""The Contract: one Spec, built once into what checks requests against it.

As openapi-core's `OpenAPI` object, it is built from a spec and handed to what needs
it: an app, an engine, a test. It owns preflight (route, auth, body size, media type),
validation (the compiled request schema, the cross-field and model rules, the token
caps) and the errors' side of the spec (`errors`: messages, statuses, headers, request
ids). Two Contracts over two Specs check requests each by its own spec, in one process.

validate_completion's stages, in the spec's order (x-check-order): unknown field,
required, type and range (their order read from the spec by schema.py), then
cross-field rules, model, token caps (each needs what the one before gives; load_spec
refuses a spec that reorders them). The Budget comes after, in the server, through
contract.budget.hold.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from functools import cached_property
from typing import Any

from contract.caps import TokenCaps
from contract.errors import ApiError, Errors, InvalidJson, ModelNotFound
from contract.http import Admitted, Preflight
from contract.request import CompletionRequest, prompt_count, prompts_of, truncate
from contract.rules import Rules
from contract.schema import ObjectSchema
from contract.spec import ModelInfo, Route, Spec
from contract.tensors import decode_vectors


class Contract:
    """What serving one Spec needs from it, built once (see the module's docstring)."""

    def __init__(self, api: Spec) -> None:
        self.api = api
        self.errors = Errors(api)
        self._preflight = Preflight(api)
        self.defaults: dict[str, Any] = api.defaults("CompletionRequest")
        self._add_special: bool = self.defaults["add_special_tokens"]
        self._caps = TokenCaps(api)
        # the fields a null may leave out: the API's own; any other is unknown, null or not
        self._known = frozenset(api.schema("CompletionRequest")["properties"])

    # The compiled validators (~20 ms, more on a busy machine): built on first use, or by prepare().
    @cached_property
    def request_schema(self) -> ObjectSchema:
        return ObjectSchema(self.api.schema("CompletionRequest"), self.api)

    @cached_property
    def rules(self) -> Rules:
        return Rules(self.api)

    def prepare(self) -> None:
        """Build what validation otherwise builds on first use. A server calls it before it
        forks its workers, so that no worker's first request waits for it."""
        _ = self.request_schema, self.rules

    def preflight(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        content_length: int | None,
        keys: Collection[str] | None,
    ) -> Admitted:
        """Every check that needs no body, in the spec's order: the route and the caller's key.
        `headers` must be case-insensitive (both WSGI servers give that)."""
        return self._preflight(method, path, headers, content_length, keys)

    def match_route(self, method: str, path: str) -> Route:
        """preflight's first stage alone: the route, or not_found / method_not_allowed."""
        return self._preflight.match_route(method, path)

    def check_body_size(self, content_length: int | None) -> None:
        self._preflight.check_body_size(content_length)

    def iter_errors(self, body: dict[str, Any]) -> Iterator[ApiError]:
        """Every schema error, then (for a body whose schema holds) every broken cross-field rule.

        Diagnostics and the conformance suite want them all; a server wants the first,
        which is what validate_completion raises.
        """
        body = self._nulls_left_out(body)
        schema_errors = list(self.request_schema.iter_errors(body))
        yield from schema_errors
        if not schema_errors:
            yield from self.rules.iter_errors(body)

    def _nulls_left_out(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body with each field the API knows that is null left out (its default); a field
        it does not know stays, whatever its value, for the schema to refuse (Unknown field)."""
        return {k: v for k, v in body.items() if v is not None or k not in self._known}

    def validate_completion(
        self, body: Any, models: Mapping[str, ModelInfo] | None = None
    ) -> CompletionRequest:
        """Check a parsed body; `models` overrides the spec's (a deployment's max_model_len)."""
        if not isinstance(body, dict):
            raise InvalidJson.from_template("not_json_object")
        body = self._nulls_left_out(body)
        schema = self.request_schema
        schema.validate(body)
        body = schema.coerce(body)
        self.rules.check(body)
        models = self.api.models if models is None else models
        model = models.get(body["model"])
        if model is None:
            raise ModelNotFound.from_template("model_not_found", "model", model=body["model"])
        self.rules.check_model(body, model)
        vectors = body.get("apply_steering_vectors")
        steering = decode_vectors(vectors, model, self.api) if vectors is not None else []
        self._caps.check_generated(body, prompt_count(body["prompt"]))
        prompts, texts = prompts_of(body, model, self._add_special)
        prompts = truncate(prompts, body.get("truncate_prompt_tokens"), model)
        max_tokens = self._caps.resolve_max_tokens(body, [len(p) for p in prompts], model)
        return CompletionRequest(
            body,
            model,
            prompts,
            texts,
            max_tokens,
            body.get("max_tokens") is None,
            self.defaults,
            steering,
        )
