"""python -m conformance --base-url URL --api-key KEY [options]; see conformance/README.md.
`python -m conformance diff ... --other-url URL2 [--other-key KEY2]`: conformance.diff.

Exit codes (computed in conformance.results.exit_code): 0 conformant, 1 at
least one check failed, 2 usage or configuration error, unreachable server,
or a tool error.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import httpx
from rich.console import Console

from conformance.config import DEFAULT_TOKEN_CEILING, PROFILES, ConfigError, RunConfig
from conformance.results import ExitCode, exit_code
from contract import SpecError, spec
from contract.version import VersionAction

ENV_BASE_URL = "CONFORMANCE_BASE_URL"
ENV_API_KEY = "CONFORMANCE_API_KEY"


def _tags(values: list[str] | None) -> tuple[str, ...]:
    return tuple(t.strip() for v in values or () for t in v.split(",") if t.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m conformance",
                                description="Check a deployment of the completions API against openapi.yaml.")
    p.add_argument("--version", action=VersionAction)
    p.add_argument("--base-url", default=os.environ.get(ENV_BASE_URL),
                   help=f"the deployment's base URL, without /v1 (env {ENV_BASE_URL})")
    p.add_argument("--api-key", default=os.environ.get(ENV_API_KEY),
                   help=f"a valid API key (env {ENV_API_KEY})")
    p.add_argument("--model", default=None, help="the model to test (default: the spec's first x-models entry)")
    p.add_argument("--profile", choices=PROFILES, default="quick",
                   help="quick: only requests that generate no tokens (default); full: everything")
    p.add_argument("--include", action="append", metavar="TAG", help="only checks with one of these tags")
    p.add_argument("--skip", action="append", metavar="TAG", help="leave out checks with these tags")
    p.add_argument("-k", "--select", action="append", metavar="PATTERN",
                   help="only checks whose id matches this glob (e.g. 'caps:*')")
    p.add_argument("--dry-run", action="store_true", help="list the selected checks; send nothing")
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--json", metavar="FILE", help="write a JSON report")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument("--wrong-key-expected", action="store_true",
                   help="the deployment has keys configured: an unknown key must get 401")
    p.add_argument("--exhausted-key", metavar="KEY", help="a key whose Budget is spent (budget checks)")
    p.add_argument("--token-ceiling", type=int, default=DEFAULT_TOKEN_CEILING,
                   help=f"most tokens the run may make the server generate (default {DEFAULT_TOKEN_CEILING})")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    p.add_argument("--schema-examples", type=int, default=25,
                   help="schemathesis examples per operation and phase (default 25)")
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    return p


def _config(args: argparse.Namespace) -> RunConfig:
    if not args.dry_run and (not args.base_url or not args.api_key):
        raise ConfigError("--base-url and --api-key are required (or set "
                          f"{ENV_BASE_URL} and {ENV_API_KEY})")
    return RunConfig(
        base_url=args.base_url or "http://dry-run.invalid", api_key=args.api_key or "",
        model=args.model or spec().default_model, profile=args.profile,
        include=_tags(args.include), skip=_tags(args.skip), select=_tags(args.select),
        wrong_key_expected=args.wrong_key_expected, exhausted_key=args.exhausted_key,
        token_ceiling=args.token_ceiling, timeout=args.timeout, schema_examples=args.schema_examples,
    ).validate()


def main(argv: Sequence[str] | None = None, *, transport: httpx.BaseTransport | None = None,
         console: Console | None = None) -> int:
    """Run the CLI in-process; returns the exit code (never raises SystemExit)."""
    from conformance.checks import REGISTRY
    from conformance.display import ProgressDisplay, print_dry_run, print_summary
    from conformance.registry import known_tags, select
    from conformance.reports import write_html, write_json, write_junit
    from conformance.runner import run

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["diff"]:
        from conformance.diff import main as diff_main
        return diff_main(argv[1:], console=console, transports=(transport, transport))
    console = console or Console()
    err = Console(stderr=True)
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:             # argparse: --help (0) or bad usage (2)
        return int(exc.code or 0)
    try:
        config = _config(args)
        unknown = set(config.include + config.skip) - known_tags(REGISTRY)
        if unknown:
            raise ConfigError(f"unknown tags: {', '.join(sorted(unknown))} "
                              f"(known: {', '.join(sorted(known_tags(REGISTRY)))})")
        checks = select(REGISTRY, config)
        if args.dry_run:
            print_dry_run(checks, config, console)
            return int(ExitCode.CONFORMANT)
        show = not args.no_progress and err.is_terminal
        with ProgressDisplay(len(checks), err, enabled=show) as progress:
            report = run(config, checks, progress=progress, transport=transport)
    except (ConfigError, SpecError) as exc:
        err.print(f"[magenta]error:[/] {exc}", highlight=False)
        return int(exit_code(None))
    for path, write in ((args.junit, write_junit), (args.json, write_json), (args.html, write_html)):
        if path:
            try:
                write(report, path)
            except OSError as exc:
                report.run_errors.append(f"cannot write {path}: {exc}")
    print_summary(report, console)
    return int(exit_code(report))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
