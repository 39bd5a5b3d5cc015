"""One pytest test per selected check; see conformance/pytest_plugin.py for how to run it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from conformance.engine.config import ConfigError, RunConfig
from conformance.engine.context import Context
from conformance.engine.registry import Check
from conformance.engine.results import Outcome
from conformance.pytest_plugin import SUMMARY
from contract.version import describe, versions

PROVEN = "premise"  # ctx.memo key of a premise run before the tests (conformance_context)


def run_config(config: pytest.Config) -> RunConfig | None:
    """The run's options, read by the command's own parser (conformance.pytest_plugin); None
    without a base URL. A usage error is pytest's (it stops the run before any test)."""
    from conformance.cli.main import config_of, run_options
    from conformance.pytest_plugin import command_line
    from contract import spec

    try:
        args = run_options().parse_args(command_line(config))
        return config_of(args, spec()) if args.base_url else None
    except ConfigError as exc:
        raise pytest.UsageError(f"conformance: {exc}") from exc


def _selected(config: RunConfig) -> list[Check]:
    from conformance.cli.main import selected

    try:
        return selected(config)
    except ConfigError as exc:
        raise pytest.UsageError(f"conformance: {exc}") from exc


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_check" not in metafunc.fixturenames:
        return

    config = run_config(metafunc.config)
    checks = _selected(config) if config else []
    if not checks:
        metafunc.parametrize(
            "conformance_check",
            [
                pytest.param(
                    None,
                    marks=pytest.mark.skip(
                        reason="no --conformance-base-url (or CONFORMANCE_BASE_URL) given"
                    ),
                )
            ],
            ids=["unconfigured"],
        )
        return
    metafunc.parametrize("conformance_check", checks, ids=[c.id for c in checks])


@pytest.fixture(scope="session")
def conformance_context(
    request: pytest.FixtureRequest, record_testsuite_property: Callable[[str, object], None]
) -> Iterator[Context]:
    from conformance.checks import REGISTRY
    from conformance.engine.runner import connect, execute, premises_for

    config = run_config(request.config)
    assert config is not None
    for name, version in versions(config.api).items():  # in --junitxml, as the CLI's JUnit has them
        record_testsuite_property(f"version:{name}", version)
    ctx = connect(config)
    for premise in premises_for(list(REGISTRY), ctx):  # what the ledger relies on, proven first
        ctx.memo[PROVEN, premise.id] = execute(premise, ctx)
    yield ctx
    ctx.client.close()
    request.config.stash.setdefault(SUMMARY, []).append(
        f"conformance: checked with {describe(versions(config.api))}; the server generated "
        f"{ctx.client.ledger.tokens} tokens (ceiling {config.token_ceiling})"
    )


def test_conformance(conformance_check: Check, conformance_context: Context) -> None:
    from conformance.engine.runner import execute
    from conformance.reports.junit import finding_text
    from conformance.reports.scrub import Scrubber

    result = conformance_context.memo.get((PROVEN, conformance_check.id)) or execute(
        conformance_check, conformance_context
    )
    # pytest writes these to its terminal and its --junitxml: the run's secrets masked, as the
    # CLI's reports have them (a server may quote the key back)
    scrub = Scrubber(conformance_context.config.secrets)
    if result.outcome is Outcome.SKIPPED:
        pytest.skip(scrub(result.reason))
    if result.outcome is Outcome.UNPROVEN:  # the server's doing: never a pass
        pytest.fail(scrub(f"{result.id} not proven: {result.reason}"), pytrace=False)
    if result.outcome is Outcome.ERROR:
        raise RuntimeError(scrub(f"the suite failed to run {result.id}: {result.reason}"))
    if result.outcome is Outcome.FAILED:
        pytest.fail(scrub(f"{result.id}\n{finding_text(result)}"), pytrace=False)
