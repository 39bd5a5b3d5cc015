"""A Markdown summary for a CI job's own page (GitHub's step summary, a merge request note):
the verdict and the counts first, then the failing checks by cause, each with the field where
its answer departs and a curl line, then the notes. The JSON, JUnit and HTML have the rest."""

from __future__ import annotations

from pathlib import Path

from conformance.engine.results import CheckResult, ExitCode, Outcome, RunReport, exit_code
from conformance.reports.departures import where
from conformance.reports.scrub import Scrubber
from contract.version import describe

CAUSES_SHOWN = 30  # causes of failure listed; the other reports list every check
CHECKS_NAMED = 6  # checks named for one cause
ICON = {
    ExitCode.CONFORMANT: "✅",
    ExitCode.FAILED: "❌",
    ExitCode.USAGE: "⚠️",
    ExitCode.NOT_PROVEN: "🟠",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cause(results: list[CheckResult]) -> list[str]:
    first = results[0]
    finding = first.findings[0] if first.findings else None
    names = ", ".join(f"`{r.id}`" for r in results[:CHECKS_NAMED])
    more = f" and {len(results) - CHECKS_NAMED} more" if len(results) > CHECKS_NAMED else ""
    lines = [f"- **{_cell(finding.message if finding else first.reason)}** ({names}{more})"]
    if finding is not None:
        lines += [f"  - differs at `{line}`" for line in where(finding)]
        if finding.exchange is not None:
            lines += ["", "  ```sh", f"  {finding.exchange.curl()}", "  ```"]
    return lines


def render_markdown(report: RunReport) -> str:
    from conformance.reports.console import by_cause

    code = exit_code(report)
    lines = [
        f"## {ICON[code]} Conformance of {report.base_url or '(no deployment)'}: {code.verdict}",
        "",
        f"model `{report.model}`, profile `{report.profile}`, {len(report.results)} checks in "
        f"{report.duration:.1f} s; the server generated {report.tokens} tokens (ceiling "
        f"{report.token_ceiling}); exit code {int(code)}",
        "",
    ]
    lines += [f"> **error:** {_cell(e)}" for e in report.run_errors]
    if report.results:
        lines += ["| " + " | ".join(o.value for o in Outcome) + " |"]
        lines += ["|" + "---:|" * len(Outcome)]
        lines += ["| " + " | ".join(str(report.count(o)) for o in Outcome) + " |", ""]
    causes = by_cause(report.failed)
    if causes:
        lines += [f"### Failed ({len(report.failed)} checks, {len(causes)} causes)", ""]
        for _, results in causes[:CAUSES_SHOWN]:
            lines += _cause(results)
        if len(causes) > CAUSES_SHOWN:
            lines.append(f"- … and {len(causes) - CAUSES_SHOWN} more causes (the HTML report)")
        lines.append("")
    for r in report.results:
        if r.outcome is Outcome.ERROR:
            lines.append(f"- tool error in `{r.id}`: {_cell(r.reason.splitlines()[0])}")
    notes = [*report.ceiling_note().splitlines(), *report.notes()]
    if notes:
        lines += ["### Notes", "", *(f"- {_cell(n)}" for n in notes), ""]
    if report.versions:
        lines.append(f"checked with {describe(report.versions)}")
    return "\n".join(lines) + "\n"


def write_markdown(report: RunReport, path: str | Path) -> None:
    Scrubber(report.secrets).write(path, render_markdown(report))
