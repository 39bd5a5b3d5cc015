"""HTTP-level rules without a server: route, auth, body size, media type.

Servers call `preflight` with what they know before reading the body, in the
spec's order (x-check-order: route, auth, body_size, media_type).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache

from contract.errors import (
    ChatRefused, InvalidApiKey, MethodNotAllowed, NotFound, RequestTooLarge, SpecText,
    UnsupportedMediaType, fill,
)
from contract.spec import spec


@dataclass(frozen=True)
class Route:
    path: str
    method: str
    operation_id: str
    needs_auth: bool
    has_body: bool


@cache
def routes() -> dict[str, dict[str, Route]]:
    """path -> method -> Route, from the spec's paths."""
    raw = spec().raw
    out: dict[str, dict[str, Route]] = {}
    for path, item in raw["paths"].items():
        for method, op in item.items():
            needs_auth = op.get("security", raw.get("security")) != []
            out.setdefault(path, {})[method.upper()] = Route(
                path, method.upper(), op["operationId"], needs_auth, "requestBody" in op)
    return out


def allowed_methods(path: str) -> tuple[str, ...]:
    return tuple(sorted(routes().get(path, {})))


def match_route(method: str, path: str) -> Route:
    methods = routes().get(path)
    if methods is None:
        raise NotFound.from_template("not_found", method=method, path=path)
    route = methods.get(method.upper())
    if route is None:
        allow = allowed_methods(path)
        raise MethodNotAllowed(fill(spec().messages["method_not_allowed"],
                                    method=method.upper(), path=path, allow=SpecText(", ".join(allow))),
                               allow=allow)
    return route


def check_auth(authorization: str | None, keys: Collection[str] | None) -> str:
    """The caller's key; `keys` None accepts any non-empty Bearer key."""
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or (keys is not None and key not in keys):
        raise InvalidApiKey.from_template("invalid_api_key")
    return key


def check_body_size(content_length: int | None) -> None:
    limit = spec().caps["max_body_bytes"]
    if content_length is not None and content_length > limit:
        raise RequestTooLarge.from_template("request_too_large", limit=limit)


def check_media_type(content_type: str | None) -> None:
    if (content_type or "").split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType.from_template("unsupported_media_type")


def preflight(method: str, path: str, headers: Mapping[str, str],
              content_length: int | None, keys: Collection[str] | None) -> Route:
    """Every check that needs no body, in order; returns the matched route.

    `headers` must be case-insensitive (both WSGI servers give that).
    """
    route = match_route(method, path)
    if route.needs_auth:
        check_auth(headers.get("Authorization"), keys)
    check_body_size(content_length)  # on every route, a GET with a body included
    if route.has_body:
        if route.operation_id == "createChatCompletion":
            raise ChatRefused.from_template("chat_refused")
        check_media_type(headers.get("Content-Type"))
    return route
