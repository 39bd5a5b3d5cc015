"""What a person sees: a progress display while it runs, a summary table at the end, and the
table of answers a diff found different (rich)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from conformance.engine.config import RunConfig
from conformance.engine.context import SAYS
from conformance.engine.diff import DiffReport, where_differs
from conformance.engine.events import (
    CheckFinished,
    CheckStarted,
    Event,
    FindingMade,
    RunFinished,
    RunStarted,
)
from conformance.engine.registry import Check, token_bound
from conformance.engine.results import CheckResult, Outcome, RunReport, exit_code
from conformance.reports.departures import where
from conformance.wire.token_cost import CostModel
from contract.version import describe, version_line

STYLE = {
    Outcome.PASSED: "green",
    Outcome.FAILED: "red",
    Outcome.WARNED: "dark_orange",
    Outcome.SKIPPED: "yellow",
    Outcome.UNPROVEN: "orange3",
    Outcome.ERROR: "magenta",
}


PROGRESS_EVERY_S = 10.0  # a progress line this often where the output is no terminal (a CI log)


class ProgressDisplay:
    """A bar over the selected checks, naming the one running, on a terminal; elsewhere (a CI
    log, which shows no bar) a line every PROGRESS_EVERY_S seconds; a no-op when disabled."""

    def __init__(
        self,
        total: int,
        console: Console,
        enabled: bool = True,
        every: float = PROGRESS_EVERY_S,
    ) -> None:
        self.enabled, self.total, self.every = enabled, total, every
        self.failed = self.done = 0
        self.current = ""
        self._console = console
        self._lines = enabled and not console.is_terminal
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failed]} failed"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not enabled or self._lines,
        )
        self._task = self._progress.add_task("conformance", total=total, failed=0)

    def __enter__(self) -> ProgressDisplay:
        self._progress.__enter__()
        if self._lines:
            self._thread = threading.Thread(target=self._tell, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """The bar gone and the log's lines stopped (again: nothing more)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._progress.stop()

    def line(self) -> str:
        return (
            f"conformance: {self.done}/{self.total} checks, {self.failed} failed, "
            f"{time.monotonic() - self._start:.0f} s; running {self.current or '-'}"
        )

    def _tell(self) -> None:
        while not self._stop.wait(self.every):
            self._console.print(self.line(), highlight=False, markup=False)

    def __call__(self, event: Event) -> None:
        """A handler of the run's events: the bar (or the log's lines) follows the checks; in a
        log a finding is a line of its own as it is made, so a long run's first failure is
        read while the run goes on."""
        if isinstance(event, RunStarted):
            self.total = len(event.checks)
            self._progress.update(self._task, total=self.total)
        elif isinstance(event, CheckStarted):
            self.current = event.check.id
            self._progress.update(self._task, description=event.check.id[:60])
        elif isinstance(event, FindingMade) and self._lines:
            self._console.print(
                f"conformance: {event.check.id}: {event.finding.message}",
                highlight=False,
                markup=False,
            )
        elif isinstance(event, CheckFinished):
            self.done += 1
            if event.result.outcome is Outcome.FAILED:
                self.failed += 1
            self._progress.update(self._task, advance=1, failed=self.failed)
        elif isinstance(event, RunFinished):
            self.close()


