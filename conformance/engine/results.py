"""What a run produces: one result per check, findings kept apart from the tool's own errors.

A *finding* is something the server under test did wrong (a check FAILED).
A *warning* is a finding of the front class (conformance/README.md, "A front's own
words"): a refusal of a request no client sends, answered by a front in its own words
(an HTML page, a close). A check whose findings are all warnings is WARNED, which does
not change the exit code; under --strict it is FAILED.
A tool *error* is something that went wrong in the suite itself (a bug, a
report that could not be written): the check's outcome is ERROR and the
reports list it apart, never as a finding about the server.

The exit code is computed here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from conformance.wire.exchange import Exchange, bounded

NOTED = 10  # checks a note names one by one (every report lists them all)


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # at least one finding about the server
    WARNED = "warned"  # only warnings (a front's own words), not under --strict
    SKIPPED = "skipped"  # not applicable here, as the profile or options chose (reason given)
    UNPROVEN = "unproven"  # not run because of what the server did: the ceiling, a premise it
    # failed, a number it did not give (reason given); the run is not proven
    ERROR = "error"  # the suite itself failed to run the check


class ExitCode(IntEnum):
    CONFORMANT = 0
    FAILED = 1  # at least one check failed
    USAGE = 2  # usage or configuration error, server unreachable, or a tool error
    NOT_PROVEN = 3  # nothing failed, but a check did not run because of what the server did

    @property
    def verdict(self) -> str:
        """The run's verdict in words (every report says it)."""
        return VERDICTS[self]


VERDICTS = {
    ExitCode.CONFORMANT: "conformant",
    ExitCode.FAILED: "not conformant",
    ExitCode.USAGE: "incomplete (tool errors)",
    ExitCode.NOT_PROVEN: "not proven (checks the server kept from running)",
}


@dataclass
class Finding:
    """One way the server's behaviour differed from the contract."""

    message: str
    expected: Any = None
    received: Any = None
    exchange: Exchange | None = None
    warning: bool = False  # the front class: a finding only under --strict

    def __post_init__(self) -> None:
        self.message = bounded(self.message)
        self.expected, self.received = bounded(self.expected), bounded(self.received)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "expected": self.expected,
            "received": self.received,
            "warning": self.warning,
            "exchange": self.exchange.to_dict() if self.exchange else None,
        }


