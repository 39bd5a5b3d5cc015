"""HTTP-level rules without a server: route, auth, body size, media type.

Servers call `preflight` with what they know before reading the body: the route,
then auth, body size and media type in the spec's order (x-check-order).
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import cache

from contract.errors import (
    ChatRefused, InvalidApiKey, MethodNotAllowed, NotFound, RequestTooLarge,
    UnsupportedMediaType,
)
from contract.spec import Route, spec


@dataclass(frozen=True)
class Admitted:
    """What preflight decided: the route, and the caller's key when the route needs one."""
    route: Route
    key: str | None


@cache
def routes() -> dict[str, dict[str, Route]]:
    """path -> method -> Route, from the spec's paths."""
    out: dict[str, dict[str, Route]] = {}
    for route in spec().routes:
        out.setdefault(route.path, {})[route.method] = route
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
        raise MethodNotAllowed(spec().messages["method_not_allowed"].format(
            method=method.upper(), path=path, allow=", ".join(allow)), allow=allow)
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
              content_length: int | None, keys: Collection[str] | None) -> Admitted:
    """Every check that needs no body, in order; returns the matched route and the
    caller's key (auth is decided here, once).

    `headers` must be case-insensitive (both WSGI servers give that).
    """
    route = match_route(method, path)   # the first stage: the others need the route
    key = None
    for stage in _stages():
        if stage == "auth":
            if route.needs_auth:
                key = check_auth(headers.get("Authorization"), keys)
        elif stage == "body_size":
            check_body_size(content_length)  # on every route, a GET with a body included
        elif route.has_body:   # media_type
            if route.operation_id == "createChatCompletion":
                raise ChatRefused.from_template("chat_refused")
            check_media_type(headers.get("Content-Type"))
    return Admitted(route, key)


@cache
def _stages() -> list[str]:
    """preflight's stages after the route, in the spec's order (x-check-order)."""
    return spec().in_check_order(PREFLIGHT_STAGES)


PREFLIGHT_STAGES = ("auth", "body_size", "media_type")
