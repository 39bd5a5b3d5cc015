"""python -m conformance --base-url URL --api-key KEY [options]; see conformance/README.md.
`python -m conformance diff --base-url URL --api-key KEY --other-url URL2 [--other-key KEY2]
[options]`: the same checks against two deployments (conformance.engine.diff).
`python -m conformance replay REPORT.json [CHECK ...]`: a report's failing checks again, each
finding fixed or still failing (conformance.cli.replay).

The two commands share the options that say what to check and which checks
(`_add_run_options`); each has its own reports: a run writes JUnit, JSON and
HTML, a diff JSON and HTML (it has no --junit: argparse refuses it, exit 2).
The spec is read here, once, and handed to everything below in the RunConfig.

Exit codes (computed in conformance.engine.results.exit_code and DiffReport.exit_code):
0 conformant (nothing differs; warnings do not count without --strict), 1 at least one
check failed (with --baseline: a new finding; something differs),
2 usage or configuration error, unreachable server, or a tool error.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import httpx
from rich.console import Console

from conformance.cli.names import prog
from conformance.engine.config import (
    DEFAULT_TOKEN_CEILING,
    PROFILES,
    ConfigError,
    RunConfig,
    url_secrets,
)
from conformance.engine.results import ExitCode, exit_code
from conformance.reports.scrub import scrubbed
from conformance.wire.exchange import ENV_API_KEY
from contract import Spec, SpecError, spec
from contract.version import VersionAction

ENV_BASE_URL = "CONFORMANCE_BASE_URL"
DIFF = "diff"
REPLAY = "replay"


class Parser(argparse.ArgumentParser):
    """argparse, whose usage errors are ConfigErrors: the command writes its reports for them
    too (a CI job's publish step finds the error, not nothing)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise ConfigError(message)


def _tags(values: list[str] | None) -> tuple[str, ...]:
    return tuple(t.strip() for v in values or () for t in v.split(",") if t.strip())


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """What to check and which checks: the options a run and a diff share."""
    p.add_argument("--version", action=VersionAction)
    p.add_argument(
        "--base-url",
        default=os.environ.get(ENV_BASE_URL),
        help=f"the deployment's base URL, without /v1 (env {ENV_BASE_URL})",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get(ENV_API_KEY),
        help=f"a valid API key (env {ENV_API_KEY})",
    )
    p.add_argument(
        "--model", default=None, help="the model to test (default: the spec's first x-models entry)"
    )
    p.add_argument(
        "--profile",
        choices=PROFILES,
        default="quick",
        help="quick: only requests that generate no tokens (default); full: everything",
    )
    p.add_argument(
        "--include", action="append", metavar="TAG", help="only checks with one of these tags"
    )
    p.add_argument(
        "--skip", action="append", metavar="TAG", help="leave out checks with these tags"
    )
    p.add_argument(
        "-k",
        "--select",
        action="append",
        metavar="PATTERN",
        help="only checks whose id matches this glob (e.g. 'caps:*')",
    )
    p.add_argument(
        "--exclude",
        action="append",
        metavar="PATTERN",
        help="leave out checks whose id matches this glob (e.g. 'robust:http.*')",
    )
    p.add_argument("--dry-run", action="store_true", help="list the selected checks; send nothing")
    p.add_argument(
        "--wrong-key-expected",
        action="store_true",
        help="the deployment has keys configured: an unknown key must get 401",
    )
    p.add_argument(
        "--exhausted-key", metavar="KEY", help="a key whose Budget is spent (budget checks)"
    )
    p.add_argument(
        "--token-ceiling",
        type=int,
        default=DEFAULT_TOKEN_CEILING,
        help=f"most tokens the run may make the server generate (default {DEFAULT_TOKEN_CEILING})",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    p.add_argument(
        "--schema-examples",
        type=int,
        default=25,
        help="schemathesis examples per operation and phase (default 25)",
    )
    p.add_argument(
        "--stall-seconds",
        type=float,
        default=0.0,
        help="run robust:http.stalled_body, waiting this long for the server's body-read "
        "timeout (default 0: skipped)",
    )
    p.add_argument(
        "--strict",
        action="store_true",
        help="a front's own words (warnings: an HTML page or a close for a request no client "
        "sends) fail the run too",
    )
    p.add_argument(
        "--front",
        metavar="NAME",
        help="the deployment's front (nginx, envoy, ...): its own pages for requests no client "
        "sends, when they name it (Server, Via, the page), are warnings; without it they fail",
    )
    p.add_argument(
        "--rate-limit",
        type=float,
        metavar="N",
        help="send at most N requests per second; a 429 with Retry-After is waited out and sent again",
    )
    p.add_argument(
        "--metrics-url",
        metavar="URL",
        help="the deployment's /metrics (its vLLM's, or the mock's): run the metrics:* checks "
        "(vLLM's names, types, labels and buckets; counters that move with the run's requests)",
    )
    p.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="the run's seed (every report prints it): which plain answers are held to a counted "
        "twin; the same seed repeats a run's draws (default: drawn at random)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display")


def run_options() -> argparse.ArgumentParser:
    """The options of a run alone: the pytest plugin offers each as --conformance-NAME."""
    p = Parser(prog=prog(), add_help=False)
    _add_run_options(p)
    return p


def _add_reports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--junit", metavar="FILE", help="write a JUnit XML report")
    p.add_argument("--json", metavar="FILE", help="write a JSON report")
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    p.add_argument(
        "--markdown",
        metavar="FILE",
        help='write a Markdown summary (a CI job\'s page: --markdown "$GITHUB_STEP_SUMMARY")',
    )


def parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=prog(),
        description="Check a deployment of the completions API against openapi.yaml. "
        f"`{prog()} {DIFF} --help`: compare two deployments; "
        f"`{prog()} {REPLAY} --help`: replay a report's failures.",
    )
    _add_run_options(p)
    _add_reports(p)
    p.add_argument(
        "--baseline",
        metavar="PREVIOUS.json",
        help="a JSON report of an earlier run: only findings it does not list fail this run",
    )
    return p


