"""Who answered: an answer that is not in the API's shape names what wrote it (its Server
and Via headers, an HTML page's title), so that a finding about a front says so and points
to the front guide instead of leaving the reader to guess."""
from __future__ import annotations

import re
from collections.abc import Mapping

FRONT_GUIDE = "reference_impl/DEPLOY.md, \"Fronts\""

_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_TITLE_CHARS = 80


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def html_title(body: bytes | str | None) -> str | None:
    raw = body.encode("utf-8", "replace") if isinstance(body, str) else body or b""
    match = _TITLE.search(raw[:8192])
    if match is None:
        return None
    return " ".join(match.group(1).decode("utf-8", "replace").split())[:_TITLE_CHARS]


def writer(headers: Mapping[str, str]) -> tuple[str, ...]:
    """What an answer says of who wrote it: its Server and Via headers and a product's own version
    header (LiteLLM's x-litellm-version). Not the body: a server's own error page (a development
    server's HTML 400) is still the server's answer, and judged as one."""
    names = {"server": "Server", "via": "Via"}
    return tuple(sorted(f"{names.get(key.lower(), key.lower())}: {value}" for key, value in headers.items()
                        if key.lower() in names or (key.lower().startswith("x-") and key.lower().endswith("-version"))))


def who_answered(headers: Mapping[str, str], body: bytes | str | None, own: tuple[str, ...] | None = None) -> str:
    """'answered by Server: nginx/1.22.1, HTML title "400 Bad Request"; a front answering
    in its own words? see ...', or that nothing in the answer names its writer. `own`: the
    writer of the deployment's own answers (ServerInfo.writer); an answer by the same writer
    is the deployment's, and no front is suggested."""
    named = list(writer(headers))
    title = html_title(body)
    if title is not None:
        named.append(f'HTML title "{title}"')
    who = f"answered by {', '.join(named)}" if named else "the answer names no writer (no Server, Via or HTML title)"
    if own is not None and writer(headers) == own:
        return f"{who}, as the deployment's own answers are"
    return f"{who}; a front answering in its own words? see {FRONT_GUIDE}"


def is_front(headers: Mapping[str, str], own: tuple[str, ...] | None) -> bool:
    """Whether another party wrote an answer: its Server, Via or version header differs from what
    the deployment's own answers carry (unknown own: no sign that another party answered)."""
    return own is not None and writer(headers) != own
