"""Server-sent events, parsed by hand: the suite must see what SSE clients hide.

httpx-sse (like every SSE client) drops comment lines and tolerates sloppy
framing; the contract makes both observable (`: keepalive` every
keepalive_seconds, one `data: ` line per event), so lines are kept raw, with
the time each arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conformance.wire import jsontext

DONE = "[DONE]"
DATA_PREFIX = "data: "


@dataclass
class Event:
    data: str
    at: float  # seconds since the request was sent
    payload: Any = None  # parsed JSON, or DONE
    kind: str = "invalid"  # content | usage | activations | error | done | invalid | unknown


@dataclass
class Parsed:
    events: list[Event] = field(default_factory=list)
    comments: list[tuple[float, str]] = field(default_factory=list)
    framing_errors: list[str] = field(default_factory=list)


def classify(payload: Any) -> str:
    """The event kinds of x-event-schemas, told apart by shape."""
    if payload == DONE:
        return "done"
    if not isinstance(payload, dict):
        return "unknown"
    if "error" in payload:
        return "error"
    choices = payload.get("choices")
    if isinstance(choices, list) and choices:
        return "content"
    if "activations" in payload:
        return "activations"
    if "usage" in payload:
        return "usage"
    return "unknown"


def parse_lines(lines: list[tuple[float, str]]) -> Parsed:
    """Events and comments from raw lines (without their line endings)."""
    out = Parsed()
    block: list[tuple[float, str]] = []

    def flush() -> None:
        if not block:
            return
        data_lines = [(t, line) for t, line in block if line.startswith("data:")]
        others = [line for _, line in block if not line.startswith("data:")]
        for line in others:
            out.framing_errors.append(f"a line that is neither data nor a comment: {line[:80]!r}")
        if len(data_lines) > 1:
            out.framing_errors.append(f"an event with {len(data_lines)} data lines (one expected)")
        if data_lines:
            at, first = data_lines[0]
            if not first.startswith(DATA_PREFIX):
                out.framing_errors.append(
                    f"a data line without one space after the colon: {first[:80]!r}"
                )
            data = "\n".join(line[5:].removeprefix(" ") for _, line in data_lines)
            out.events.append(_event(data, at))
        block.clear()

    for at, line in lines:
        if line.startswith(":"):
            out.comments.append((at, line))
        elif line == "":
            flush()
        else:
            block.append((at, line))
    if block:
        out.framing_errors.append("the stream ended inside an event (no blank line after it)")
        flush()
    return out


def parse_text(raw: str) -> Parsed:
    """A whole text/event-stream body at once (every line at time 0)."""
    return parse_lines([(0.0, line) for line in raw.split("\n")])


def _event(data: str, at: float) -> Event:
    if data == DONE:
        return Event(data, at, DONE, "done")
    try:
        payload = jsontext.loads(data)
    except ValueError:
        return Event(data, at, None, "invalid")
    return Event(data, at, payload, classify(payload))
