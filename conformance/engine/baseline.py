"""--baseline PREVIOUS.json: a JSON report of an earlier run; only findings it does not list
fail this run.

A finding is known when the baseline has a finding of the same check that asserts the same:
its message and what it expected, masked of what an unchanged server says differently each
time (`assertion`): the server's own words quoted after "the server says", any quoted text
(sampled text, a token), numbers but HTTP statuses, and the volatile parts (ids, times) of
conformance.wire.volatile; and where its answer departs (`departures`: each field that differs
from what was expected, with what was expected there). What was received is never matched: a
sampled body differs on every run. So a check that failed for one reason and now fails for
another (another status, another assertion, another field departing, as `param` lost in a body
whose message already differed) has a new finding; the same departure again is still failing. "Fixed"
counts only findings of checks that ran this time (passed, failed or warned).
A report whose findings lack `expected` and `received` (none that this suite writes) is
refused as a baseline. Every finding of the baseline counts, warnings too (a run under
--strict may adopt a baseline written without it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conformance.engine.config import ConfigError
from conformance.engine.context import SAYS
from conformance.engine.events import Event, RunFinished
from conformance.engine.results import Outcome, RunReport
from conformance.wire.volatile import MASK, masked
from contract import Spec

SPEC_VERSION = "openapi.yaml"  # the key of the spec's version in a report's versions


_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")
_STATUS = re.compile(r"[1-5]\d\d")


def assertion(api: Spec, text: str) -> str:
    """`text` (a finding's message, or what it expected as JSON) as what the check asserts:
    the server's words, quoted text and numbers but statuses masked, then the volatile parts."""
    head = text.partition(SAYS)[0]
    head = masked(api, head)
    head = _QUOTED.sub(MASK, head)
    return _NUMBER.sub(lambda m: m.group() if _STATUS.fullmatch(m.group()) else MASK, head)


def departures(api: Spec, expected: Any, received: Any, at: str = "") -> list[str]:
    """Where `received` departs from `expected`: each field's path, with what was expected there
    (masked as `assertion` masks), never what was received (the server's words, a sampled body)."""
    if isinstance(expected, dict) and isinstance(received, dict):
        out = []
        for name in sorted(expected.keys() | received.keys(), key=str):
            path = f"{at}.{name}"
            if name not in received:
                out.append(f"{path}: missing")
            elif name not in expected:
                out.append(f"{path}: not expected")
            else:
                out += departures(api, expected[name], received[name], path)
        return out
    if isinstance(expected, list) and isinstance(received, list):
        if len(expected) != len(received):
            return [f"{at}: {len(expected)} items expected"]
        return [
            d
            for i, (e, r) in enumerate(zip(expected, received, strict=True))
            for d in departures(api, e, r, f"{at}[{i}]")
        ]
    if expected == received:
        return []
    text = json.dumps(expected, sort_keys=True, ensure_ascii=False, default=str)
    return [f"{at or '.'}: {assertion(api, text)}"]


def _key(api: Spec, check: str, finding: dict[str, Any]) -> tuple[str, ...]:
    """What a finding asserts (its message and expectation, masked) and where its answer
    departs: the same assertion departing at another field, or with another expected value
    there, is another finding."""
    expected = json.dumps(finding.get("expected"), sort_keys=True, ensure_ascii=False, default=str)
    where = departures(api, finding.get("expected"), finding.get("received"))
    return (
        check,
        assertion(api, str(finding["message"])),
        assertion(api, expected),
        *sorted(set(where)),
    )


def load(path: str, spec_version: str) -> list[dict[str, Any]]:
    """The baseline's findings as {check, message, expected, received}; ConfigError (exit 2) for a file that is not
    a JSON report of this suite, or one of another spec version."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--baseline {path}: cannot read it: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(
            f"--baseline {path}: not a JSON report of this suite (not JSON: {exc})"
        ) from exc
    if not (
        isinstance(data, dict)
        and isinstance(data.get("results"), list)
        and isinstance(data.get("versions"), dict)
        and isinstance(data.get("summary"), dict)
    ):
        raise ConfigError(
            f"--baseline {path}: not a JSON report of this suite (no summary, versions "
            "and results; write one with --json)"
        )
    theirs = data["versions"].get(SPEC_VERSION)
    if theirs != spec_version:
        raise ConfigError(
            f"--baseline {path}: a report of spec version {theirs}; this run checks "
            f"spec version {spec_version}"
        )
    found = []
    for result in data["results"]:
        if not isinstance(result, dict) or not isinstance(result.get("findings"), list):
            raise ConfigError(
                f"--baseline {path}: not a JSON report of this suite (a result without findings)"
            )
        for f in result["findings"]:
            if not (isinstance(f, dict) and "expected" in f and "received" in f):
                raise ConfigError(
                    f"--baseline {path}: a finding of {result.get('id')} without `expected` and "
                    "`received`, which findings are matched on: write the baseline again with --json"
                )
            found.append(
                {
                    "check": str(result.get("id")),
                    "message": str(f.get("message")),
                    "expected": f["expected"],
                    "received": f["received"],
                }
            )
    return found


def compare(
    report: RunReport, baseline: list[dict[str, str]], path: str, api: Spec
) -> dict[str, Any]:
    """New, still failing and fixed findings: this run's findings of failed checks against the
    baseline's (warnings of a warned check are neither: they fail nothing); fixed, only of
    checks that ran (one skipped, unproven or in error fixed nothing)."""

    def said(check: str, f: Any) -> dict[str, Any]:
        return {
            "check": check,
            "message": f.message,
            "expected": f.expected,
            "received": f.received,
        }

    now = [said(r.id, f) for r in report.results if r.outcome is Outcome.FAILED for f in r.findings]
    ran = {
        r.id
        for r in report.results
        if r.outcome in (Outcome.PASSED, Outcome.FAILED, Outcome.WARNED)
    }
    known = {_key(api, f["check"], f) for f in baseline}
    current = {_key(api, r.id, said(r.id, f)) for r in report.results for f in r.findings}
    return {
        "file": path,
        "new": [f for f in now if _key(api, f["check"], f) not in known],
        "still": [f for f in now if _key(api, f["check"], f) in known],
        "fixed": [
            f for f in baseline if f["check"] in ran and _key(api, f["check"], f) not in current
        ],
    }


class Compared:
    """A handler of the run's events: on RunFinished, the report compared with the baseline
    (`report.baseline`), before the handlers that write or print it."""

    def __init__(self, baseline: list[dict[str, Any]], path: str, api: Spec) -> None:
        self.baseline, self.path, self.api = baseline, path, api

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            event.report.baseline = compare(event.report, self.baseline, self.path, self.api)
