"""The mock's settings: the server's (api_server/config.py) plus simulated latency,
faults and the fake model's end-of-text rate, filled from MOCK_* environment variables."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from api_server.config import ServerConfig

ENV_PREFIX = "MOCK_"


@dataclass(frozen=True)
class MockConfig(ServerConfig):
    env_prefix: ClassVar[str] = ENV_PREFIX
    # Simulated latency, overridable per request by X-Mock-Ttft-Ms / X-Mock-Tpot-Ms.
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    # Random faults, for client developers testing retries (fractions of requests).
    fault_rate: float = 0.0
    stream_error_rate: float = 0.0
    # How often the fake model ends a choice with an end-of-text token (per token).
    eos_rate: float = 1 / 64
