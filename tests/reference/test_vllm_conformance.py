"""The conformance suite, full profile, against plain vLLM: the second foil beside Prism.

vLLM's own OpenAI server (no API layer in front; the tiny model served as
llama-8b, with --api-key) conforms to little of the contract. The suite must
still run to the end within its default token ceiling, with findings in every
group that applies, no tool error, and reports that quote a few KB of a body at
most. bench/vllm_score.py writes the same run's score to bench/results/vllm_score.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance.engine.config import DEFAULT_TOKEN_CEILING
from conformance.engine.results import Outcome
from conformance.wire.exchange import QUOTE_LIMIT_BYTES
from reference_impl.launcher import VllmProcess

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
# The longest string a report may hold: a quote cut at the limit, and the words saying so.
LONGEST_QUOTE = QUOTE_LIMIT_BYTES + len("... (cut: 1000000000 bytes in all)")
# The run's own bound (wall clock is not asserted: bench/ measures speed); CI stays bounded.
RUN_TIMEOUT_S = 540


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def api_key(vllm: VllmProcess) -> str:
    """The key plain_vllm (tests/support/reference.py) started vLLM with."""
    return vllm.extra_args[vllm.extra_args.index("--api-key") + 1]


def test_full_profile_against_plain_vllm(plain_vllm: VllmProcess, tmp_path: Path) -> None:
    paths = {ext: tmp_path / f"report.{ext}" for ext in ("json", "xml", "html")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance",
            "--base-url",
            plain_vllm.url,
            "--api-key",
            api_key(plain_vllm),
            "--profile",
            "full",
            "--no-progress",
            "--json",
            str(paths["json"]),
            "--junit",
            str(paths["xml"]),
            "--html",
            str(paths["html"]),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(paths["json"].read_text())
    summary = report["summary"]
    # it runs to the end, within the ceiling, and the suite itself does not fail
    assert summary["tokens"] <= summary["token_ceiling"] == DEFAULT_TOKEN_CEILING
    assert summary["skipped_for_ceiling"] == [] and summary["token_ceiling_needed"] is None
    assert summary["error"] == 0 and report["tool_errors"] == [] and report["run_errors"] == []
    results = report["results"]
    assert (
        summary["total"]
        == len(results)
        == sum(summary[o.value] for o in Outcome if o is not Outcome.ERROR)
    )
    failed = [r for r in results if r["outcome"] == Outcome.FAILED.value]
    # findings in every group that applies (the streams: the checks that open one)
    assert {"routes", "golden", "caps", "schema"} <= {r["id"].split(":")[0] for r in failed}
    assert any("streaming" in r["tags"] for r in failed)
    by_id = {r["id"]: r for r in results}
    assert by_id["routes:chat_refused"]["outcome"] == Outcome.FAILED.value  # vLLM serves chat
    assert by_id["routes:chat_refused"]["tokens"] <= 1  # ... for one token
    assert by_id["caps:body.limit+1"]["outcome"] == Outcome.FAILED.value
    # the reports stay small: no string longer than one cut quote
    longest = max(strings(report), key=len)
    assert len(longest) <= LONGEST_QUOTE, longest[:200]
    for element in ET.parse(paths["xml"]).getroot().iter():
        assert all(len(line) <= LONGEST_QUOTE for line in (element.text or "").splitlines())
