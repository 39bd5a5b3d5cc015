"""The server's settings: one dataclass, filled from <PREFIX>_* environment variables.

Both servers of the API share these (keys, Budget, keepalive, max_model_len); the
mock's MockConfig adds its simulated latency and faults on top. Settings that the
API fixes by default (the keepalive interval, the body-read timeout) are None until
`for_spec` fills them from the app's own Spec (create_app does), so that nothing here
can drift from the openapi.yaml an app is built over.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from contract import Spec

C = TypeVar("C", bound="ServerConfig")

# With keepalives off (keepalive_seconds 0, as vLLM's 0 means), a quiet stream's engine
# still hands back this often (Engine.stream's interval), and the route writes nothing.
QUIET_WAKE_S = 60.0


class ConfigError(ValueError):
    """A setting out of its range; the message names the option (and its variable)."""


@dataclass(frozen=True)
class Bound:
    """The range of a numeric setting: at least `low` (above it when not `low_ok`), at
    most `high` when given; always finite."""

    low: float
    low_ok: bool = True
    high: float | None = None
    note: str = ""

    def holds(self, value: float) -> bool:
        return (
            math.isfinite(value)
            and (value >= self.low if self.low_ok else value > self.low)
            and (self.high is None or value <= self.high)
        )

    def __str__(self) -> str:
        if self.high is not None:
            return f"between {self.low:g} and {self.high:g}"
        return f"{'>=' if self.low_ok else '>'} {self.low:g}{self.note}"


AT_LEAST_0 = Bound(0)
ABOVE_0 = Bound(0, low_ok=False)
FRACTION = Bound(0, high=1)


# The settings whose default is an x-caps value of the app's spec (None until for_spec).
SPEC_DEFAULTS = {"keepalive_seconds": "keepalive_seconds", "body_read_seconds": "body_read_seconds"}


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
    # redis://host:port/db: the Budget in Redis, shared by replicas (api_server/budget).
    budget_url: str | None = None
    # None: the spec's x-caps.keepalive_seconds (for_spec).
    keepalive_seconds: float | None = None
    # The longest a client may leave a read (its headers or body) silent: then 400 and
    # close (api-decisions.md, Hostile input). Short in tests; the worker applies it.
    # None: the spec's x-caps.body_read_seconds (for_spec).
    body_read_seconds: float | None = None
    # A deployment's max_model_len per model name (the spec's value otherwise).
    max_model_len: Mapping[str, int] = field(default_factory=dict)

    # The range of each numeric setting, checked whenever a config is made, so that a bad
    # option or variable fails at start with its name; a subclass adds its own.
    bounds: ClassVar[Mapping[str, Bound]] = {
        "budget_tokens": AT_LEAST_0,
        "keepalive_seconds": Bound(0, note=" (0 turns keepalives off)"),
        "body_read_seconds": ABOVE_0,
    }

    def __post_init__(self) -> None:
        # keys: a string is read as --keys reads it (`a,b`), never matched as a substring; any
        # other collection becomes a tuple of strings, or the config is refused
        keys = self.keys
        if isinstance(keys, str):
            object.__setattr__(self, "keys", parse_keys(keys))
        elif keys is not None:
            if not all(isinstance(k, str) and k for k in keys):
                raise ConfigError(f"{self.option('keys')} must be keys (strings), got {keys!r}")
            object.__setattr__(self, "keys", tuple(keys))
        for name, bound in self.bounds.items():
            value = getattr(self, name)
            if value is not None and not bound.holds(value):
                raise ConfigError(f"{self.option(name)} must be {bound}, got {value!r}")
        for model, length in self.max_model_len.items():
            if length < 1:
                raise ConfigError(
                    f"{self.option('max_model_len')} must be >= 1, got {model}={length}"
                )

    def for_spec(self: C, api: Spec) -> C:
        """This config with the settings left to the spec (None) taken from `api`'s x-caps."""
        unset: dict[str, Any] = {
            name: float(api.caps[cap])
            for name, cap in SPEC_DEFAULTS.items()
            if getattr(self, name) is None
        }
        return dataclasses.replace(self, **unset) if unset else self

    @classmethod
    def option(cls, name: str) -> str:
        """A setting's command-line option, with its variable: `--ttft-ms (MOCK_TTFT_MS)`."""
        flag = "--" + name.replace("_", "-")
        return f"{flag} ({cls.env_prefix}{name.upper()})" if cls.env_prefix else flag

    @property
    def keepalive(self) -> bool:
        """Whether a quiet stream sends `: keepalive` (keepalive_seconds 0: never)."""
        return self._given("keepalive_seconds") > 0

    @property
    def stream_interval(self) -> float:
        """The longest a stream's engine waits before handing back (Engine.stream's
        interval): the keepalive interval, or QUIET_WAKE_S with keepalives off."""
        return self._given("keepalive_seconds") if self.keepalive else QUIET_WAKE_S

    def _given(self, name: str) -> float:
        value = getattr(self, name)
        if value is None:
            raise RuntimeError(
                f"ServerConfig.{name} is the spec's until for_spec(spec) fills it (create_app does)"
            )
        return float(value)

    @classmethod
    def from_env(
        cls: type[C],
        environ: Mapping[str, str] | None = None,
        prefix: str | None = None,
        **overrides: object,
    ) -> C:
        """Settings from `prefix`+NAME variables (MOCK_BUDGET_TOKENS=1000, MOCK_KEYS=a,b);
        the prefix is the class's env_prefix unless given."""
        environ = os.environ if environ is None else environ
        prefix = cls.env_prefix if prefix is None else prefix
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(prefix + f.name.upper())
            if raw is not None and raw != "":
                try:
                    values[f.name] = _parse(f.name, str(f.type), raw)
                except ValueError:
                    raise ConfigError(f"{prefix}{f.name.upper()} is not valid: {raw!r}") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


BOOLEANS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def _parse(name: str, kind: str, raw: str) -> object:
    """A variable's value, by its field's name and annotation (`int | None`, `float`...)."""
    if name == "keys":
        return parse_keys(raw)
    if name == "max_model_len":
        return parse_max_model_len(raw)
    types = set(kind.replace(" ", "").split("|"))
    if "bool" in types:
        if raw.lower() not in BOOLEANS:
            raise ValueError(raw)
        return BOOLEANS[raw.lower()]
    if "str" in types:
        return raw
    if "int" in types:
        return int(raw)
    return float(raw)


def parse_keys(raw: str) -> tuple[str, ...]:
    """`a,b`: the accepted API keys."""
    return tuple(k.strip() for k in raw.split(",") if k.strip())


EVERY_MODEL = "*"  # max_model_len's key for every model the app serves (one number given)


def parse_max_model_len(raw: str) -> dict[str, int]:
    """`llama-8b=4096,other=2048`, or one number for every model the app serves (EVERY_MODEL:
    which models those are is the app's spec's, known only when it is built)."""
    raw = raw.strip()
    if "=" not in raw:
        return {EVERY_MODEL: int(raw)}
    pairs = (item.split("=", 1) for item in raw.split(",") if item.strip())
    return {name.strip(): int(value) for name, value in pairs}
