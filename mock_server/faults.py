"""Latency and faults on request, for client developers testing timeouts and retries.

The headers are documented in openapi.yaml (x-mock-headers), the statuses and
messages in x-mock-faults; this module only reads them.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Protocol

from contract import ApiError, CompletionRequest, InvalidRequest, error_for_status, spec
from mock_server.config import MockConfig

STATUS = "X-Mock-Status"
STREAM_ERROR_AFTER = "X-Mock-Stream-Error-After"
TTFT_MS = "X-Mock-Ttft-Ms"
TPOT_MS = "X-Mock-Tpot-Ms"


def check_spec() -> None:
    """Fail at start if the spec no longer documents a header this module reads."""
    documented = spec().raw["x-mock-headers"]
    missing = [h for h in (STATUS, STREAM_ERROR_AFTER, TTFT_MS, TPOT_MS) if h not in documented]
    if missing or "x-mock-faults" not in spec().raw:
        raise RuntimeError(f"openapi.yaml lacks the mock's headers {missing} or x-mock-faults")


def _faults() -> dict:
    return spec().raw["x-mock-faults"]


class Headers(Protocol):
    """A request's headers, looked up case-insensitively (werkzeug's Headers)."""

    def get(self, key: str) -> str | None: ...

    def __contains__(self, key: str, /) -> bool: ...

    def __getitem__(self, key: str) -> str: ...


@dataclass(frozen=True)
class Plan:
    """What this request will go through besides the API itself."""
    ttft_s: float
    tpot_s: float
    forced_status: int | None
    stream_error_after: int | None


_NO_HEADERS: dict[str, str] = {}


def _invalid(header: str, expected: str) -> InvalidRequest:
    faults = _faults()
    text = faults["expected"][expected].format(statuses=", ".join(map(str, faults["statuses"])))
    return InvalidRequest(faults["invalid_header"].format(header=header, expected=text))


def _number(headers: Headers, name: str, default: float, integer: bool = False) -> float:
    raw = headers.get(name)
    if raw is None:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = -1
    if not math.isfinite(value) or value < 0:
        raise _invalid(name, "count" if integer else "milliseconds")
    return value


def plan(headers: Headers, config: MockConfig, rng: random.Random,
         max_tokens: int) -> Plan:
    """Read the mock's headers (400 for a bad value) and roll the configured fault rates.
    With config.test_headers off the headers are not read at all: a server of the real
    API must not let a client force faults or latency."""
    if not config.test_headers:
        headers = _NO_HEADERS
    statuses = _faults()["statuses"]
    forced = None
    if STATUS in headers:
        raw = headers[STATUS].strip()
        if not raw.isdigit() or int(raw) not in statuses:
            raise _invalid(STATUS, "status")
        forced = int(raw)
    elif config.fault_rate and rng.random() < config.fault_rate:
        forced = rng.choice(statuses)
    after: int | None = None
    if STREAM_ERROR_AFTER in headers:
        after = int(_number(headers, STREAM_ERROR_AFTER, 0, integer=True))
    elif config.stream_error_rate and rng.random() < config.stream_error_rate:
        after = rng.randrange(max_tokens)
    return Plan(_number(headers, TTFT_MS, config.ttft_ms) / 1000,
                _number(headers, TPOT_MS, config.tpot_ms) / 1000, forced, after)


def forced_error(status: int, req: CompletionRequest) -> ApiError:
    """The error the API would send with this status, its message filled as the API would."""
    code = next(c for c, v in spec().error_codes.items() if v["status"] == status)
    message = spec().messages[code].format(
        remaining=0, prompt_tokens=sum(req.prompt_token_counts),
        sequences=len(req.prompts) * req.n, seconds=spec().caps["wait_seconds"])
    return error_for_status(status, message)


def stream_error() -> ApiError:
    code = _faults()["stream_error_code"]
    status = spec().error_codes[code]["status"]
    return error_for_status(status, spec().messages[code])