def diff_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=f"{prog()} {DIFF}",
        description="Run the same checks against two deployments and report "
        "every answer that differs.",
    )
    _add_run_options(p)
    p.add_argument("--other-url", required=True, help="deployment B's base URL (A is --base-url)")
    p.add_argument("--other-key", help="deployment B's API key (default: --api-key)")
    p.add_argument("--json", metavar="FILE", help="write every difference as JSON")
    p.add_argument(
        "--html", metavar="FILE", help="write one HTML page with the two answers side by side"
    )
    return p


def config_of(args: argparse.Namespace, api: Spec) -> RunConfig:
    """The RunConfig of a run's parsed options (the command's, or the pytest plugin's)."""
    if not args.dry_run and (not args.base_url or not args.api_key):
        raise ConfigError(
            f"--base-url and --api-key are required (or set {ENV_BASE_URL} and {ENV_API_KEY})"
        )
    return RunConfig(
        base_url=args.base_url or "http://dry-run.invalid",
        api_key=args.api_key or "",
        model=args.model or "",
        profile=args.profile,
        include=_tags(args.include),
        skip=_tags(args.skip),
        select=_tags(args.select),
        exclude=_tags(args.exclude),
        wrong_key_expected=args.wrong_key_expected,
        exhausted_key=args.exhausted_key,
        token_ceiling=args.token_ceiling,
        timeout=args.timeout,
        schema_examples=args.schema_examples,
        stall_seconds=args.stall_seconds,
        strict=args.strict,
        front=args.front,
        rate_limit=args.rate_limit,
        seed=args.seed,
        api=api,
        metrics_url=args.metrics_url,
    ).validate()


