"""One pytest test per selected check; see conformance/pytest_plugin.py for how to run it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conformance.engine.config import DEFAULT_TOKEN_CEILING, RunConfig
from conformance.engine.context import Context
from conformance.engine.registry import Check, select
from conformance.engine.results import Outcome
from conformance.pytest_plugin import SUMMARY
from contract.version import describe, versions

PROVEN = "premise"  # ctx.memo key of a premise run before the tests (conformance_context)


def _option(config: pytest.Config, name: str) -> Any:
    """--conformance-NAME, else the environment variable CONFORMANCE_NAME."""
    value = config.getoption(f"conformance_{name}", default=None)
    return value if value not in (None, False) else os.environ.get(f"CONFORMANCE_{name.upper()}")


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(v.strip() for v in (value or "").split(",") if v.strip())


def run_config(config: pytest.Config) -> RunConfig | None:
    base_url = _option(config, "base_url")
    if not base_url:
        return None
    return RunConfig(
        base_url=base_url,
        api_key=_option(config, "api_key") or "",
        model=_option(config, "model") or "",
        profile=_option(config, "profile") or "quick",
        include=_split(_option(config, "include")),
        skip=_split(_option(config, "skip")),
        select=_split(_option(config, "select")),
        wrong_key_expected=bool(_option(config, "wrong_key_expected")),
        exhausted_key=_option(config, "exhausted_key"),
        token_ceiling=int(_option(config, "token_ceiling") or DEFAULT_TOKEN_CEILING),
    ).validate()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "conformance_check" not in metafunc.fixturenames:
        return
    from conformance.checks import REGISTRY

    config = run_config(metafunc.config)
    checks = select(REGISTRY, config) if config else []
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
