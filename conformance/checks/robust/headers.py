"""robust:headers.* and robust:path.* — a huge header, many headers, a huge request line; path tricks."""

from __future__ import annotations

from conformance.checks.robust.raw import (
    HEALTH,
    answered,
    distinctive,
    error_shaped,
    not_echoed,
    refused,
    robust,
    send,
)
from conformance.engine.context import Context


def _header_check(
    ctx: Context, what: str, extra: list[tuple[str, str]], echo: str | None = None
) -> None:
    """A request the server may answer (200) or refuse (a 4xx in the error shape), but never 5xx or hang."""
    ex = send(ctx, "GET", HEALTH, extra=extra)
    response = answered(ctx, ex, what)
    if response is not None and response.status != 200:
        error_shaped(ctx, response, what, front=True)
        if echo is not None:
            not_echoed(ctx, echo, response, what)


@robust("robust:headers.huge_value")
def headers_huge_value(ctx: Context) -> None:
    """One 64 KiB header: 200, or refused in the error shape without quoting it."""
    value = distinctive(1 << 16)
    _header_check(ctx, "a 64 KiB header", [("X-Conformance-Huge", value)], echo=value)


@robust("robust:headers.many")
def headers_many(ctx: Context) -> None:
    """2,000 headers: 200, or refused in the error shape."""
    _header_check(ctx, "2,000 headers", [(f"X-Conformance-{i}", "x") for i in range(2000)])


@robust("robust:headers.long_request_line")
def long_request_line(ctx: Context) -> None:
    """A 64 KiB request line: refused in the error shape (404, 414 or 400), never 5xx or a hang, not quoted back."""
    path = "/v1/" + distinctive(1 << 16)
    ex = send(ctx, "GET", path)
    refused(ctx, ex, "a 64 KiB request line", echo=path, front=True)


PATH_TRICKS = (
    "/v1/../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "//v1//completions",
    "/v1/completions/",
    "/V1/COMPLETIONS",
    "/v1/completions%00",
    "/v1/completions;x",
    "/v1/%ff%fe",
    "/v1/completions?" + "a=1&" * 500,
)


@robust("robust:path.tricks")
def path_tricks(ctx: Context) -> None:
    """Traversal, doubled slashes, case, NUL and invalid percent-escapes, a long query: each a 4xx in the error shape."""  # noqa: E501  (the check's one-line description)
    for path in PATH_TRICKS:
        refused(ctx, send(ctx, "GET", path), f"GET {path[:40]}", front=True)
