"""What every Budget backend shares: the store's interface and how it names a key.

sqlite.py and redis.py import this module; the package's __init__ (open_budget),
which picks one of them, imports them. Nothing here imports a backend.
"""

from __future__ import annotations

import hashlib
from typing import Protocol
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

from contract import CompletionRequest, Hold


class Budget(Protocol):
    """A Budget store: the Hold for a request, taken from its key's Budget, then settled."""

    def reserve(self, key: str, req: CompletionRequest) -> Hold:
        """The Hold for `req` (maybe clamped), or contract's 429 insufficient_quota."""
        ...

    def settle(self, key: str, held: Hold, used: int) -> None:
        """Give back what the Hold reserved beyond the `used` tokens."""
        ...


def key_id(api_key: str) -> str:
    """What a store keeps for an API key: its SHA-256, so a leaked store leaks no key."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def redacted(url: str) -> str:
    """The URL without its password, for log lines: the userinfo's, and every query value
    (redis-py's from_url also reads `?password=`)."""
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{parts.hostname}" + (
            f":{parts.port}" if parts.port else ""
        )
        parts = parts._replace(netloc=netloc)
    if parts.query:
        keys = [quote(k) for k, _ in parse_qsl(parts.query, keep_blank_values=True)]
        parts = parts._replace(query="&".join(f"{k}=***" for k in keys))
    return urlunsplit(parts)
