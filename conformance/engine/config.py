"""The suite's own settings: what to run against, which checks, and its token ceiling.

The token ceiling lives here, not in openapi.yaml: it is a property of this
tool (how much a run may cost the deployment's owner), not of the API. The
servers never read it, and a deployment may lower or raise it with
--token-ceiling without touching the contract.
"""

from __future__ import annotations

import secrets
import urllib.parse
from dataclasses import dataclass, field, fields
from typing import Any

from contract import Spec, spec

PROFILES = ("quick", "full")

# The most tokens a full run may make the deployment generate, counted from the
# usage the server reports (streams the suite closes early count what arrived).
# A check whose upper bound would pass the ceiling is skipped, with the reason.
# the full profile's plan for a server that does not conform but honours the end tokens, 4,201 to
# 4,280 over the seeds' draws (the drawn probes of issue 63 about 1,340 of it; 2,799 before them;
# 3,689 to 3,768 for one that conforms), and a little room
DEFAULT_TOKEN_CEILING = 4400

# How far a body's `created` may lie outside the suite's clock window of its request:
# the deployment's clock and the suite's may differ (NTP keeps them far closer than this).
CLOCK_SLACK_S = 60


def url_secrets(url: str) -> list[str]:
    """The password in a URL's userinfo, and the values of its query: secrets of a run too."""
    parts = urllib.parse.urlsplit(url)
    found = [parts.password or ""]
    found += [v for _, v in urllib.parse.parse_qsl(parts.query)]
    return [f for f in found if f]


class ConfigError(Exception):
    """Bad usage or configuration (exit code 2)."""


MASK = "***"  # a secret in a config's repr
# What a deployment's base URL must not end with: the suite adds the API's paths (/v1/...).
API_PREFIX = "/v1"
# The options a report records besides the URL (never a key): each changes what runs or how it
# is judged, so `replay` and `diff` read them back. A key given is recorded as given, not as itself.
RECORDED = (
    "model",
    "profile",
    "include",
    "skip",
    "select",
    "exclude",
    "wrong_key_expected",
    "token_ceiling",
    "timeout",
    "schema_examples",
    "stall_seconds",
    "strict",
    "front",
    "rate_limit",
    "metrics_url",
    "seed",
)


@dataclass(frozen=True, repr=False)
class RunConfig:
    base_url: str
    api_key: str
    model: str = ""  # empty: the spec's default model
    profile: str = "quick"
    include: tuple[str, ...] = ()  # tags; empty: every tag
    skip: tuple[str, ...] = ()  # tags
    select: tuple[str, ...] = ()  # check id patterns (fnmatch); empty: all
    exclude: tuple[str, ...] = ()  # check id patterns (fnmatch) left out
    wrong_key_expected: bool = False  # the deployment has keys configured: refuse unknown ones
    exhausted_key: str | None = None  # a key whose Budget cannot hold one token (budget checks)
    token_ceiling: int = DEFAULT_TOKEN_CEILING
    timeout: float = 120.0
    schema_examples: int = 25  # schemathesis max examples per operation and phase
    stall_seconds: float = 0.0  # robust:http.stalled_body waits this long for the server's
    # body-read timeout; 0 skips it (the spec's is 30 s)
    strict: bool = False  # warnings (a front's own words) are findings
    front: str | None = None  # the front the user declared (--front nginx): only its own
    # words are warnings; without one, none is
    rate_limit: float | None = (
        None  # the most requests per second; 429s with Retry-After waited out
    )
    metrics_url: str | None = None  # the deployment's Prometheus /metrics: the metrics:* checks
    # the run's seed: which plain answers get a counted twin (wire.twins); every report prints it,
    # and --seed repeats a run's draws (None: drawn at random)
    seed: int | None = None
    api: Spec = field(
        default_factory=spec, repr=False, compare=False
    )  # the spec it is checked against

    def __post_init__(self) -> None:
        if not self.model:
            object.__setattr__(self, "model", self.api.default_model)
        if self.seed is None:
            object.__setattr__(self, "seed", secrets.randbelow(2**32))

    def __repr__(self) -> str:
        """Every field, the keys and the secrets of the URLs masked: pytest's `-l` and `-vv` print
        a config among a test's locals, into its terminal and its JUnit file."""
        keys = ("api_key", "exhausted_key")
        shown = ", ".join(
            f"{f.name}={MASK if f.name in keys and getattr(self, f.name) else getattr(self, f.name)!r}"
            for f in fields(self)
            if f.repr
        )
        for secret in self.secrets:
            shown = shown.replace(secret, MASK)
        return f"RunConfig({shown})"

    def options(self) -> dict[str, Any]:
        """What a report records of the run's options (RECORDED), a key given as `True`."""
        recorded: dict[str, Any] = {
            name: list(v) if isinstance(v := getattr(self, name), tuple) else v for name in RECORDED
        }
        recorded["exhausted_key"] = self.exhausted_key is not None
        return recorded

    def validate(self) -> RunConfig:
        if self.profile not in PROFILES:
            raise ConfigError(
                f"unknown profile {self.profile!r}: choose one of {', '.join(PROFILES)}"
            )
        if self.model not in self.api.models:
            raise ConfigError(
                f"model {self.model!r} is not in the spec's x-models ({', '.join(self.api.models)})"
            )
        if not self.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"--base-url must be an http(s) URL, not {self.base_url!r}")
        path = urllib.parse.urlsplit(self.base_url).path.rstrip("/")
        if path.endswith(API_PREFIX):
            root = self.base_url.rstrip("/")[: -len(API_PREFIX)]
            raise ConfigError(
                f"--base-url is the deployment's root, without {API_PREFIX} (the suite adds "
                f"{API_PREFIX}/completions): --base-url {root}"
            )
        if self.token_ceiling < 0 or self.schema_examples < 1 or self.timeout <= 0:
            raise ConfigError("--token-ceiling, --schema-examples and --timeout must be positive")
        if self.rate_limit is not None and not self.rate_limit > 0:
            raise ConfigError(
                f"--rate-limit must be above 0 requests per second, not {self.rate_limit:g}"
            )
        return self

    @property
    def secrets(self) -> tuple[str, ...]:
        """What no report may show: the keys, and a password or query value in the base URL
        or the metrics URL (a protected /metrics has its own credentials)."""
        urls = (self.base_url, self.metrics_url or "")
        return tuple(
            s
            for s in (self.api_key, self.exhausted_key, *(s for u in urls for s in url_secrets(u)))
            if s
        )

    @property
    def full(self) -> bool:
        return self.profile == "full"