def selected(config: RunConfig) -> list[Any]:
    """The checks the options select; a usage error (exit 2) for a tag or pattern that names
    nothing, and for a selection left empty: a run of no check is never conformant."""
    from conformance.checks import REGISTRY
    from conformance.engine.registry import known_tags, select, unmatched

    unknown = set(config.include + config.skip) - known_tags(REGISTRY)
    if unknown:
        raise ConfigError(
            f"unknown tags: {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(known_tags(REGISTRY)))})"
        )
    for option, patterns in (("-k/--select", config.select), ("--exclude", config.exclude)):
        for pattern in unmatched(REGISTRY, patterns):
            hint = (
                f"; to leave checks out, --exclude {shlex.quote(pattern[1:])}"
                if pattern.startswith("!")
                else ""
            )
            raise ConfigError(f"{option} {pattern!r} matches no check id{hint}")
    chosen = select(REGISTRY, config)
    if not chosen:
        raise ConfigError(
            f"the options select no check of the {config.profile} profile"
            + ("; --profile full runs the checks that generate" if not config.full else "")
        )
    waits, check = max((c.silence(config), c.id) for c in chosen)
    if config.timeout <= waits:  # the read would end before the silence the verdict needs
        raise ConfigError(
            f"--timeout {config.timeout:g} is too short for {check}, which waits {waits:g} s for "
            f"its verdict: use --timeout {math.floor(waits) + 1} or more, or --exclude {check}"
        )
    return chosen


def _cache_outside_the_working_directory() -> None:
    """schemathesis's hypothesis keeps caches in `.hypothesis/` of the working directory: a
    gate run from a deployment's repository must not leave one there. The command puts them
    in the user's cache (XDG_CACHE_HOME) unless HYPOTHESIS_STORAGE_DIRECTORY says where. Only the
    command does (`entry`): `main` in another process (a test, pytest_plugin.py) leaves that
    process's hypothesis as it is."""
    if os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        return
    from hypothesis.configuration import set_hypothesis_home_dir

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    set_hypothesis_home_dir(os.path.join(cache, "acs-conformance", "hypothesis"))


def _report_paths(argv: Sequence[str]) -> argparse.Namespace:
    """The report options alone, read from arguments that may not parse as a whole: a usage
    error's reports go where the command line asked for them."""
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    _add_reports(p)
    # what the report names, and the secrets the error's lines are masked of
    for name in ("--base-url", "--model", "--profile", "--api-key", "--exhausted-key"):
        p.add_argument(name)
    try:
        return p.parse_known_args(argv)[0]
    except (argparse.ArgumentError, SystemExit):
        return argparse.Namespace()


def _writers() -> dict[str, Callable[[Any, str], None]]:
    from conformance.reports import write_html, write_json, write_junit, write_markdown

    return {
        "junit": write_junit,
        "json": write_json,
        "html": write_html,
        "markdown": write_markdown,
    }


def _files(args: argparse.Namespace) -> Any:
    """The report files the command line asked for (conformance.reports.files.ReportFiles)."""
    from conformance.reports.files import ReportFiles

    return ReportFiles([(getattr(args, n, None), w) for n, w in _writers().items()])


def _refused(args: argparse.Namespace, api: Spec | None, message: str) -> Any:
    """The report of a run that did not start (exit 2): its error, where each report goes."""
    from conformance.engine.results import RunReport
    from contract.version import versions

    named = versions(api) if api is not None else {}
    config_secrets = [getattr(args, n, None) for n in ("api_key", "exhausted_key")]
    for name in ("base_url", "metrics_url"):  # a password or query value in a URL too
        config_secrets += url_secrets(getattr(args, name, None) or "")
    return RunReport(
        getattr(args, "base_url", None) or os.environ.get(ENV_BASE_URL) or "",  # as given
        getattr(args, "model", None) or "",
        getattr(args, "profile", None) or "",
        run_errors=[message],
        versions=named,
        secrets=tuple(s for s in config_secrets if s),
    )


