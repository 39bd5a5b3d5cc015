"""The whole run as JSON: summary, results (findings with their exchanges), tool errors apart."""
from __future__ import annotations

import json
from pathlib import Path

from conformance.results import RunReport


def write_json(report: RunReport, path: str | Path) -> None:
    Path(path).write_text(json.dumps(report.to_dict(), indent=2, default=str), encoding="utf-8")
