"""The suite inside a deployment's own pytest run.

    pytest -p conformance.pytest_plugin --pyargs conformance.pytest_suite \\
        --conformance-base-url URL --conformance-api-key KEY [--conformance-profile full]

(or `pytest_plugins = ["conformance.pytest_plugin"]` in the deployment's root
conftest.py). Each check is one test, named by its id; a failed check fails
with its findings, a skipped one is skipped with its reason. Without -p, the
same options are read from CONFORMANCE_BASE_URL, CONFORMANCE_API_KEY, ... .
"""

from __future__ import annotations

import pytest

OPTIONS = (
    ("base-url", "the deployment's base URL"),
    ("api-key", "a valid API key"),
    ("model", "the model to test (default: the spec's first)"),
    ("profile", "quick (default) or full"),
    ("include", "comma-separated tags: only checks with one of them"),
    ("skip", "comma-separated tags to leave out"),
    ("select", "comma-separated check id globs"),
    ("exhausted-key", "a key whose Budget is spent"),
    ("token-ceiling", "most tokens the run may make the server generate"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "conformance suite (python -m conformance)")
    for name, help in OPTIONS:
        group.addoption(
            f"--conformance-{name}", dest=f"conformance_{name.replace('-', '_')}", help=help
        )
    group.addoption(
        "--conformance-wrong-key-expected",
        action="store_true",
        dest="conformance_wrong_key_expected",
        help="an unknown key must get 401",
    )


# Lines conformance.pytest_suite leaves for the end of the run: printed from a session
# fixture's teardown they would be captured and lost.
SUMMARY = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in terminalreporter.config.stash.get(SUMMARY, []):
        terminalreporter.write_line(line)
