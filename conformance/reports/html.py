"""One self-contained HTML page (inline CSS, no scripts, no external assets).

A summary, then each check; for a failure, each finding with the request and
the expected and received responses side by side.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from conformance.engine.results import CheckResult, Finding, Outcome, RunReport
from conformance.reports.scrub import Scrubber
from contract.version import describe

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em}
table{border-collapse:collapse}td,th{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}
.passed{color:#17713a}.failed{color:#b3261e}.warned{color:#b35c00}.skipped{color:#8a6d00}.unproven{color:#b35c00}.error{color:#6a1b9a}
details{margin:.3em 0;border:1px solid #ddd;border-radius:4px;padding:.3em .7em}
details.failed{border-color:#e3a29c;background:#fff8f7}details.error{border-color:#c9a3d9}
summary{cursor:pointer;font-family:ui-monospace,monospace}
.finding{margin:.8em 0;padding-top:.5em;border-top:1px dashed #ccc}
.side{display:grid;grid-template-columns:1fr 1fr;gap:1em}
pre{background:#f6f6f6;padding:.6em;overflow:auto;max-height:28em;white-space:pre-wrap;
word-break:break-all;margin:.2em 0}
.label{font-weight:600;font-size:.85em;color:#555}.doc{color:#555}
"""


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            return json.dumps(json.loads(value), indent=2)
        except ValueError:
            return value
    return json.dumps(value, indent=2, default=str)


def _pre(label: str, value: Any) -> str:
    return f'<div><div class="label">{escape(label)}</div><pre>{escape(_pretty(value))}</pre></div>'


def _finding(f: Finding, repeated: bool = False) -> str:
    """One finding; `repeated`: its exchange was shown with an earlier finding of the check."""
    out = [f'<div class="finding"><b>{escape(f.message)}</b>']
    ex = f.exchange
    if ex is not None and not repeated:
        req = f"{ex.method} {ex.url}\n" + "\n".join(
            f"{k}: {v}" for k, v in ex.request_headers.items()
        )
        if ex.request_body:
            req += "\n\n" + _pretty(ex.request_body)
        out.append(_pre("request", req))
    received: Any = f.received
    if ex is not None and ex.status is not None:
        received = (
            {"status": ex.status, "body": _maybe_json(ex.response_body)}
            if received is None
            else received
        )
    elif ex is not None and ex.error:
        received = {"no response": ex.error}
    out.append(
        '<div class="side">' + _pre("expected", f.expected) + _pre("received", received) + "</div>"
    )
    if ex is not None and ex.status is not None and f.received is not None and not repeated:
        out.append(_pre(f"whole response ({ex.status})", _maybe_json(ex.response_body)))
    out.append("</div>")
    return "".join(out)


def _maybe_json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _result(r: CheckResult) -> str:
    head = (
        f'<summary><span class="{r.outcome.value}">{r.outcome.value.upper()}</span> '
        f"{escape(r.id)}</summary>"
    )
    body = [f'<p class="doc">{escape(r.doc)}</p>'] if r.doc else []
    if r.reason:
        body.append(_pre("tool error" if r.outcome is Outcome.ERROR else "reason", r.reason))
    body += [
        _finding(f, any(g.exchange is f.exchange for g in r.findings[:i]))
        for i, f in enumerate(r.findings)
    ]
    is_open = " open" if r.outcome in (Outcome.FAILED, Outcome.ERROR) else ""
    return f'<details class="{r.outcome.value}"{is_open}>{head}{"".join(body)}</details>'


def _coverage(coverage: dict[str, Any] | None) -> str:
    """Spec coverage: each category's share, and what was not covered."""
    if not coverage:
        return ""
    rows = "".join(
        f"<tr><td>{escape(cat)}</td><td>{c['covered']}/{c['total']}</td><td>{c['percent']:g}%</td>"
        f"<td>{escape(', '.join(c['not_covered'])) or '&mdash;'}</td></tr>"
        for cat, c in coverage.items()
    )
    return (
        "<h2>Spec coverage</h2><table><tr><th>category</th><th>covered</th><th>%</th>"
        f"<th>not covered</th></tr>{rows}</table>"
    )


def _listed(lines: list[str]) -> str:
    """The baseline's findings (NEW, FIXED), folded below the summary: a run adopting a
    baseline may list hundreds."""
    if not lines:
        return ""
    return (
        f"<details><summary>the baseline's findings, one a line ({len(lines)})</summary>"
        f"<pre>{escape(chr(10).join(line.strip() for line in lines))}</pre></details>"
    )


def render(report: RunReport) -> str:
    from conformance.engine.results import exit_code

    counts = "".join(
        f'<tr><td class="{o.value}">{o.value}</td><td>{report.count(o)}</td></tr>' for o in Outcome
    )
    groups: dict[str, dict[str, int]] = {}
    for r in report.results:
        groups.setdefault(r.group, {o.value: 0 for o in Outcome})[r.outcome.value] += 1
    group_rows = "".join(
        f"<tr><td>{escape(g)}</td>"
        + "".join(f'<td class="{o}">{n}</td>' for o, n in c.items())
        + "</tr>"
        for g, c in groups.items()
    )
    order = {
        Outcome.FAILED: 0,
        Outcome.ERROR: 1,
        Outcome.UNPROVEN: 2,
        Outcome.WARNED: 3,
        Outcome.SKIPPED: 4,
        Outcome.PASSED: 5,
    }
    results = sorted(report.results, key=lambda r: order[r.outcome])
    verdict = exit_code(report).verdict
    notes = report.notes()
    listed = [n for n in notes if n.startswith("  ")]  # the baseline's findings, one a line
    errors = "".join(f'<p class="error"><b>error:</b> {escape(e)}</p>' for e in report.run_errors)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Conformance: {escape(report.base_url)}</title>
<style>{CSS}</style></head><body>
<h1>Conformance of {escape(report.base_url)}: {verdict}</h1>
<p>model <b>{escape(report.model)}</b> ({escape(report.context_said())}), profile
<b>{escape(report.profile)}</b>, {report.duration:.1f} s, {report.tokens} generated tokens
(ceiling {report.token_ceiling}), exit code {int(exit_code(report))}.</p>
{errors}
<table>{counts}</table>
{"".join(f'<p class="skipped">{escape(line)}</p>' for line in report.ceiling_note().splitlines())}
{"".join(f"<p>{escape(line)}</p>" for line in notes if not line.startswith("  "))}
{_listed(listed)}
<p>checked with {escape(describe(report.versions))}.</p>
<h2>By group</h2>
<table><tr><th>group</th>{"".join(f"<th>{o.value}</th>" for o in Outcome)}</tr>{group_rows}</table>
{_coverage(report.coverage)}
<h2>Checks</h2>
{"".join(_result(r) for r in results)}
</body></html>
"""


def write_html(report: RunReport, path: str | Path) -> None:
    Scrubber(report.secrets).write(path, render(report))
