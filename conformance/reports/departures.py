"""Where a finding's answer departs from what was expected: the field, as a reader fixes it.

`the body differs` on a 2 KB body says nothing a CI log can act on; each departing field with
what was expected there and what came does. The baseline's own matching (engine.baseline) masks
numbers and quotes; this is for reading, so it shows them, each value cut short.
"""

from __future__ import annotations

import json
from typing import Any

from conformance.engine.results import Finding

SHOWN = 6  # departures a finding lists
VALUE_CHARS = 120  # of each value shown
ABSENT = object()


def _short(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def departures(expected: Any, received: Any, at: str = "") -> list[tuple[str, Any, Any]]:
    """(path, expected there, received there) for each place the two differ, fields in order."""
    if isinstance(expected, dict) and isinstance(received, dict):
        out = []
        for name in [*expected, *(k for k in received if k not in expected)]:
            out += departures(
                expected.get(name, ABSENT), received.get(name, ABSENT), f"{at}.{name}"
            )
        return out
    if isinstance(expected, list) and isinstance(received, list) and len(expected) == len(received):
        return [
            d
            for i, pair in enumerate(zip(expected, received))
            for d in departures(*pair, f"{at}[{i}]")
        ]
    return [] if expected == received else [(at or ".", expected, received)]


def where(finding: Finding) -> list[str]:
    """Lines naming each field where a body (or any structure) departs; none for a scalar
    finding, whose line already says both values."""
    if not isinstance(finding.expected, (dict, list)) or not isinstance(
        finding.received, (dict, list)
    ):
        return []
    found = departures(finding.expected, finding.received)
    lines = [f"{path}: expected {_short(e)}, received {_short(r)}" for path, e, r in found[:SHOWN]]
    if len(found) > SHOWN:
        lines.append(f"(+{len(found) - SHOWN} more fields)")
    return lines
