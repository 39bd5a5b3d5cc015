"""An answer held to the spec's schema: the checks' findings, and the runner's test of whether a
check that could not read an answer was broken by the server (conformance.engine.runner)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING, Any

import jsonschema

from conformance.wire.client import Reply, StreamReply

if TYPE_CHECKING:
    from contract import Spec

SCHEMA_ERRORS_SHOWN = 5


@cache
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def schema_errors(instance: Any, schema: dict[str, Any]) -> list[str]:
    """Up to a few readable schema errors ('path: message'); empty when valid."""
    validator = _validator(json.dumps(schema, sort_keys=True))
    out = []
    for err in validator.iter_errors(instance):
        where = "/".join(str(p) for p in err.absolute_path) or "(root)"
        out.append(f"{where}: {err.message[:200]}")
        if len(out) >= SCHEMA_ERRORS_SHOWN:
            break
    return out


def off_schema(api: Spec, replies: Iterable[tuple[str, Reply]]) -> tuple[Reply, list[str]] | None:
    """The first of `replies` (each with its path) that is not the API's shape, with its schema
    errors: a 200 to the completions route (a Completion, or each event of a stream of its
    kind's schema) or any error's body (ErrorBody). None when every one is."""
    for path, reply in replies:
        if path != api.completions_path and (reply.status or 0) < 400:
            continue
        if isinstance(reply, StreamReply) and reply.status == 200:
            schemas = api.event_schemas
            for event in reply.parsed.events:
                if event.kind not in schemas:
                    return reply, [f"an event that is no event of the API: {event.data[:200]!r}"]
                errors = schema_errors(event.payload, schemas[event.kind])
                if errors:
                    return reply, errors
            continue
        if not reply.is_json and reply.status is not None and reply.content:
            name = "a Completion" if reply.status == 200 else "an ErrorBody"
            return reply, [f"the body is not JSON, where {name} is"]
        if reply.status == 200:
            errors = schema_errors(reply.data, api.schema("Completion"))
        elif reply.status is not None and reply.status >= 400:
            errors = schema_errors(reply.data, api.schema("ErrorBody"))
        else:
            continue
        if errors:
            return reply, errors
    return None
