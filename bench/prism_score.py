"""Score Prism (a generic OpenAPI mock of the same openapi.yaml) with the conformance suite.

    .venv/bin/python -m bench prism_score      # writes bench/results/prism_score.md and the README's table

Prism comes from bench/node_modules (bench/package.json pins it; `npm ci
--prefix bench` installs it). It shows what a spec-driven mock misses: the
contract's error bodies, caps and stream rules are not in JSON Schema.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import PRISM_BIN, ROOT, ServerFailed, command_line
from bench.readme_block import replace_block
from bench.report import write_report
from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome, RunReport, exit_code
from conformance.engine.runner import run

OUT = ROOT / "bench" / "results" / "prism_score.md"
README = ROOT / "README.md"
COMMAND = command_line("prism_score", [])
# The README's copy of the score lies between these two lines (rewritten by this script).
BEGIN, END = f"<!-- prism-score: {COMMAND} -->", "<!-- /prism-score -->"


def version() -> str:
    return subprocess.run(
        [str(PRISM_BIN), "--version"], capture_output=True, text=True
    ).stdout.strip()


def summary(report: RunReport) -> str:
    """The score and the table by group: the part the README shows too."""
    groups: dict[str, Counter[str]] = {}
    for r in report.results:
        groups.setdefault(r.group, Counter())[r.outcome.value] += 1
    rows = "\n".join(
        f"| {g} | {c['passed']} | {c['failed']} | {c['skipped']} |" for g, c in groups.items()
    )
    return f"""Prism {version()} (`prism mock openapi.yaml`, static examples) against the full profile:
**{report.count(Outcome.PASSED)} of {len(report.results)} checks pass, {report.count(Outcome.FAILED)} fail,
{report.count(Outcome.SKIPPED)} skipped** (exit code {int(exit_code(report))}). The bundled mock passes them all.

| group | passed | failed | skipped |
| --- | ---: | ---: | ---: |
{rows}"""


def markdown(report: RunReport, command: str) -> str:
    passed = [r.id for r in report.results if r.outcome is Outcome.PASSED]
    first = Counter(r.findings[0].message.split(":")[0][:70] for r in report.failed if r.findings)
    reasons = "\n".join(f"| {n} | {msg} |" for msg, n in first.most_common(12))
    non_golden = "\n".join(
        f"- `{r.id}`: {r.findings[0].message[:140]}"
        for r in report.failed
        if r.group != "golden" and r.findings
    )
    return f"""# Prism scored by the conformance suite

{summary(report)}

Regenerate with `{command}` (per-request timeout 10 s: Prism never answers a
body that is not JSON, and each such request waits for the timeout). The `robust:`
checks run last, against a fresh Prism: a hostile body can end Prism's process.

What a generic spec mock misses, by the first finding of each failed check:

| failed checks | first finding |
| ---: | --- |
{reasons}

Failed checks outside the golden cases:

{non_golden}

What Prism passes: {", ".join(f"`{i}`" for i in passed)}.

In short (checked by hand with curl): Prism validates a request body against the
JSON Schema, so a wrong type gets a 400 in the API's error shape, but filled
with the schema's placeholders (`"message": "string"`, `"code": "string"`,
`"request_id": "string"`, `X-Request-Id: string`); it knows the cross-field
rules and the caps' bounds the schema states (a 400, with placeholders), but none
of the token arithmetic or the 8 MiB body limit (those requests get 200);
it answers `stream: true` with one JSON Completion instead of text/event-stream;
and it never answers a body that is not JSON. A body with a lone surrogate as raw
bytes (ED A0 80) in an unknown key ends Prism's process (`TypeError: Invalid
character in header content ["sl-violations"]`), so every `robust:` check after
`robust:surrogate.raw_bytes` gets no connection. schemathesis alone (the `schema:`
checks) fails it on only a few checks: that is why the golden, caps, stream,
semantics and robust checks exist.
"""


def score(timeout: float, **selection: Any) -> RunReport:
    """The full profile (narrowed by `selection`) against a Prism of its own."""
    prism = harness.prism()
    try:
        prism.run(Path(tempfile.mkdtemp(prefix="bench-prism-")))
        config = RunConfig(prism.url, "any-key", profile="full", timeout=timeout, **selection)
        return run(config, select(REGISTRY, config))
    except ServerFailed as exc:
        raise SystemExit(str(exc)) from None
    finally:
        prism.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args(argv)
    # A hostile body can end Prism's process, which would fail every check after it with
    # "no HTTP response": the robust: group runs last, against a fresh Prism.
    report = score(args.timeout, skip=("robust",))
    report.results += score(args.timeout, select=("robust:*",)).results
    write_report(OUT, markdown(report, COMMAND))
    replace_block(README, BEGIN, END, summary(report))
    print(f"{report.count(Outcome.PASSED)}/{len(report.results)} passed; wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