@dataclass
class CheckResult:
    id: str
    tags: tuple[str, ...]
    doc: str
    outcome: Outcome
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""  # why it was skipped, or the tool error
    duration: float = 0.0
    tokens: int = 0  # tokens the deployment generated for this check
    withheld: int = 0  # worst case of the requests the ledger did not send

    @property
    def group(self) -> str:
        return self.id.split(":", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        findings = []
        for i, f in enumerate(self.findings):
            d = f.to_dict()
            # several findings about one response quote it once (the reports stay small)
            first = next(j for j, g in enumerate(self.findings) if g.exchange is f.exchange)
            if f.exchange is not None and first < i:
                d["exchange"] = {"same_as_finding": first}
            findings.append(d)
        return {
            "id": self.id,
            "tags": list(self.tags),
            "doc": self.doc,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "duration_s": round(self.duration, 4),
            "tokens": self.tokens,
            "findings": findings,
        }


@dataclass
class RunReport:
    base_url: str
    model: str
    profile: str
    results: list[CheckResult] = field(default_factory=list)
    tokens: int = 0
    token_ceiling: int = 0
    duration: float = 0.0
    server_max_model_len: int | None = None  # as GET /v1/models gave it (None: it gave none)
    # the model's numbers GET /v1/models did not give: the spec's, which the run assumed
    assumed: dict[str, int] = field(default_factory=dict)
    run_errors: list[str] = field(default_factory=list)  # the tool's, outside any check
    # The suite's package version and the contract's (openapi.yaml's info.version) it checked.
    versions: dict[str, str] = field(default_factory=dict)
    coverage: dict[str, Any] | None = None  # conformance.engine.coverage's summary
    token_plan: int = 0  # the selection's worst case: if the server does not conform
    ceiling_skipped: list[str] = field(default_factory=list)  # checks skipped for the ceiling
    ceiling_needed: int | None = None  # a --token-ceiling that would run them too
    ceiling_notes: list[str] = field(default_factory=list)  # requests withheld inside checks
    # checks whose requests generated more than their price: {"check", "spent"} (each also a finding)
    overspent: list[dict[str, Any]] = field(default_factory=list)
    strict: bool = False  # --strict: warnings are findings (checks FAILED)
    # --baseline: the findings new, still failing and fixed against an earlier report
    # (conformance.engine.baseline.compare); with one, only new findings fail the run.
    baseline: dict[str, Any] | None = None
    rate_limit: dict[str, Any] | None = None  # --rate-limit: the pace, and the 429s waited out
    seed: int | None = None  # the run's seed (--seed repeats its draws)
    twins: dict[str, Any] | None = None  # plain answers held to counted twins (wire.twins)
    # the options that chose what ran and how it was judged (RunConfig.options): replay reads them
    options: dict[str, Any] = field(default_factory=dict)
    # the run's keys: every writer masks them (reports.scrub); never serialised
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def context_said(self) -> str:
        """max_model_len as the reports show it, saying where it came from."""
        if self.server_max_model_len is not None:
            return f"max_model_len {self.server_max_model_len}"
        return (
            f"max_model_len {self.assumed.get('max_model_len')} (the spec's: the server gave none)"
        )

    def ceiling_note(self) -> str:
        """What the ceiling kept from running, or ''."""
        lines = list(self.ceiling_notes)
        if self.overspent:
            lines.insert(
                0,
                "the server generated more than a request's price in "
                + ", ".join(f"{o['check']} ({o['spent']} tokens)" for o in self.overspent)
                + ": what came after had less of the ceiling left",
            )
        if self.ceiling_skipped:
            lines.insert(
                0,
                f"{len(self.ceiling_skipped)} checks skipped for the token ceiling of "
                f"{self.token_ceiling} (if the server does not conform they may cost more): "
                f"{', '.join(self.ceiling_skipped)}; --token-ceiling {self.ceiling_needed} "
                f"would run them",
            )
        return "\n".join(lines)

    def notes(self) -> list[str]:
        """What the server kept from running, the baseline's comparison and the rate limit's
        waits, as lines (every report shows them)."""
        lines = []
        if self.unproven:
            lines.append(
                f"not proven: {len(self.unproven)} checks did not run because of what the server did: "
                + "; ".join(
                    f"{r.id} ({r.reason.splitlines()[0] if r.reason else ''})"
                    for r in self.unproven[:NOTED]
                )
                + (" …" if len(self.unproven) > NOTED else "")
            )
        if self.assumed:
            lines.append(
                "GET /v1/models does not give "
                + ", ".join(self.assumed)
                + " (within the Model schema's bounds)"
                + ": the run took the spec's ("
                + ", ".join(f"{k} {v}" for k, v in self.assumed.items())
                + ") and skipped the checks sized by them"
            )
        if self.baseline is not None:
            b = self.baseline
            lines.append(
                f"against the baseline {b['file']}: {len(b['new'])} new findings, {len(b['still'])} still "
                f"failing, {len(b['fixed'])} fixed (only new findings fail the run)"
            )
            lines += [f"  NEW {f['check']}: {f['message']}" for f in b["new"]]
            lines += [f"  FIXED {f['check']}: {f['message']}" for f in b["fixed"]]
        if self.seed is not None:
            t = self.twins or {}
            lines.append(
                f"seed {self.seed} (--seed {self.seed} repeats the run's draws); plain answers held "
                f"to a counted twin: {t.get('sent', 0)} of {t.get('eligible', 0)} eligible"
            )
        if self.rate_limit is not None:
            r = self.rate_limit
            lines.append(
                f"rate limit: at most {r['per_second']:g} requests per second; {r['retried']} answers 429 "
                f"with Retry-After waited out ({r['waited_s']:.1f} s) and sent again, at most {r['max_retries']} "
                f"times a request and {r['max_wait_s']:g} s a wait; {len(r['given_up'])} given up on"
            )
            if r.get("past_bound"):
                lines.append(
                    f"not proven: the server forced {r['retried']} retries of {r['sent']} requests, "
                    f"the run's bound; {r['past_bound']} more 429s stood as answers"
                )
        return lines

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome is Outcome.FAILED]

    @property
    def warned(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome is Outcome.WARNED]

    @property
    def unproven(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome is Outcome.UNPROVEN]

    @property
    def errors(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome is Outcome.ERROR]

    def to_dict(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "model": self.model,
            "profile": self.profile,
            "versions": self.versions,
            "server_max_model_len": self.server_max_model_len,
            "assumed": self.assumed,
            "summary": {o.value: self.count(o) for o in Outcome}
            | {
                "total": len(self.results),
                "tokens": self.tokens,
                "token_ceiling": self.token_ceiling,
                "token_plan": self.token_plan,
                "skipped_for_ceiling": self.ceiling_skipped,
                "token_ceiling_needed": self.ceiling_needed,
                "ceiling_notes": self.ceiling_notes,
                "overspent": self.overspent,
                "duration_s": round(self.duration, 3),
                "strict": self.strict,
                "exit_code": int(exit_code(self)),
            },
            "baseline": self.baseline,
            "rate_limit": self.rate_limit,
            "seed": self.seed,
            "options": self.options,
            "twins": self.twins,
            "results": [r.to_dict() for r in self.results if r.outcome is not Outcome.ERROR],
            "tool_errors": [r.to_dict() for r in self.errors],
            "run_errors": self.run_errors,
            "coverage": self.coverage,
        }


def exit_code(report: RunReport | None) -> ExitCode:
    """The one place the exit code is decided.

    None (no report: bad usage, bad configuration, unreachable server) -> 2.
    Any failed check -> 1, even if the tool also had errors: the findings stand;
    with a baseline, only a new finding (one the baseline does not list) -> 1.
    Warned checks (a front the user declared, answering in its own words) do not count:
    --strict makes them FAILED.
    No failure but a tool error (in a check, or writing a report) -> 2: the
    verdict is incomplete, so not 0.
    Neither, but a check the server kept from running (UNPROVEN), or more 429 retries than the
    run's bound (wire.client.Pace) -> 3: not proven.
    Only then 0: every selected check ran and passed, or was skipped by the profile's
    or the options' choice.
    """
    if report is None:
        return ExitCode.USAGE
    if report.baseline["new"] if report.baseline is not None else report.failed:
        return ExitCode.FAILED
    if report.errors or report.run_errors:
        return ExitCode.USAGE
    if report.unproven or (report.rate_limit or {}).get("past_bound"):
        return ExitCode.NOT_PROVEN
    return ExitCode.CONFORMANT
