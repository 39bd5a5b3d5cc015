"""The volatile parts of a server's words, masked so that two answers (two runs, two
deployments) compare: request and completion ids (their prefixes are the spec's
x-request-id), UUIDs, hex tokens (the suite's distinctive inputs), times, timestamps and
numbers of 7 digits or more (epoch seconds, a run's byte counts). `--baseline` matches
findings with it (conformance.engine.baseline) and `diff` compares messages with it (conformance.engine.diff)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from contract import Spec

MASK = "…"


@cache
def _volatile(api: Spec) -> re.Pattern[str]:
    rid = api.request_id
    return re.compile(
        "|".join(
            (
                rf"{re.escape(rid['prefix'])}[A-Za-z0-9]+",  # request ids
                rf"\b{re.escape(rid['completion_prefix'])}[A-Za-z0-9-]+",  # completion ids (any server's)
                r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",  # UUIDs
                r"\b[0-9a-fA-F]{8,}\b",  # hex tokens
                r"\d{4}-\d{2}-\d{2}[T ][\d:.]+(?:Z|[+-]\d{2}:?\d{2})?",  # timestamps
                r"\d+(?:\.\d+)?\s?(?:ms|s)\b",  # times
                r"\b\d{7,}\b",  # epoch seconds, byte counts
            )
        )
    )


def masked(api: Spec, text: Any) -> Any:
    """`text` with its volatile parts as MASK; anything but a string as it is."""
    return _volatile(api).sub(MASK, text) if isinstance(text, str) else text
