"""The reports of `python -m conformance diff`: JSON (every difference) and one HTML page
with the two answers side by side."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from conformance.engine.diff import DiffReport, where_differs
from conformance.reports.scrub import Scrubber


def write_diff_json(report: DiffReport, path: str | Path) -> None:
    Scrubber(report.secrets).write(path, json.dumps(report.to_dict(), indent=2, default=str))


def write_diff_html(report: DiffReport, path: str | Path) -> None:
    Scrubber(report.secrets).write(path, render_diff_html(report))


def _pre(value: Any) -> str:
    return f"<pre>{escape(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))}</pre>"


def _field(name: str, a: Any, b: Any) -> str:
    """One differing field: its name, then A's and B's values of it alone (a shape: where the
    two shapes part, not the whole of each)."""
    if name == "shape":
        where, a, b = where_differs(a, b)
        name = f"shape: {where}"
    return f"<tr><td>{escape(name)}</td><td>{_pre(a)}</td><td>{_pre(b)}</td></tr>"


def _counts(title: str, counts: Any) -> str:
    items = ", ".join(f"{escape(str(k))} &times;{v}" for k, v in counts.most_common())
    return f"<p><b>{title}:</b> {items or '&mdash;'}</p>"


def render_diff_html(report: DiffReport) -> str:
    """The verdict and the counts first; then each differing request with only the fields that
    differ, side by side; then the requests only one side answered. Read at 1,400 px: long
    values wrap anywhere, the columns keep their widths."""
    rows = "".join(
        f"<section><h3>{escape(d['request']['check'])} <code>{escape(d['request']['method'])} "
        f"{escape(d['request']['path'])}</code></h3>"
        f"<details><summary>request body</summary>{_pre(d['request']['body'])}</details>"
        "<table><colgroup><col class=f><col><col></colgroup>"
        "<tr><th>field</th><th>A</th><th>B</th></tr>"
        + "".join(_field(f, d["a"][f], d["b"][f]) for f in d["fields"])
        + "</table></section>"
        for d in report.differing
    )
    only = "".join(
        f"<li>only in {side}: {escape(i['request']['check'])} <code>{escape(i['request']['method'])} "
        f"{escape(i['request']['path'])}</code></li>"
        for side, items in (("A", report.only_a), ("B", report.only_b))
        for i in items
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Diff: {escape(report.a_url)} / {escape(report.b_url)}</title>
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:2em;max-width:1400px}}
table{{border-collapse:collapse;width:100%;table-layout:fixed}} col.f{{width:14em}}
td,th{{border:1px solid #ccc;vertical-align:top;padding:4px;text-align:left}}
pre{{white-space:pre-wrap;overflow-wrap:anywhere;margin:0;max-height:24em;overflow:auto}}
section{{margin:1.5em 0}} h3{{font-size:1em;margin:.3em 0}}</style>
</head><body>
<h1>{len(report.differing)} of {report.paired} requests answered differently</h1>
<p>A: <b>{escape(report.a_url)}</b>, B: <b>{escape(report.b_url)}</b>; {len(report.only_a)} only in A,
{len(report.only_b)} only in B; exit code {int(report.exit_code)}.</p>
{_counts("by status (A&rarr;B)", report.by_status())}
{_counts("by field", report.by_field())}
<h2>Requests answered differently</h2>
{rows or "<p>none</p>"}
<h2>Requests only one side answered</h2>
<ul>{only or "<li>none</li>"}</ul>
</body></html>
"""
