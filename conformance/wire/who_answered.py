"""Who answered: an answer that is not in the API's shape names what wrote it, from the answer
itself (its Server and Via headers, a product's version header, an HTML page's title), so that a
finding about a front says so and points to the front guide instead of leaving the reader to guess.

Another party is only ever named from evidence in the answer, never from a difference: a header
that differs from another answer's proves nothing (a gateway that answers GET /v1/models itself
adds one). And a front's own words are only a *warning* where the user declared that front
(`--front NAME`) and the answer names it: its Server or Via header, or its page's text. A 5xx
is never another party's, and an undeclared front's words are findings like any other.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

FRONT_GUIDE = 'reference_impl/DEPLOY.md, "Fronts"'

_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TITLE_CHARS = 80
_PAGE_BYTES = 8192  # of a page searched for its writer's name


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def _raw(body: bytes | str | None) -> bytes:
    return body.encode("utf-8", "replace") if isinstance(body, str) else body or b""


def html_title(body: bytes | str | None) -> str | None:
    match = _TITLE.search(_raw(body)[:_PAGE_BYTES])
    if match is None:
        return None
    return " ".join(match.group(1).decode("utf-8", "replace").split())[:_TITLE_CHARS]


def writer(headers: Mapping[str, str]) -> tuple[str, ...]:
    """What an answer says of who wrote it: its Server and Via headers and a product's own version
    header (LiteLLM's x-litellm-version)."""
    names = {"server": "Server", "via": "Via"}
    return tuple(
        sorted(
            f"{names.get(key.lower(), key.lower())}: {value}"
            for key, value in headers.items()
            if key.lower() in names
            or (key.lower().startswith("x-") and key.lower().endswith("-version"))
        )
    )


def names_front(
    headers: Mapping[str, str],
    body: bytes | str | None,
    status: int | None,
    front: str | None,
    refusals: Collection[int] = (),
) -> bool:
    """Whether this answer is the declared `front`'s own: a status below 500 (or one of
    `refusals`, a protocol refusal such as 501 or 505: the spec's x-protocol-refusals), and the
    front's name in its Server or Via header or in its page (nginx's pages end
    `<center>nginx</center>`)."""
    if not front or status is None or (status >= 500 and status not in refusals):
        return False
    name = front.lower()
    said = " ".join(v for v in (_header(headers, "server"), _header(headers, "via")) if v).lower()
    return name in said or name.encode() in _raw(body)[:_PAGE_BYTES].lower()


def who_answered(
    headers: Mapping[str, str],
    body: bytes | str | None,
    status: int | None = None,
    front: str | None = None,
    refusals: Collection[int] = (),
) -> str:
    """'answered by Server: nginx/1.22.1, HTML title "400 Bad Request"; ...', or that nothing in
    the answer names its writer; then whether it is the declared front's (`--front`), or how to
    declare one."""
    named = list(writer(headers))
    title = html_title(body)
    if title is not None:
        named.append(f'HTML title "{title}"')
    who = (
        f"answered by {', '.join(named)}"
        if named
        else "the answer names no writer (no Server, Via or HTML title)"
    )
    if names_front(headers, body, status, front, refusals):
        return f"{who}: the declared front {front} in its own words (see {FRONT_GUIDE})"
    if front:  # declared: this answer is not its own words, so the guide would not help
        return f"{who}; not the declared front {front}'s own words"
    return (
        f"{who}; a front answering in its own words? see {FRONT_GUIDE} (--front NAME declares it)"
    )
