"""The report files a run was asked for, written when it ends: a handler of RunFinished."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from conformance.engine.events import Event, RunFinished

Writer = Callable[[Any, str], None]  # (report, path)


class ReportFiles:
    """Each (path, writer) asked for; a file that cannot be written is one of the report's
    run_errors (the summary names it, and the exit code is a usage error's)."""

    def __init__(self, wanted: Sequence[tuple[str | None, Writer]]) -> None:
        self.wanted = [(path, write) for path, write in wanted if path]

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            self.write(event.report)

    def write(self, report: Any, errors: list[str] | None = None) -> None:
        """Every file, for a run that ended, one refused before it began, or a diff; what cannot
        be written goes to `errors` (default: a run report's run_errors)."""
        told = report.run_errors if errors is None else errors
        for path, write in self.wanted:
            try:
                write(report, path)
            except OSError as exc:
                told.append(f"cannot write {path}: {exc}")
