"""The reports of `python -m conformance diff`: JSON (every difference) and one HTML page
with the two answers side by side."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from conformance.engine.diff import DiffReport
from conformance.reports.scrub import Scrubber


def write_diff_json(report: DiffReport, path: str | Path) -> None:
    Scrubber(report.secrets).write(path, json.dumps(report.to_dict(), indent=2, default=str))


def write_diff_html(report: DiffReport, path: str | Path) -> None:
    Scrubber(report.secrets).write(path, render_diff_html(report))


def _pre(value: Any) -> str:
    return f"<pre>{escape(json.dumps(value, indent=2, sort_keys=True))}</pre>"


def render_diff_html(report: DiffReport) -> str:
    rows = "".join(
        f"<tr><td>{escape(d['request']['check'])}<br><code>{escape(d['request']['method'])} "
        f"{escape(d['request']['path'])}</code>{_pre(d['request']['body'])}</td>"
        f"<td>{escape(', '.join(d['fields']))}</td><td>{_pre(d['a'])}</td><td>{_pre(d['b'])}</td></tr>"
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
<style>body{{font-family:sans-serif}} table{{border-collapse:collapse;width:100%}}
td,th{{border:1px solid #ccc;vertical-align:top;padding:4px}} pre{{white-space:pre-wrap;margin:0}}</style>
</head><body>
<h1>{len(report.differing)} of {report.paired} requests answered differently</h1>
<p>A: <b>{escape(report.a_url)}</b>, B: <b>{escape(report.b_url)}</b>; exit code {int(report.exit_code)}.</p>
<table><tr><th>request</th><th>differs in</th><th>A</th><th>B</th></tr>{rows}</table>
<ul>{only}</ul>
</body></html>
"""
