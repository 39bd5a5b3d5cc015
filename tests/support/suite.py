"""The suite run in process against a URL, as the tests of broken servers run it, and what failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import RunReport
from conformance.engine.runner import run

KEY = "suite-test-key"  # the mock takes any key


def run_suite(
    url: str, *patterns: str, profile: str = "full", key: str = KEY, **options: Any
) -> RunReport:
    """The checks of `profile` matching `patterns` against `url`; `options` are RunConfig's."""
    config = RunConfig(url, key, profile=profile, select=patterns, **options)
    return run(config, select(REGISTRY, config))


def failed_ids(report: RunReport) -> set[str]:
    """The failed checks' ids; a tool error is the test's failure, never a finding."""
    assert not report.errors, [(r.id, r.reason) for r in report.errors]
    return {r.id for r in report.failed}


def failed(report: RunReport) -> dict[str, list[str]]:
    """Each failed check's finding messages; no tool error."""
    assert not report.errors, [(r.id, r.reason) for r in report.errors]
    return {r.id: [f.message for f in r.findings] for r in report.failed}


def run_embedded(url: str, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The suite inside pytest, as a deployment embeds it (conformance/pytest_plugin.py)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "conformance.pytest_plugin",
            "--pyargs",
            "conformance.pytest_suite",
            "-p",
            "no:cacheprovider",
            "-q",
            "--conformance-base-url",
            url,
            "--conformance-api-key",
            key,
            *args,
        ],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
    )
