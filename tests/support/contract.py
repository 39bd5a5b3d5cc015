"""The core over openapi.yaml, as the tests hold it: what a server built over the
default spec must answer (its messages, bodies and checks); and a second spec, a copy of it
with smaller caps and its own words for two errors (`smaller`)."""

from __future__ import annotations

import copy
from typing import Any

from gallery.support import CONTRACT

__all__ = ["CONTRACT", "TOKEN_RULE", "smaller"]

TOKEN_RULE = "generated_tokens_cap"


def smaller(raw: dict[str, Any]) -> dict[str, Any]:
    """A copy of a spec with smaller caps, and its own words for two errors."""
    raw = copy.deepcopy(raw)
    caps = raw["x-caps"]
    caps["max_body_bytes"] //= 2
    caps["keepalive_seconds"] *= 2
    caps["body_read_seconds"] //= 2
    caps["max_generated_tokens"] //= 4
    caps["max_tokens_without_stream"] = min(
        caps["max_tokens_without_stream"], caps["max_generated_tokens"] // 2
    )
    raw["x-messages"]["request_too_large"] = "Over {limit} bytes: the small spec's own words."
    rule = next(r for r in raw["x-token-rules"] if r["id"] == TOKEN_RULE)
    rule["message"] = "The small spec caps generated tokens at {cap}; this request asks {total}."
    return raw
