"""Every answer's logprob rows held to the size its request asked for (`logprobs: k`): a row of
`top_logprobs` holds the k likeliest tokens and the sampled one when it is not among them, so k
or k + 1 entries; fewer where tokens share a text (the row is keyed by text: a small model's
byte tokens all decode to U+FFFD; real vLLM answered 18 for 20 at temperature 2), down to half.
Held on every answer the gate gets, not only a logprobs check's: a server that caps `logprobs`
at 5 fails the golden case that asked for 20, and every other answer with rows.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from conformance.wire.exchange import Exchange

SHARED_TEXT = 0.5  # the share of entries a row may lack where tokens share a text


@dataclass(frozen=True)
class OffRow:
    """A row whose size is not what its request's `logprobs` asks for."""

    exchange: Exchange
    asked: int
    size: int
    where: str


def _asked(content: bytes | None) -> int | None:
    try:
        body = json.loads(content) if content else None
    except (ValueError, RecursionError):
        return None
    value = body.get("logprobs") if isinstance(body, dict) else None
    return value if type(value) is int and value >= 0 else None


def _rows(data: Any) -> list[tuple[str, Any]]:
    """(where, row) of each top_logprobs row of an answer or a stream's chunk."""
    found = []
    choices = data.get("choices") if isinstance(data, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        lp = choice.get("logprobs") if isinstance(choice, dict) else None
        rows = lp.get("top_logprobs") if isinstance(lp, dict) else None
        for i, row in enumerate(rows if isinstance(rows, list) else ()):
            found.append((f"choice {choice.get('index')}, token {i}", row))
    return found


class RowSizes:
    """A client's observer: rows off their asked size, for the check that got them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.off: list[OffRow] = []

    def observe(self, method: str, path: str, content: bytes | None, reply: Any) -> None:
        asked = _asked(content) if method == "POST" else None
        if asked is None or reply.status != 200:
            return
        parsed = getattr(reply, "parsed", None)
        answers = (
            [e.payload for e in parsed.events if e.kind == "content"]
            if parsed is not None and parsed.events
            else [reply.data]
        )
        low, high = asked - int(asked * SHARED_TEXT), asked + 1
        for data in answers:
            for where, row in _rows(data):
                if isinstance(row, dict) and not low <= len(row) <= high:
                    with self._lock:
                        self.off.append(OffRow(reply.exchange, asked, len(row), where))
                    return  # one finding an answer
