"""--baseline PREVIOUS.json: a JSON report of an earlier run; only findings it does not list
fail this run.

A finding is known when the baseline has a finding of the same check that says the same:
its message, what it expected and what it received, each once its volatile parts (request
and completion ids, hex tokens, times, large numbers) are masked. So a check that failed
for one reason and now fails for another has a new finding, and so has one whose message
is the same ("the body differs") over another body (the masking is conformance.volatile's). A report whose findings lack
`expected` and `received` (none that this suite writes) is refused as a baseline. Every finding of the baseline counts, warnings too (a run under --strict may
adopt a baseline written without it).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.config import ConfigError
from conformance.results import Outcome, RunReport
from conformance.volatile import masked
from contract import Spec

SPEC_VERSION = "openapi.yaml"      # the key of the spec's version in a report's versions


def _key(api: Spec, check: str, finding: dict[str, Any]) -> tuple[str, ...]:
    said = (json.dumps(finding.get(k), sort_keys=True, ensure_ascii=False, default=str)
            for k in ("expected", "received"))
    return (check, masked(api, finding["message"]), *(masked(api, s) for s in said))


def load(path: str, spec_version: str) -> list[dict[str, Any]]:
    """The baseline's findings as {check, message, expected, received}; ConfigError (exit 2) for a file that is not
    a JSON report of this suite, or one of another spec version."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--baseline {path}: cannot read it: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"--baseline {path}: not a JSON report of this suite (not JSON: {exc})") from exc
    if not (isinstance(data, dict) and isinstance(data.get("results"), list)
            and isinstance(data.get("versions"), dict) and isinstance(data.get("summary"), dict)):
        raise ConfigError(f"--baseline {path}: not a JSON report of this suite (no summary, versions "
                          "and results; write one with --json)")
    theirs = data["versions"].get(SPEC_VERSION)
    if theirs != spec_version:
        raise ConfigError(f"--baseline {path}: a report of spec version {theirs}; this run checks "
                          f"spec version {spec_version}")
    found = []
    for result in data["results"]:
        if not isinstance(result, dict) or not isinstance(result.get("findings"), list):
            raise ConfigError(f"--baseline {path}: not a JSON report of this suite (a result without findings)")
        for f in result["findings"]:
            if not (isinstance(f, dict) and "expected" in f and "received" in f):
                raise ConfigError(f"--baseline {path}: a finding of {result.get('id')} without `expected` and "
                                  "`received`, which findings are matched on: write the baseline again with --json")
            found.append({"check": str(result.get("id")), "message": str(f.get("message")),
                          "expected": f["expected"], "received": f["received"]})
    return found


def compare(report: RunReport, baseline: list[dict[str, str]], path: str, api: Spec) -> dict[str, Any]:
    """New, still failing and fixed findings: this run's findings of failed checks against the
    baseline's (warnings of a warned check are neither: they fail nothing)."""
    def said(check: str, f: Any) -> dict[str, Any]:
        return {"check": check, "message": f.message, "expected": f.expected, "received": f.received}
    now = [said(r.id, f) for r in report.results if r.outcome is Outcome.FAILED for f in r.findings]
    known = {_key(api, f["check"], f) for f in baseline}
    current = {_key(api, r.id, said(r.id, f)) for r in report.results for f in r.findings}
    return {"file": path,
            "new": [f for f in now if _key(api, f["check"], f) not in known],
            "still": [f for f in now if _key(api, f["check"], f) in known],
            "fixed": [f for f in baseline if _key(api, f["check"], f) not in current]}
