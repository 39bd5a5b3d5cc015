"""What a run says as it goes. The runner (conformance.engine.runner.run) emits these in order,
and every report is a handler of them, as schemathesis's engine emits events its reporters
handle: the progress display (CheckStarted, FindingMade, CheckFinished), a diff's recorder
(ExchangeSeen), the baseline, the report files and the summary (RunFinished).

    RunStarted            once, after the server answered GET /v1/models: the checks, in the
                          report's order (the premises first)
    CheckStarted          a check begins
    ExchangeSeen          an answer the check got (from any of its threads: a handler of it
                          locks what it keeps)
    FindingMade           each finding of the check, when it has ended
    CheckFinished         the check's result
    RunFinished           once, last: the run's report, for the handlers that write it

A handler is called in the run's thread (ExchangeSeen: the sender's), in the order the handlers
were given: one that changes the report on RunFinished (the baseline) comes before those that
write it. What a handler raises ends the run, as any error of the suite's would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from conformance.engine.config import RunConfig
from conformance.engine.registry import Check
from conformance.engine.results import CheckResult, Finding, RunReport
from conformance.wire.client import Reply


@dataclass(frozen=True)
class RunStarted:
    config: RunConfig
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class CheckStarted:
    check: Check


@dataclass(frozen=True)
class ExchangeSeen:
    check_id: str  # the check running when the answer came
    method: str
    path: str
    content: bytes | None  # the request's body as sent
    reply: Reply


@dataclass(frozen=True)
class FindingMade:
    check: Check
    finding: Finding


@dataclass(frozen=True)
class CheckFinished:
    check: Check
    result: CheckResult


@dataclass(frozen=True)
class RunFinished:
    report: RunReport


Event = RunStarted | CheckStarted | ExchangeSeen | FindingMade | CheckFinished | RunFinished
Handler = Callable[[Event], None]
