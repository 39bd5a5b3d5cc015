"""robust:lists.* — every list a request may hold, one item past its bound (maxItems in
openapi.yaml): refused with the exact 400 before any item costs work (a million bad words are a
million tokenizations). The bounds too large for a readable golden case are this group's
(conformance/golden/cases.py, GOLDEN_LIST_ITEMS); the small ones (stop's) are golden."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from conformance.checks.robust.raw import minimal, post, refused, robust
from conformance.engine.context import Context
from conformance.spec.bodies import error_body
from conformance.wire import tensors

Items = Callable[[int], list[Any]]  # n distinct items that pass the item schema


def _items(ctx: Context, schema: dict[str, Any]) -> Items | None:
    kind = schema.get("type")
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return _vectors(ctx) if name == "SteeringVector" else _items(ctx, ctx.api.schema(name))
    if kind == "integer":
        return lambda n: list(range(n))
    if kind == "string":
        return lambda n: [f"s{i}" for i in range(n)]
    if kind == "array":
        inner = _items(ctx, schema.get("items", {}))
        return None if inner is None else (lambda n: [inner(1) for _ in range(n)])
    return None


def _vector(ctx: Context, **fields: Any) -> dict[str, Any]:
    """A steering vector of zeros at layer 0: valid, so that only the list at hand is wrong."""
    hidden = ctx.model.hidden_size
    zeros = tensors.wire(tensors.frame(bytes(4 * hidden)), [1, hidden])
    return {"activations": zeros, "layer_indices": [0], **fields}


def _vectors(ctx: Context) -> Items:
    return lambda n: [_vector(ctx) for _ in range(n)]


def _options(ctx: Context, prop: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for option in prop.get("anyOf", [prop]):
        ref = option.get("$ref")
        yield ctx.api.schema(ref.rsplit("/", 1)[1]) if ref else option


def _bounded_options(ctx: Context, schema: str) -> Iterator[tuple[str, int, Items]]:
    for name, prop in ctx.api.schema(schema)["properties"].items():
        for option in _options(ctx, prop):
            items = _items(ctx, option.get("items", {}))
            if "maxItems" in option and items is not None:
                yield name, option["maxItems"], items


def bounded(ctx: Context) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(the field as the error names it, maxItems, a request with that list one item past it)
    for each bounded list of CompletionRequest (each list form of prompt) and of a vector."""
    for name, bound, items in _bounded_options(ctx, "CompletionRequest"):
        yield name, bound, minimal(ctx, **{name: items(bound + 1)})
    for name, bound, items in _bounded_options(ctx, "SteeringVector"):
        vector = _vector(ctx, **{name: items(bound + 1)})
        yield (
            f"apply_steering_vectors[0].{name}",
            bound,
            minimal(ctx, apply_steering_vectors=[vector]),
        )


@robust("robust:lists.past_bound")
def past_bound(ctx: Context) -> None:
    """Each list a request may hold (each list form of prompt, a steering vector's lists), one item
    past its maxItems: 400 invalid_request naming the field and the bound (range.maxItems). A
    list whose one item more takes the body past x-caps.max_body_bytes is the body cap's to hold
    (caps:body.*), not sent here."""
    template = ctx.api.messages["range"]["maxItems"]
    cap = ctx.api.caps["max_body_bytes"]
    for field, bound, body in bounded(ctx):
        raw = json.dumps(body, separators=(",", ":")).encode()
        want = error_body(
            ctx.api, "invalid_request", template.format(param=field, limit=bound), field
        )
        if len(raw) > cap:  # a bound that only the body cap reaches: the caps group's
            continue
        refused(ctx, post(ctx, raw), f"{field} of {bound + 1:,} items", want)
