"""The whole run as JSON: summary, results (findings with their exchanges), tool errors apart.

Each finding's exchange carries a curl line that resends its request; a body too large for a
command line is written beside the report, in results.BODIES, where that line reads it."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.engine.results import RunReport
from conformance.reports.scrub import Scrubber


def write_json(report: RunReport, path: str | Path) -> None:
    path = Path(path)
    scrub = Scrubber(report.secrets)
    scrub.write(path, json.dumps(report.to_dict(), indent=2, default=str))
    for result in report.results:
        for finding in result.findings:
            ex = finding.exchange
            where = ex.body_file() if ex is not None else None
            if where is not None and ex is not None and ex.sent is not None:
                target = path.parent / where
                target.parent.mkdir(exist_ok=True)
                scrub.write(target, ex.sent)
