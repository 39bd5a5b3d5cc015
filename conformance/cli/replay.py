"""`python -m conformance replay REPORT.json [CHECK ...]`: a report's failing checks (or those
named) run again against its deployment, and each of its findings said fixed or still failing.

A check is run again, not only its requests resent: its verdict needs its logic (a fresh
prompt, the premise it checks first). Findings are matched as --baseline matches them
(conformance.engine.baseline): same check, message, expected and received, volatile parts masked;
a finding the report did not have is new. Each finding's single request is in the report
too, as a curl line (Exchange.curl). Exit code: 0 when every finding is fixed and none is
new, 1 otherwise, 2 for a usage error or a tool error.
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

from conformance.engine import baseline
from conformance.engine.config import DEFAULT_TOKEN_CEILING, ConfigError, RunConfig
from conformance.engine.results import ExitCode, exit_code
from conformance.wire.exchange import ENV_API_KEY
from contract import Spec


def replay_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m conformance replay",
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
    p.add_argument("--token-ceiling", type=int, default=DEFAULT_TOKEN_CEILING)
    p.add_argument("--timeout", type=float, default=120.0)
    return p


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
        config = RunConfig(
            base_url=args.base_url or data["base_url"],
            api_key=args.api_key,
            model=data.get("model") or "",
            profile=data.get("profile") or "quick",
            token_ceiling=args.token_ceiling,
            timeout=args.timeout,
            seed=data.get("seed") if type(data.get("seed")) is int else None,  # its draws again
            api=api,
        ).validate()
        report = run(config, [c for c in REGISTRY if c.id in chosen], transport=transport)
    except ConfigError as exc:
        err.print(f"[magenta]error:[/] {exc}", highlight=False)
        return int(ExitCode.USAGE)
    verdict = baseline.compare(report, [f for f in known if f["check"] in chosen], args.report, api)
    for word, key in (("FIXED", "fixed"), ("STILL FAILING", "still"), ("NEW", "new")):
        for f in verdict[key]:
            console.print(f"{word} {f['check']}: {f['message']}", highlight=False, markup=False)
    for r in report.errors:
        console.print(
            f"TOOL ERROR {r.id}: {r.reason.splitlines()[0] if r.reason else ''}",
            highlight=False,
            markup=False,
        )
    console.print(
        f"replayed {len(chosen)} checks against {config.base_url}: {len(verdict['fixed'])} findings "
        f"fixed, {len(verdict['still'])} still failing, {len(verdict['new'])} new",
        highlight=False,
    )
    if exit_code(report) is ExitCode.USAGE:
        return int(ExitCode.USAGE)
    return int(ExitCode.FAILED if verdict["still"] or verdict["new"] else ExitCode.CONFORMANT)
