"""The conformance suite, full profile, against `python -m reference_impl` on real vLLM.

The reference runs the tiny model (4 layers, hidden 128, vLLM's max_model_len
4,096) as llama-8b and says so in GET /v1/models; the suite reads those numbers
there, like any client, so the plain command passes: the lens: and caps:
checks use the deployment's numbers, and the golden cases built on the spec's
(llama-8b: 32 layers, hidden 4,096, max_model_len 131,072) are skipped with
the reason. tests/reference/test_parity.py sends those golden cases to the
reference and to the mock serving the same model instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server import ServerConfig, create_app
from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome, RunReport
from conformance.engine.runner import run
from conformance.reports.junit import finding_text
from contract import ModelInfo, spec
from reference_impl.engine import VllmEngine
from tests.support.reference import conformant

pytestmark = pytest.mark.vllm

SERVED = spec().default_model
ROOT = Path(__file__).resolve().parents[2]


def problems(report: RunReport) -> str:
    bad = [r for r in report.results if r.outcome in (Outcome.FAILED, Outcome.ERROR)]
    return "\n\n".join(
        f"{r.outcome.value} {r.id}: {r.reason}\n{finding_text(r)}" for r in bad
    ) + "\n".join(report.run_errors)


def test_full_profile_passes(reference: Any, tmp_path: Path) -> None:
    """`python -m conformance --profile full` as a user runs it, with nothing injected (its
    vLLM's /metrics checked too: metrics:*)."""
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance",
            "--base-url",
            reference.url,
            "--api-key",
            reference.key,
            "--profile",
            "full",
            "--wrong-key-expected",
            "--no-progress",
            "--json",
            str(report_path),
            "--metrics-url",
            reference.vllm_url + "/metrics",
        ],  # its vLLM's: what a router reads
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
    )
    results = json.loads(report_path.read_text())["results"]
    assert conformant(done.returncode, results), done.stdout + done.stderr
    skipped = {r["id"]: r["reason"] for r in results if r["outcome"] == Outcome.SKIPPED.value}
    # What the tiny model's max_model_len (4,096) cannot hold, the golden cases built on the
    # spec's layers and hidden size, the spent-key check (below, with a spent key), and the
    # checks that need the mock's X-Mock-* headers, which the reference ignores.
    # robust:http.stalled_body waits for the 30 s body-read timeout: opt-in (--stall-seconds).
    # The tiny model's rows are near even over 32,000 tokens: its twenty likeliest bound nothing of
    # what a temperature does without top_k (drawn:temperature says so; effects:temperature.scale,
    # with top_k, holds the temperature).
    needs_mock_headers = {"stream:error_event", "stream:keepalive"}
    opt_in = {"budget:exhausted_key", "robust:http.stalled_body"}
    even = {"drawn:temperature", "drawn:top_p"}
    assert all(
        "max_model_len" in reason
        or "num_layers" in reason
        or (id in even and "rows are too even" in reason)
        for id, reason in skipped.items()
        if id not in {*opt_in, *needs_mock_headers}
    ), skipped
    assert "effects:temperature.scale" not in skipped
    assert "stream:error_event" in skipped
    assert (
        "golden:steering.hidden" in skipped and "num_layers 32" in skipped["golden:steering.hidden"]
    )
    passed = {r["id"] for r in results if r["outcome"] == Outcome.PASSED.value}
    assert {
        "lens:activations_shape",
        "lens:steering_accepted",
        "lens:layer_out_of_range",
    } <= passed, sorted(passed)
    assert {c.id for c in REGISTRY if c.group == "shape"} <= passed, sorted(passed)
    robust = {c.id for c in REGISTRY if c.group == "robust"} - opt_in
    assert robust <= passed, sorted(robust - passed)
    assert {"metrics:vllm_families", "metrics:counters_move"} <= passed


def test_budget_checks_with_a_spent_key(reference: Any, models: dict[str, ModelInfo]) -> None:
    app = create_app(
        ServerConfig(budget_tokens=0), VllmEngine(reference.vllm_url, SERVED, api=spec()), models
    )
    # quick: every key's Budget is spent here, the run's own too, so no premise could be proven
    config = RunConfig(
        base_url="http://reference.test",
        api_key="any",
        model=SERVED,
        profile="quick",
        select=("budget:*",),
        exhausted_key="spent",
    ).validate()
    report = run(config, select(REGISTRY, config), transport=httpx.WSGITransport(app=app))
    assert [r.outcome for r in report.results] == [Outcome.PASSED], problems(report)


def test_every_effect_is_seen_on_real_vllm(reference: Any) -> None:
    """The effects: checks (sampling, end tokens, steering by vllm-lens) on the tiny model:
    its greedy continuations, a vector at its middle layer (2 of 4), and its peaked rows
    (scripts/make_tiny_llama.py's PEAK_NATS), where temperature.scale can tell a temperature."""
    config = RunConfig(
        base_url=reference.url,
        api_key=reference.key,
        model=SERVED,
        profile="full",
        select=("effects:*",),
    ).validate()
    report = run(config, select(REGISTRY, config))
    effects = {c.id for c in REGISTRY if c.group == "effects"}
    passed = {
        r.id
        for r in report.results
        if r.outcome is Outcome.PASSED and not r.id.startswith("premise:")
    }
    assert passed == effects, problems(report)