def main(
    argv: Sequence[str] | None = None,
    *,
    transport: httpx.BaseTransport | None = None,
    console: Console | None = None,
    api: Spec | None = None,
) -> int:
    """Run the CLI in-process; returns the exit code (never raises SystemExit).
    `api`: the spec to check against (default: contract.spec()). Every exit but --help's and
    --version's writes the reports asked for: exit 2's hold the error."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [DIFF]:
        return diff_main(argv[1:], console=console, transports=(transport, transport), api=api)
    if argv[:1] == [REPLAY]:
        from conformance.cli.replay import replay_main

        return replay_main(
            argv[1:], console=console, transport=transport, api=api if api is not None else spec()
        )
    from conformance.engine import baseline
    from conformance.engine.runner import run
    from conformance.reports.console import ProgressDisplay, Summary, print_dry_run

    console = console or Console()
    err = Console(stderr=True)
    args: argparse.Namespace = _report_paths(argv)
    try:
        try:
            args = parser().parse_args(argv)
        except SystemExit as exc:  # --help or --version: nothing to report
            return int(exc.code or 0)
        finally:
            console, err = scrubbed(args, console, err)
        api = api if api is not None else spec()
        config = config_of(args, api)
        checks = selected(config)
        known = baseline.load(args.baseline, config.api.version) if args.baseline else None
        if args.dry_run:
            print_dry_run(checks, config, console)
            return int(ExitCode.CONFORMANT)
        compared = [baseline.Compared(known, args.baseline, config.api)] if known else []
        with ProgressDisplay(len(checks), err, enabled=not args.no_progress) as progress:
            # the report compared, then written, then summed up: each a handler of the run's end
            handlers = [progress, *compared, _files(args), Summary(console)]
            report = run(config, checks, handlers=handlers, transport=transport)
    except (ConfigError, SpecError, OSError) as exc:
        err.print(f"[magenta]error:[/] {exc}", highlight=False)
        _files(args).write(_refused(args, api, f"not run: {exc}"))
        return int(exit_code(None))
    return int(exit_code(report))


def diff_main(
    argv: Sequence[str],
    *,
    console: Console | None = None,
    transports: tuple[httpx.BaseTransport | None, httpx.BaseTransport | None] = (None, None),
    api: Spec | None = None,
) -> int:
    """`python -m conformance diff`, in-process; returns the exit code. With --dry-run it lists
    the checks both deployments would get and sends nothing."""
    from conformance.engine.diff import run_diff
    from conformance.reports import write_diff_html, write_diff_json
    from conformance.reports.console import print_diff, print_dry_run
    from conformance.reports.files import ReportFiles

    console = console or Console()
    err = Console(stderr=True)
    try:
        args = diff_parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    except ConfigError as exc:  # the usage was printed with it
        err.print(f"[magenta]error:[/] {exc}", highlight=False)
        return int(ExitCode.USAGE)
    console, err = scrubbed(args, console, err)
    try:
        a = config_of(args, api if api is not None else spec())
        b = dataclasses.replace(
            a, base_url=args.other_url, api_key=args.other_key or a.api_key
        ).validate()
        checks = selected(a)
        if args.dry_run:
            print_dry_run(checks, a, console)
            console.print(
                f"diff: A {a.base_url} / B {b.base_url}; no request sent", highlight=False
            )
            return int(ExitCode.CONFORMANT)
        report = run_diff(a, b, checks, transports=transports)
    except (ConfigError, SpecError) as exc:
        err.print(f"[magenta]error:[/] {exc}", highlight=False)
        return int(ExitCode.USAGE)
    errors: list[str] = []
    ReportFiles([(args.json, write_diff_json), (args.html, write_diff_html)]).write(report, errors)
    for error in errors:
        err.print(f"[magenta]error:[/] {error}", highlight=False)
    print_diff(report, console)
    return int(ExitCode.USAGE) if errors else int(report.exit_code)


def entry(argv: Sequence[str] | None = None) -> int:
    """`acs-conformance` and `python -m conformance`: main, with the caches kept out of the
    working directory."""
    _cache_outside_the_working_directory()
    return main(argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(entry())
