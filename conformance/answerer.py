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


def who_answered(headers: Mapping[str, str], body: bytes | str | None) -> str:
    """'answered by Server: nginx/1.22.1, HTML title "400 Bad Request"; a front answering
    in its own words? see ...', or that nothing in the answer names its writer."""
    named = [f"{name}: {value}" for name in ("Server", "Via")
             if (value := _header(headers, name.lower())) is not None]
    title = html_title(body)
    if title is not None:
        named.append(f'HTML title "{title}"')
    who = f"answered by {', '.join(named)}" if named else "the answer names no writer (no Server, Via or HTML title)"
    return f"{who}; a front answering in its own words? see {FRONT_GUIDE}"
