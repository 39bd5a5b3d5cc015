"""JUnit XML, built with xml.etree: one testcase per check, classname = its group.

A finding is a <failure>; a tool error is an <error> (CI systems show them apart). A
warned check (a front's own words) passes, its warnings in <system-out> and a property
`warning`; the baseline's and the rate limit's notes are properties of the suite.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from conformance.engine.results import CheckResult, Outcome, RunReport
from conformance.reports.departures import where
from conformance.reports.scrub import Scrubber


def finding_text(result: CheckResult) -> str:
    """Each finding as a CI log shows it: its line, where the answer departs from what was
    expected (each field), what was expected and received, and a curl line that sends it again."""
    parts = []
    for f in result.findings:
        parts.append(f"- {f.message}")
        parts += [f"  differs at {line}" for line in where(f)]
        if f.expected is not None:
            parts.append(f"  expected: {json.dumps(f.expected, default=str)[:2000]}")
        if f.received is not None:
            parts.append(f"  received: {json.dumps(f.received, default=str)[:2000]}")
        if f.exchange is not None:
            parts.append(f"  request: {f.exchange.method} {f.exchange.url}")
            parts.append(f"  again: {f.exchange.curl()}")
    return "\n".join(parts)


def known(report: RunReport) -> set[str]:
    """With --baseline, the failed checks whose every finding the baseline lists: the run does
    not fail for them, so neither does a JUnit publisher (they are <skipped>, with the word)."""
    if report.baseline is None:
        return set()
    new = {f["check"] for f in report.baseline["new"]}
    return {r.id for r in report.failed if r.id not in new}


def build(report: RunReport) -> ET.Element:
    baselined = known(report)
    baseline_file = report.baseline["file"] if report.baseline else ""
    suite = ET.Element(
        "testsuite",
        {
            "name": f"conformance ({report.profile})",
            "tests": str(len(report.results) + len(report.run_errors)),
            "failures": str(
                report.count(Outcome.FAILED) - len(baselined) + report.count(Outcome.UNPROVEN)
            ),
            "warnings": str(report.count(Outcome.WARNED)),
            "errors": str(report.count(Outcome.ERROR) + len(report.run_errors)),
            "skipped": str(report.count(Outcome.SKIPPED) + len(baselined)),
            "time": f"{report.duration:.3f}",
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("base_url", report.base_url),
        ("model", report.model),
        ("tokens", report.tokens),
        ("token_ceiling", report.token_ceiling),
        ("token_plan", report.token_plan),
        *((f"version:{n}", v) for n, v in report.versions.items()),
    ):
        ET.SubElement(props, "property", {"name": name, "value": str(value)})
    for i, note in enumerate(report.ceiling_notes):
        ET.SubElement(props, "property", {"name": f"ceiling_note_{i}", "value": note})
    for i, note in enumerate(report.notes()):
        ET.SubElement(props, "property", {"name": f"note_{i}", "value": note})
    if report.ceiling_skipped:
        ET.SubElement(
            props,
            "property",
            {"name": "skipped_for_ceiling", "value": ",".join(report.ceiling_skipped)},
        )
        ET.SubElement(
            props, "property", {"name": "token_ceiling_needed", "value": str(report.ceiling_needed)}
        )
    for error in report.run_errors:  # the run's own (exit 2): a CI publisher shows it red
        case = ET.SubElement(suite, "testcase", {"classname": "conformance", "name": "run"})
        ET.SubElement(case, "error", {"message": error[:500]}).text = error
    for r in report.results:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": f"conformance.{r.group}", "name": r.id, "time": f"{r.duration:.3f}"},
        )
        if r.id in baselined:  # shown, never hidden: the finding stands, the run does not fail
            el = ET.SubElement(
                case,
                "skipped",
                {
                    "message": f"known finding (--baseline {baseline_file}): "
                    + (r.findings[0].message[:400] if r.findings else ""),
                    "type": "baseline",
                },
            )
            el.text = finding_text(r)
        elif r.outcome is Outcome.FAILED:
            el = ET.SubElement(
                case, "failure", {"message": r.findings[0].message[:500] if r.findings else ""}
            )
            el.text = finding_text(r)
        elif r.outcome is Outcome.WARNED:
            case_props = ET.SubElement(case, "properties")
            ET.SubElement(
                case_props, "property", {"name": "warning", "value": r.findings[0].message[:500]}
            )
            ET.SubElement(case, "system-out").text = (
                "WARNING (not counted; --strict counts it)\n" + finding_text(r)
            )
        elif r.outcome is Outcome.ERROR:
            el = ET.SubElement(
                case, "error", {"message": r.reason.splitlines()[0][:500] if r.reason else ""}
            )
            el.text = r.reason
        elif r.outcome is Outcome.SKIPPED:
            ET.SubElement(case, "skipped", {"message": r.reason})
        elif r.outcome is Outcome.UNPROVEN:  # the server's doing: it fails the gate (exit code 3)
            ET.SubElement(
                case, "failure", {"message": f"not proven: {r.reason}"[:500], "type": "unproven"}
            )
    return suite


def write_junit(report: RunReport, path: str | Path) -> None:
    root = ET.Element("testsuites")
    root.append(build(report))
    ET.indent(root)
    Scrubber(report.secrets).write(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))
