"""The conformance suite, full profile, against `python -m reference_impl` on real vLLM.

The suite reads max_model_len from GET /v1/models, but the model's layers and
hidden size from openapi.yaml (llama-8b: 32 and 4,096); this deployment runs
the tiny model (4 and 128). So, in this test process only, the suite is given
the deployment's two numbers. The golden lens cases are fixed data for
llama-8b's numbers (layer 31, vectors of 4,096): they are left out here, and
tests/test_reference_parity.py sends them to the reference and to the mock
serving the same model instead.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.config import RunConfig
from conformance.registry import Check, select
from conformance.reports.junit import finding_text
from conformance.results import Outcome, RunReport
from conformance.runner import run
from contract import ModelInfo, spec
from mock_server.app import create_app
from mock_server.config import MockConfig
from reference_impl.engine import VllmEngine

pytest_plugins = ["tests.reference_fixtures"]
pytestmark = pytest.mark.vllm

SERVED = spec().default_model


@pytest.fixture
def deployed_numbers(model: ModelInfo, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's view of the model: the spec's entry with the deployment's layers and hidden size."""
    spec_model = spec().models[SERVED]
    deployed = dataclasses.replace(spec_model, num_layers=model.num_layers, hidden_size=model.hidden_size)
    monkeypatch.setitem(spec().__dict__, "models", {**spec().models, SERVED: deployed})


def golden_for_spec_numbers(check: Check) -> bool:
    return check.id.startswith("golden:") and "lens" in check.tags and "caps" not in check.tags


def problems(report: RunReport) -> str:
    bad = [r for r in report.results if r.outcome in (Outcome.FAILED, Outcome.ERROR)]
    return "\n\n".join(f"{r.outcome.value} {r.id}: {r.reason}\n{finding_text(r)}" for r in bad) + "\n".join(
        report.run_errors)


@pytest.mark.usefixtures("deployed_numbers")
def test_full_profile_passes(reference: Any) -> None:
    config = RunConfig(base_url=reference.url, api_key=reference.key, model=SERVED, profile="full",
                       wrong_key_expected=True).validate()
    checks = [c for c in select(REGISTRY, config) if not golden_for_spec_numbers(c)]
    report = run(config, checks)
    assert not problems(report), problems(report)
    skipped = {r.id: r.reason for r in report.results if r.outcome is Outcome.SKIPPED}
    # Only what the tiny model's max_model_len (4,096) cannot hold, and the spent-key check below.
    assert all("max_model_len" in reason for id, reason in skipped.items() if id != "budget:exhausted_key"), skipped
    assert any(r.id.startswith("lens:") and r.outcome is Outcome.PASSED for r in report.results)


def test_budget_checks_with_a_spent_key(reference: Any, models: dict[str, ModelInfo]) -> None:
    app = create_app(MockConfig(budget_tokens=0), VllmEngine(reference.vllm_url, SERVED), models)
    config = RunConfig(base_url="http://reference.test", api_key="any", model=SERVED, profile="full",
                       select=("budget:*",), exhausted_key="spent").validate()
    report = run(config, select(REGISTRY, config), transport=httpx.WSGITransport(app=app))
    assert [r.outcome for r in report.results] == [Outcome.PASSED], problems(report)
