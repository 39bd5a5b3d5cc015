"""Latency and faults on request, for client developers testing timeouts and retries.

The headers are documented in openapi.yaml (x-mock-headers), the statuses and
messages in x-mock-faults; this module only reads them. `Faults` is the hook the
mock's app is built with (api_server/hooks.py); the real API's has none.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from api_server.engine import Event
from api_server.hooks import PLAIN, Headers, Plan
from contract import ApiError, CompletionRequest, InvalidRequest, Spec, spec
from contract.errors import error_class
from mock_server.config import MockConfig
from mock_server.latency import paced

STATUS = "X-Mock-Status"
STREAM_ERROR_AFTER = "X-Mock-Stream-Error-After"
TTFT_MS = "X-Mock-Ttft-Ms"
TPOT_MS = "X-Mock-Tpot-Ms"


def check_spec(s: Spec) -> None:
    """Fail at start if the spec no longer documents a header this module reads."""
    documented = s.mock_headers
    missing = [h for h in (STATUS, STREAM_ERROR_AFTER, TTFT_MS, TPOT_MS) if h not in documented]
    if missing or not s.mock_faults:
        raise RuntimeError(f"openapi.yaml lacks the mock's headers {missing} or x-mock-faults")


def _faults() -> dict[str, Any]:
    return spec().mock_faults


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


class Faults:
    """The mock's hook (api_server/hooks.py): its headers and the configured fault rates."""

    def __init__(self, config: MockConfig, s: Spec | None = None) -> None:
        check_spec(s if s is not None else spec())
        self.config = config
        self.rng = random.Random()

    def plan(self, headers: Headers, req: CompletionRequest) -> Plan:
        ttft_s, tpot_s, forced, after = read(headers, self.config, self.rng, req.max_tokens)
        if not ttft_s and not tpot_s and forced is None and after is None:
            return PLAIN
        return Plan(error=None if forced is None else forced_error(forced, req),
                    pace=partial(_pace, ttft_s=ttft_s, tpot_s=tpot_s) if ttft_s or tpot_s else None,
                    stream_error_after=after, stream_error=None if after is None else stream_error())


def _pace(events: Iterator[Event], sleep: Callable[[float], object],
          ttft_s: float, tpot_s: float) -> Iterator[Event]:
    return paced(events, ttft_s, tpot_s, sleep)


def read(headers: Headers, config: MockConfig, rng: random.Random,
         max_tokens: int) -> tuple[float, float, int | None, int | None]:
    """Read the mock's headers (400 for a bad value) and roll the configured fault rates:
    (ttft_s, tpot_s, forced status, choice deltas before a stream error)."""
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
    return (_number(headers, TTFT_MS, config.ttft_ms) / 1000,
            _number(headers, TPOT_MS, config.tpot_ms) / 1000, forced, after)


def forced_error(status: int, req: CompletionRequest) -> ApiError:
    """The error the API would send with this status, its message filled as the API would."""
    code = next(c for c, v in spec().error_codes.items() if v["status"] == status)
    message = spec().messages[code].format(
        remaining=0, prompt_tokens=sum(req.prompt_token_counts),
        sequences=len(req.prompts) * req.n, seconds=spec().caps["wait_seconds"])
    return error_class(code)(message)


def stream_error() -> ApiError:
    code = _faults()["stream_error_code"]
    return error_class(code)(spec().messages[code])
