"""`python -m conformance replay REPORT.json [CHECK ...]`: a report's failing checks (or those
named) run again against its deployment, and each of its findings said fixed or still failing.

A check is run again, not only its requests resent: its verdict needs its logic (a fresh
prompt, the premise it checks first). Findings are matched as --baseline matches them
(conformance.engine.baseline): same check, message, expected and received, volatile parts masked;
a finding the report did not have is new. Each finding's single request is in the report
too, as a curl line (Exchange.curl). The run's options are the report's (`options`: the key,
the wrong-key expectation, the ceiling, the timeout, the front, the rate limit, the seed...),
so a check runs as it ran. Exit code: 0 when every finding is fixed and none is new, 1
otherwise (a check that did not run this time settles nothing), 2 for a usage or tool error.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from conformance.cli.names import prog
from conformance.engine import baseline
from conformance.engine.config import DEFAULT_TOKEN_CEILING, ConfigError, RunConfig
from conformance.engine.results import ExitCode, Outcome, exit_code
from conformance.wire.exchange import ENV_API_KEY
from conformance.wire.secrets import MASKED
from contract import Spec


def replay_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"{prog()} replay",
        description="Run a report's failing checks again and say, per finding, "
        "fixed or still failing.",
    )
    p.add_argument("report", help="a JSON report of an earlier run (--json)")
    p.add_argument(
        "checks", nargs="*", metavar="CHECK", help="only these checks (default: every failed one)"
    )
    p.add_argument("--base-url", help="the deployment (default: the report's)")
    p.add_argument(
        "--api-key",
        default=os.environ.get(ENV_API_KEY),
        help=f"a valid API key (env {ENV_API_KEY})",
    )
    p.add_argument(
        "--exhausted-key", help="the run's key whose Budget is spent, when the report's run had one"
    )
    p.add_argument(
        "--metrics-url", help="the deployment's /metrics (default: the report's, unless masked)"
    )
    p.add_argument("--token-ceiling", type=int, help="default: the report's run's")
    p.add_argument("--timeout", type=float, help="default: the report's run's")
    return p


def _config(args: argparse.Namespace, data: dict[str, Any], api: Spec) -> RunConfig:
    """The report's run again: its options (`options`, RunConfig.options), the command's
    where it gives them. A key is never in a report: one the run had must be given again."""
    recorded = data.get("options")
    options: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    if options.get("exhausted_key") and not args.exhausted_key:
        raise ConfigError(
            f"the run of {args.report} had --exhausted-key: give it again (--exhausted-key KEY)"
        )
    metrics_url = args.metrics_url or options.get("metrics_url")
    if metrics_url and MASKED in metrics_url:
        raise ConfigError(
            f"the run of {args.report} had a --metrics-url with a secret: give it again"
        )
    seed = data.get("seed")

    def given(name: str, default: Any) -> Any:
        value = getattr(args, name)
        return value if value is not None else options.get(name, default)

    return RunConfig(
        base_url=args.base_url or data["base_url"],
        api_key=args.api_key,
        model=data.get("model") or "",
        profile=data.get("profile") or "quick",
        wrong_key_expected=bool(options.get("wrong_key_expected", False)),
        exhausted_key=args.exhausted_key,
        token_ceiling=given("token_ceiling", DEFAULT_TOKEN_CEILING),
        timeout=given("timeout", 120.0),
        schema_examples=options.get("schema_examples", 25),
        stall_seconds=options.get("stall_seconds", 0.0),
        strict=bool(options.get("strict", False)),
        front=options.get("front"),
        rate_limit=options.get("rate_limit"),
        metrics_url=metrics_url,
        seed=seed if type(seed) is int else None,  # its draws again
        api=api,
    ).validate()


def _report(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"replay {path}: not a readable JSON report: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ConfigError(f"replay {path}: not a JSON report of this suite")
    return data


def replay_main(
    argv: Sequence[str],
    *,
    console: Console | None = None,
    transport: httpx.BaseTransport | None = None,
    api: Spec,
) -> int:
    from conformance.checks import REGISTRY
    from conformance.engine.runner import run
    from conformance.reports.scrub import scrubbed

    console = console or Console()
    err = Console(stderr=True)
    try:
        args = replay_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    console, err = scrubbed(args, console, err)
    try:
        data = _report(args.report)
        known = baseline.load(args.report, api.version)
        failed = [
            r["id"] for r in data["results"] if isinstance(r, dict) and r.get("outcome") == "failed"
        ]
        chosen = list(args.checks) or failed
        unknown = sorted(set(chosen) - {c.id for c in REGISTRY})
        if unknown:
            raise ConfigError(f"no such check: {', '.join(unknown)}")
        if not args.api_key:
            raise ConfigError(f"--api-key is required (or set {ENV_API_KEY})")
        if not chosen:
            console.print(f"{args.report} has no failed check: nothing to replay", highlight=False)
            return int(ExitCode.CONFORMANT)
        config = _config(args, data, api)
        report = run(config, [c for c in REGISTRY if c.id in chosen], transport=transport)
    except ConfigError as exc:
        err.print(f"[magenta]error:[/] {exc}", highlight=False)
        return int(ExitCode.USAGE)
    verdict = baseline.compare(report, [f for f in known if f["check"] in chosen], args.report, api)
    for word, key in (("FIXED", "fixed"), ("STILL FAILING", "still"), ("NEW", "new")):
        for f in verdict[key]:
            console.print(f"{word} {f['check']}: {f['message']}", highlight=False, markup=False)
    not_run = [r for r in report.results if r.outcome in (Outcome.SKIPPED, Outcome.UNPROVEN)]
    for r in not_run:  # its findings are neither fixed nor still failing: never a pass
        console.print(
            f"NOT RUN {r.id}: {r.reason.splitlines()[0] if r.reason else ''}",
            highlight=False,
            markup=False,
        )
    for r in report.errors:
        console.print(
            f"TOOL ERROR {r.id}: {r.reason.splitlines()[0] if r.reason else ''}",
            highlight=False,
            markup=False,
        )
    console.print(
        f"replayed {len(chosen)} checks against {config.base_url}: {len(verdict['fixed'])} findings "
        f"fixed, {len(verdict['still'])} still failing, {len(verdict['new'])} new, "
        f"{len(not_run)} checks not run",
        highlight=False,
    )
    if exit_code(report) is ExitCode.USAGE:
        return int(ExitCode.USAGE)
    unsettled = verdict["still"] or verdict["new"] or not_run
    return int(ExitCode.FAILED if unsettled else ExitCode.CONFORMANT)
