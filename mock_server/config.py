"""The mock's settings: one dataclass, filled from MOCK_* environment variables.

Defaults that the API fixes (the keepalive interval) are read from the spec, so
that nothing here can drift from openapi.yaml.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from contract import spec

ENV_PREFIX = "MOCK_"


def _keepalive_default() -> float:
    return float(spec().caps["keepalive_seconds"])


@dataclass(frozen=True)
class MockConfig:
    # None accepts any non-empty Bearer key; a tuple accepts only those keys.
    keys: tuple[str, ...] | None = None
    # Tokens each key may use; None is unlimited.
    budget_tokens: int | None = None
    # Where the Budget's SQLite file lives; shared by every worker of one server.
    budget_dir: str | None = None
    # redis://host:port/db: the Budget in Redis, shared by replicas (budget_store.py).
    budget_url: str | None = None
    # Simulated latency, overridable per request by X-Mock-Ttft-Ms / X-Mock-Tpot-Ms.
    ttft_ms: float = 0.0
    tpot_ms: float = 0.0
    keepalive_seconds: float = field(default_factory=_keepalive_default)
    # Random faults, for client developers testing retries (fractions of requests).
    fault_rate: float = 0.0
    stream_error_rate: float = 0.0
    # How often the fake model ends a choice with an end-of-text token (per token).
    eos_rate: float = 1 / 64
    # A deployment's max_model_len per model name (the spec's value otherwise).
    max_model_len: Mapping[str, int] = field(default_factory=dict)
    # Read the mock's own X-Mock-* headers (faults and latency on request). A server of
    # the real API (reference_impl) turns this off: then the headers are ignored entirely.
    test_headers: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None,
                 prefix: str = ENV_PREFIX, **overrides: object) -> "MockConfig":
        """Settings from `prefix`+NAME variables (MOCK_BUDGET_TOKENS=1000, MOCK_KEYS=a,b)."""
        environ = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(prefix + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    def to_env(self, prefix: str = ENV_PREFIX) -> dict[str, str]:
        """The inverse of from_env, for handing the settings to another process."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name == "keys":
                out[prefix + "KEYS"] = ",".join(value)
            elif f.name == "max_model_len":
                if value:
                    out[prefix + "MAX_MODEL_LEN"] = ",".join(f"{k}={v}" for k, v in value.items())
            else:
                out[prefix + f.name.upper()] = str(value)
        return out


def _parse(name: str, raw: str) -> object:
    if name == "keys":
        return tuple(k.strip() for k in raw.split(",") if k.strip())
    if name in ("budget_dir", "budget_url"):
        return raw
    if name == "budget_tokens":
        return int(raw)
    if name == "max_model_len":
        return parse_max_model_len(raw)
    if name == "test_headers":
        return parse_bool(name, raw)
    return float(raw)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in _TRUE + _FALSE:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}: expected one of {', '.join(_TRUE + _FALSE)}, not {raw!r}")
    return value in _TRUE


def parse_max_model_len(raw: str) -> dict[str, int]:
    """`llama-8b=4096,other=2048`, or one number for every model of the spec."""
    raw = raw.strip()
    if "=" not in raw:
        return {name: int(raw) for name in spec().models}
    pairs = (item.split("=", 1) for item in raw.split(",") if item.strip())
    return {name.strip(): int(value) for name, value in pairs}
