"""The suite inside a deployment's own pytest run.

    pytest -p conformance.pytest_plugin --pyargs conformance.pytest_suite \\
        --conformance-base-url URL --conformance-api-key KEY [--conformance-profile full]

(or `pytest_plugins = ["conformance.pytest_plugin"]` in the deployment's root
conftest.py). Each check is one test, named by its id; a failed check fails
with its findings, a skipped one is skipped with its reason. The options are the command's
(`acs-conformance --help`), each as --conformance-NAME, read the same way; one not given is read
from CONFORMANCE_NAME in the environment (CONFORMANCE_BASE_URL, CONFORMANCE_API_KEY,
CONFORMANCE_PROFILE, ...; a flag from any value but "", "0" or "false").
"""

from __future__ import annotations

import argparse
import os

import pytest

PREFIX = "--conformance-"
# The command's options that mean nothing in a pytest run: pytest has its own progress and
# --collect-only for a dry run.
NOT_HERE = {"help", "version", "no_progress", "dry_run"}


def run_actions() -> list[argparse.Action]:
    """The command's run options (conformance.cli.main.run_options), those a pytest run takes."""
    from conformance.cli.main import run_options

    return [
        a
        for a in run_options()._actions
        if a.option_strings and a.dest not in NOT_HERE and a.dest != argparse.SUPPRESS
    ]


def long_name(action: argparse.Action) -> str:
    return next(o for o in action.option_strings if o.startswith("--"))[2:]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "conformance suite (acs-conformance)")
    for action in run_actions():
        kind: dict[str, object] = {"action": "store_true"}
        if not isinstance(action, argparse._StoreTrueAction):
            append = isinstance(action, argparse._AppendAction)
            kind = {
                "action": "append" if append else "store",
                "metavar": action.metavar or action.dest.upper(),
            }
        group.addoption(
            f"{PREFIX}{long_name(action)}",
            dest=f"conformance_{action.dest}",
            help=(action.help or "").replace("%", "%%"),
            **kind,
        )


def command_line(config: pytest.Config) -> list[str]:
    """The pytest options (or the environment's CONFORMANCE_*) as the command's arguments, for
    the command's own parser to read: one set of options, read one way."""
    argv: list[str] = []
    for action in run_actions():
        value = config.getoption(f"conformance_{action.dest}", default=None)
        if value in (None, False, []):
            value = os.environ.get(f"CONFORMANCE_{action.dest.upper()}")
            if isinstance(action, argparse._AppendAction) and value:
                value = [value]
        option = f"--{long_name(action)}"
        if isinstance(action, argparse._StoreTrueAction):
            if value and str(value).lower() not in ("0", "false"):
                argv.append(option)
        elif isinstance(value, list):
            argv += [a for v in value for a in (option, v)]
        elif value not in (None, ""):
            argv += [option, str(value)]
    return argv


# Lines conformance.pytest_suite leaves for the end of the run: printed from a session
# fixture's teardown they would be captured and lost.
SUMMARY = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in terminalreporter.config.stash.get(SUMMARY, []):
        terminalreporter.write_line(line)
