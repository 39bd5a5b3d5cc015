"""The server's settings: one dataclass, filled from <PREFIX>_* environment variables.

Both servers of the API share these (keys, Budget, keepalive, max_model_len); the
mock's MockConfig adds its simulated latency and faults on top. Defaults that the
API fixes (the keepalive interval) are read from the spec, so that nothing here can
drift from openapi.yaml.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, TypeVar

from contract import spec

C = TypeVar("C", bound="ServerConfig")


def _keepalive_default() -> float:
    return float(spec().caps["keepalive_seconds"])


def _body_read_default() -> float:
    return float(spec().caps["body_read_seconds"])


@dataclass(frozen=True)
class ServerConfig:
    # The environment variables' prefix (MockConfig: MOCK_).
    env_prefix: ClassVar[str] = ""
    # None accepts any non-empty Bearer key; a tuple accepts only those keys.
    keys: tuple[str, ...] | None = None
    # Tokens each key may use; None is unlimited.
    budget_tokens: int | None = None
    # Where the Budget's SQLite file lives; shared by every worker of one server.
    budget_dir: str | None = None
    # redis://host:port/db: the Budget in Redis, shared by replicas (budget_store.py).
    budget_url: str | None = None
    keepalive_seconds: float = field(default_factory=_keepalive_default)
    # The longest a client may leave a read (its headers or body) silent: then 400 and
    # close (api-decisions.md, Hostile input). Short in tests; the worker applies it.
    body_read_seconds: float = field(default_factory=_body_read_default)
    # A deployment's max_model_len per model name (the spec's value otherwise).
    max_model_len: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_env(cls: type[C], environ: Mapping[str, str] | None = None,
                 prefix: str | None = None, **overrides: object) -> C:
        """Settings from `prefix`+NAME variables (MOCK_BUDGET_TOKENS=1000, MOCK_KEYS=a,b);
        the prefix is the class's env_prefix unless given."""
        environ = os.environ if environ is None else environ
        prefix = cls.env_prefix if prefix is None else prefix
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(prefix + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


def _parse(name: str, raw: str) -> object:
    if name == "keys":
        return parse_keys(raw)
    if name in ("budget_dir", "budget_url"):
        return raw
    if name == "budget_tokens":
        return int(raw)
    if name == "max_model_len":
        return parse_max_model_len(raw)
    return float(raw)


def parse_keys(raw: str) -> tuple[str, ...]:
    """`a,b`: the accepted API keys."""
    return tuple(k.strip() for k in raw.split(",") if k.strip())


def parse_max_model_len(raw: str) -> dict[str, int]:
    """`llama-8b=4096,other=2048`, or one number for every model of the spec."""
    raw = raw.strip()
    if "=" not in raw:
        return {name: int(raw) for name in spec().models}
    pairs = (item.split("=", 1) for item in raw.split(",") if item.strip())
    return {name.strip(): int(value) for name, value in pairs}
