"""The mock's settings: the server's (api_server/config.py) plus simulated latency,
faults, the load model and the fake model's end-of-text rate, filled from MOCK_*
environment variables (a named load profile's numbers under them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from api_server.config import AT_LEAST_0, FRACTION, Bound, ConfigError, ServerConfig
from mock_server.hook.profiles import PROFILES

ENV_PREFIX = "MOCK_"
M = TypeVar("M", bound="MockConfig")


@dataclass(frozen=True)
class MockConfig(ServerConfig):
    env_prefix: ClassVar[str] = ENV_PREFIX
    # Simulated latency, overridable per request by X-Mock-Ttft-Ms / X-Mock-Tpot-Ms. Under
    # the load model: the prefill's fixed part and the decode step of a batch of one.
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    # Random faults, for client developers testing retries (fractions of requests).
    fault_rate: float = 0.0
    stream_error_rate: float = 0.0
    # The faults' seed (None: a new sequence each run; with one worker, a seed repeats a
    # run's faults exactly), and the statuses fault_rate picks from ("500,503"; None: every
    # status of x-mock-faults).
    fault_seed: int | None = None
    fault_statuses: str | None = None
    # How often the fake model ends a choice with an end-of-text token (per token).
    eos_rate: float = 1 / 64
    # The load model (load.py), off unless max_num_seqs is set (by it or a profile):
    # vLLM's running batch and its bound on sequences in flight (None: unbounded), prefill
    # per prompt token, the decode step's slowdown with full_load_seqs running (None:
    # max_num_seqs; a profile's is its hardware's), and seeded jitter.
    load_profile: str | None = None
    max_num_seqs: int | None = None
    max_num_queued_reqs: int | None = None
    prefill_ms_per_token: float = 0.0
    time_factor_under_load: float = 1.0
    full_load_seqs: int | None = None
    jitter: float = 0.0
    load_seed: int = 0
    # A JSON file of LIVE settings that the running mock rereads when it changes (control.py).
    control_file: str | None = None
    # vLLM's --disable-log-stats: no vllm:* metrics (their bookkeeping costs about 10 us a
    # request, bench/results/http_house.md); the API's acs_* stay.
    disable_log_stats: bool = False

    bounds: ClassVar[Mapping[str, Bound]] = {
        **ServerConfig.bounds,
        "ttft_ms": AT_LEAST_0,
        "tpot_ms": AT_LEAST_0,
        "fault_rate": FRACTION,
        "stream_error_rate": FRACTION,
        "eos_rate": FRACTION,
        "max_num_seqs": Bound(1),
        "max_num_queued_reqs": AT_LEAST_0,
        "prefill_ms_per_token": AT_LEAST_0,
        "time_factor_under_load": Bound(1),
        "full_load_seqs": Bound(1),
        "jitter": Bound(0, high=0.99),
        "load_seed": AT_LEAST_0,
        "fault_seed": AT_LEAST_0,
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.load_profile is not None and self.load_profile not in PROFILES:
            raise ConfigError(
                f"{self.option('load_profile')} must be one of {', '.join(PROFILES)}, "
                f"got {self.load_profile!r}"
            )
        if self.load_profile is not None and self.max_num_seqs is None:
            raise ConfigError(f"{self.option('max_num_seqs')} is needed with a load profile")
        if self.max_num_seqs is None and self.max_num_queued_reqs is not None:
            raise ConfigError(
                f"{self.option('max_num_queued_reqs')} needs {self.option('max_num_seqs')}"
            )

    @property
    def loaded(self) -> bool:
        """Whether the load model runs (load.py): a running batch is set."""
        return self.max_num_seqs is not None

    @classmethod
    def from_env(
        cls: type[M],
        environ: Mapping[str, str] | None = None,
        prefix: str | None = None,
        **overrides: object,
    ) -> M:
        """ServerConfig.from_env, with a named load profile's numbers (MOCK_LOAD_PROFILE or
        load_profile=) under the variables and overrides: either replaces any of them."""
        environ = os.environ if environ is None else environ
        prefix = cls.env_prefix if prefix is None else prefix
        name = overrides.get("load_profile") or environ.get(prefix + "LOAD_PROFILE")
        if isinstance(name, str) and name in PROFILES:
            base = {prefix + k.upper(): str(v) for k, v in PROFILES[name].settings.items()}
            environ = {**base, **environ}
        return super().from_env(environ, prefix, **overrides)
