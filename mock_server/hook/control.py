"""Live control: a running mock's latency, fault rates and load model, changed
without a restart by writing a JSON file (--control-file), for chaos tests in CI.

Every worker rereads the file when its modification time or size changes (looked at
no more than once every CHECK_S per worker), so one write reaches all of them. The
file holds any of LIVE's settings, `{"fault_rate": 0.5, "max_num_seqs": 4}`, or a
`load_profile` (its numbers, then the file's others on top); what it leaves out is
the command line's. A file that does not parse, or names another setting, or a value
out of range, is refused as a whole (logged; the settings before it stay); a removed
file brings back the command line's settings.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Any

from api_server.config import ConfigError
from mock_server.config import MockConfig
from mock_server.hook.profiles import PROFILES

log = logging.getLogger("mock_server")

CHECK_S = 0.2
LIVE = (
    "ttft_ms",
    "tpot_ms",
    "fault_rate",
    "stream_error_rate",
    "load_profile",
    "max_num_seqs",
    "max_num_queued_reqs",
    "prefill_ms_per_token",
    "time_factor_under_load",
    "full_load_seqs",
    "jitter",
)


def apply(base: MockConfig, values: Any) -> MockConfig:
    """`base` with the file's settings; ConfigError for anything not LIVE or out of range."""
    if not isinstance(values, dict):
        raise ConfigError("the control file must hold a JSON object")
    unknown = sorted(set(values) - set(LIVE))
    if unknown:
        raise ConfigError(f"not settable live: {', '.join(unknown)} (live: {', '.join(LIVE)})")
    profile = values.get("load_profile")
    under = (
        dict(PROFILES[profile].settings) if isinstance(profile, str) and profile in PROFILES else {}
    )
    try:
        return dataclasses.replace(base, **{**under, **values})
    except TypeError as error:  # a value of the wrong type, compared with a bound
        raise ConfigError(f"a setting of the wrong type: {error}") from None


class Control:
    """The mock's current settings (call it): its config, with the control file's on top."""

    def __init__(self, config: MockConfig) -> None:
        self.base = self.current = config
        self.path = config.control_file
        self._stamp: tuple[int, int] | None = None
        self._checked = float("-inf")

    def __call__(self) -> MockConfig:
        if self.path is not None:
            now = time.monotonic()
            if now - self._checked >= CHECK_S:
                self._checked = now
                self._reload(self.path)
        return self.current

    def _reload(self, path: str) -> None:
        try:
            st = os.stat(path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp == self._stamp:
            return
        self._stamp = stamp
        if stamp is None:
            self.current = self.base
            return
        try:
            with open(path, encoding="utf-8") as f:
                self.current = apply(self.base, json.load(f))
        except (OSError, ValueError) as error:  # ConfigError and JSON's errors are ValueErrors
            log.error("control file %s refused, the settings stay: %s", path, error)
