"""HTTP-level rules without a server: route, auth, body size, media type.

Servers call `preflight` with what they know before reading the body: the route,
then auth, body size and media type in the spec's order (x-check-order).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from contract.errors import (
    ChatRefused,
    InvalidApiKey,
    Message,
    MethodNotAllowed,
    NotFound,
    RequestTooLarge,
    SpecText,
    UnsupportedMediaType,
    UnsupportedTransferCoding,
)
from contract.spec import Route, Spec

PREFLIGHT_STAGES = ("auth", "body_size", "transfer_coding", "media_type")


@dataclass(frozen=True)
class Admitted:
    """What preflight decided: the route, and the caller's key when the route needs one."""

    route: Route
    key: str | None


class Preflight:
    """One spec's checks before the body: its routes, its body cap, its order of stages."""

    def __init__(self, api: Spec) -> None:
        self.routes: dict[str, dict[str, Route]] = {}  # path -> method -> Route
        for route in api.routes:
            self.routes.setdefault(route.path, {})[route.method] = route
        self.max_body_bytes: int = api.caps["max_body_bytes"]
        # preflight's stages after the route, in the spec's order (x-check-order)
        self.stages = api.in_check_order(PREFLIGHT_STAGES)

    def allowed_methods(self, path: str) -> tuple[str, ...]:
        return tuple(sorted(self.routes.get(path, {})))

    def match_route(self, method: str, path: str) -> Route:
        methods = self.routes.get(path)
        if methods is None:
            raise NotFound.from_template("not_found", method=method, path=path)
        route = methods.get(method.upper())
        if route is None:
            allow = self.allowed_methods(path)
            fields = {"method": method.upper(), "path": path, "allow": SpecText(", ".join(allow))}
            raise MethodNotAllowed(Message(key="method_not_allowed", fields=fields), allow=allow)
        return route

    def check_body_size(self, content_length: int | None) -> None:
        limit = self.max_body_bytes
        if content_length is not None and content_length > limit:
            raise RequestTooLarge.from_template("request_too_large", limit=limit)

    def __call__(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        content_length: int | None,
        keys: Collection[str] | None,
    ) -> Admitted:
        """Every check that needs no body, in order; returns the matched route and the
        caller's key (auth is decided here, once).

        `headers` must be case-insensitive (both WSGI servers give that).
        """
        route = self.match_route(method, path)  # the first stage: the others need the route
        key = None
        for stage in self.stages:
            if stage == "auth":
                if route.needs_auth:
                    key = check_auth(headers.get("Authorization"), keys)
            elif stage == "body_size":
                self.check_body_size(content_length)  # on every route, a GET with a body included
            elif not route.has_body:
                continue
            elif route.operation_id == "createChatCompletion":  # refused before its body
                if stage == "media_type":
                    raise ChatRefused.from_template("chat_refused")
            elif stage == "transfer_coding":
                check_transfer_coding(headers.get("Transfer-Encoding"))
            else:  # media_type: the type, and its coding (a gzip body is not JSON to read)
                check_media_type(headers.get("Content-Type"), headers.get("Content-Encoding"))
        return Admitted(route, key)


def check_auth(authorization: str | None, keys: Collection[str] | None) -> str:
    """The caller's key; `keys` None accepts any non-empty Bearer key."""
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or (keys is not None and key not in keys):
        raise InvalidApiKey.from_template("invalid_api_key")
    return key


def check_transfer_coding(transfer_encoding: str | None) -> None:
    """A body whose codings are other than chunked (gzip, chunked: the WSGI server undoes the
    chunking alone) would be read as plain text: refused, not misread."""
    if transfer_encoding is None:
        return
    codings = [c.strip(" \t").lower() for c in transfer_encoding.split(",")]
    if any(c != "chunked" for c in codings):
        raise UnsupportedTransferCoding.from_template("unsupported_transfer_coding")


def check_media_type(content_type: str | None, content_encoding: str | None = None) -> None:
    if (content_type or "").split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType.from_template("unsupported_media_type")
    codings = [c.strip(" \t").lower() for c in (content_encoding or "").split(",")]
    if any(c not in ("", "identity") for c in codings):
        raise UnsupportedMediaType.from_template("unsupported_content_coding")