class Summary:
    """The summary table, printed when the run ends (a handler of RunFinished, after those that
    write the report files: it names what they could not write)."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunFinished):
            print_summary(event.report, self.console)


GROUP_SHOWN = 4  # checks named in a line of findings of one cause


CAUSE_CHARS = 80  # of the server's words that tell one cause from another


def cause(message: str) -> str:
    """What tells one cause from another in a finding's line: the line, with the server's
    quoted words cut and their numbers masked (pydantic's "6 validation errors: ... 'input':
    [0, 1, 2, 3, 4]" and "3 validation errors: ... [[0, 1, 2], [3, 4]]" are one cause)."""
    head, says, words = message.partition(SAYS)
    return head + says + re.sub(r"\d+", "N", words)[:CAUSE_CHARS] if says else message


def by_cause(failed: Sequence[CheckResult]) -> list[tuple[str, list[CheckResult]]]:
    """Failed checks grouped by the cause of their first finding (one cause: "status 500,
    expected 400: the server says '...'" on a hundred checks is one line), each group shown
    by its first message, most checks first."""
    groups: dict[str, list[CheckResult]] = {}
    for r in failed:
        groups.setdefault(cause(r.findings[0].message) if r.findings else "", []).append(r)
    ordered = sorted(groups.values(), key=len, reverse=True)
    return [(rs[0].findings[0].message if rs[0].findings else "", rs) for rs in ordered]


FIELDS_SHOWN = 3  # fields named under a failed line in the terminal (the reports name more)


def _act_on(result: CheckResult, console: Console) -> None:
    """Under a failed line: where its first finding's answer departs, and the curl line that
    sends its request again."""
    if not result.findings:
        return
    finding = result.findings[0]
    for line in where(finding)[:FIELDS_SHOWN]:
        console.print(f"  differs at {line}", markup=False, highlight=False)
    if finding.exchange is not None:
        console.print(f"  again: {finding.exchange.curl()}", markup=False, highlight=False)


def print_summary(report: RunReport, console: Console) -> None:
    table = Table(
        title=f"Conformance of {report.base_url} ({report.model}, {report.context_said()}, {report.profile})"
    )
    table.add_column("group")
    for outcome in Outcome:
        table.add_column(outcome.value, justify="right", style=STYLE[outcome])
    table.add_column("tokens", justify="right")
    groups: dict[str, list[CheckResult]] = {}
    for r in report.results:
        groups.setdefault(r.group, []).append(r)
    for group, results in groups.items():
        table.add_row(
            group,
            *(str(sum(r.outcome is o for r in results)) for o in Outcome),
            str(sum(r.tokens for r in results)),
        )
    table.add_row("[b]all", *(f"[b]{report.count(o)}" for o in Outcome), f"[b]{report.tokens}")
    console.print(table)
    for message, results in by_cause(report.failed):
        if len(results) == 1:
            r = results[0]
            more = f" (+{len(r.findings) - 1} more)" if len(r.findings) > 1 else ""
            console.print(f"[red]FAILED[/] {r.id}: {message}{more}", markup=True, highlight=False)
        else:
            names = ", ".join(r.id for r in results[:GROUP_SHOWN]) + (
                ", …" if len(results) > GROUP_SHOWN else ""
            )
            console.print(
                f"[red]FAILED[/] x{len(results)}: {message} ({names})", markup=True, highlight=False
            )
        _act_on(results[0], console)
    for r in report.warned:
        console.print(
            f"[dark_orange]WARNING[/] {r.id}: {r.findings[0].message if r.findings else ''} "
            "(a front's own words: not counted; --strict counts it)",
            highlight=False,
        )
    for r in report.errors:
        console.print(
            f"[magenta]TOOL ERROR[/] {r.id}: {r.reason.splitlines()[0] if r.reason else ''}",
            highlight=False,
        )
    for error in report.run_errors:
        console.print(f"[magenta]TOOL ERROR[/] {error}", highlight=False)
    if report.ceiling_note():
        console.print(report.ceiling_note(), style="yellow", markup=False, highlight=False)
    for line in report.notes():
        console.print(line, markup=False, highlight=False)
    console.print(f"checked with {describe(report.versions)}", highlight=False)
    if report.coverage:
        from conformance.engine.coverage import summary_line

        console.print(summary_line(report.coverage), highlight=False)
    code = exit_code(report)
    colour = {0: "green", 1: "red", 2: "magenta", 3: "orange3"}[code]
    verdict = f"[{colour}]{code.verdict}"
    console.print(
        f"{verdict}[/]: {len(report.results)} checks in {report.duration:.1f} s; "
        f"the server generated {report.tokens} tokens (ceiling {report.token_ceiling}); "
        f"exit code {int(code)}"
    )


def print_dry_run(checks: Sequence[Check], config: RunConfig, console: Console) -> None:
    table = Table(
        title=f"{len(checks)} checks selected ({config.profile} profile); no request sent"
    )
    table.add_column("check")
    table.add_column("tags")
    table.add_column("tokens ≤", justify="right")
    table.add_column("if not conforming ≤", justify="right")
    cost = CostModel.of(config.api, config.api.models[config.model].max_model_len)
    for check in checks:
        table.add_row(
            check.id,
            ", ".join(check.all_tags),
            str(check.token_bound(config)),
            str(check.worst_case(config, cost)),
        )
    console.print(table)
    console.print(f"suite: {version_line()}", highlight=False)
    console.print(
        f"token bound of the selection: {token_bound(checks, config)}; if the server does not "
        f"conform: {token_bound(checks, config, cost)} with the spec's max_model_len "
        f"{cost.max_model_len} (ceiling {config.token_ceiling})"
    )


# -- diff ------------------------------------------------------------------------------

DIFF_ROWS_SHOWN = 40  # rows of the console's diff table; the JSON and HTML reports have them all


def _short(value: Any, width: int = 60) -> str:
    """One printable line of at most `width` characters (binary bytes escaped, not shown raw)."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: 4 * width])
    return text if len(text) <= width else text[: width - 3] + "..."


def print_diff(report: DiffReport, console: Console) -> None:
    table = Table(title=f"Answers that differ: A {report.a_url} / B {report.b_url}")
    for column in ("check", "request", "field", "A", "B"):
        table.add_column(column, overflow="fold")
    if report.differing:
        console.print(
            "by status (A->B): "
            + ", ".join(f"{k} x{v}" for k, v in report.by_status().most_common())
            + "; by field: "
            + ", ".join(f"{k} x{v}" for k, v in report.by_field().most_common()),
            highlight=False,
            markup=False,
        )
    rows = [(d, f) for d in report.differing for f in d["fields"]]
    for d, f in rows[:DIFF_ROWS_SHOWN]:
        req = d["request"]
        a, b = d["a"][f], d["b"][f]
        if f == "shape":  # the place they differ, not the whole shapes
            where, a, b = where_differs(a, b)
            f = f"shape: {where}"
        table.add_row(
            req["check"],
            f"{req['method']} {req['path']} {_short(req['body'], 40)}",
            f,
            _short(a),
            _short(b),
        )
    if report.differing:
        console.print(table)
    if len(rows) > DIFF_ROWS_SHOWN:
        console.print(
            f"... and {len(rows) - DIFF_ROWS_SHOWN} more rows (--json or --html has every one)",
            highlight=False,
        )
    for side, items in (("A", report.only_a), ("B", report.only_b)):
        for item in items[:DIFF_ROWS_SHOWN]:
            req = item["request"]
            console.print(
                f"only in {side}: {req['check']} {req['method']} {req['path']} {_short(req['body'], 60)}",
                highlight=False,
                markup=False,
            )
        if len(items) > DIFF_ROWS_SHOWN:
            console.print(
                f"... and {len(items) - DIFF_ROWS_SHOWN} more only in {side}", highlight=False
            )
    console.print(
        f"{len(report.differing)} of {report.paired} paired requests differ; "
        f"{len(report.only_a)} only in A, {len(report.only_b)} only in B; "
        f"exit code {int(report.exit_code)}",
        highlight=False,
    )
