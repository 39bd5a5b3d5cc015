"""Reports of a run: JUnit XML for CI systems, JSON, one self-contained HTML page, and a
Markdown summary (a CI job's page); and of a diff (`differences.py`): JSON and HTML."""

from conformance.reports.differences import write_diff_html, write_diff_json
from conformance.reports.html import write_html
from conformance.reports.json_report import write_json
from conformance.reports.junit import write_junit
from conformance.reports.markdown import write_markdown

__all__ = [
    "write_diff_html",
    "write_diff_json",
    "write_html",
    "write_json",
    "write_junit",
    "write_markdown",
]
