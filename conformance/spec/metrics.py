"""vLLM's metrics as a contract: each family's name, type, labels and buckets, recorded from a
real vLLM's /metrics, not written by hand.

    python -m conformance.spec.metrics URL     # writes conformance/vllm_metrics.json

`--metrics-url` (conformance/checks/metrics.py) holds a deployment's /metrics to it: a family
of vLLM's that the deployment exports has vLLM's type, labels and buckets; a `vllm:` family
that vLLM does not have is a renamed one (a dashboard built on it shows nothing on vLLM);
and the families openapi.yaml's x-metrics requires are there. The exposition is
parsed by prometheus_client's own parser. An `_info` family's labels are its configuration,
so only its name and type are kept; a counter's `_created` samples are not families.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

CONTRACT = Path(__file__).with_name("vllm_metrics.json")
PREFIX = "vllm:"


def families(text: str) -> dict[str, dict[str, Any]]:
    """The `vllm:` families of an exposition: name -> {type, labels, buckets (histograms)}."""
    out: dict[str, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(PREFIX) or family.name.endswith("_created"):
            continue
        labels = sorted({k for s in family.samples for k in s.labels} - {"le"})
        entry: dict[str, Any] = {
            "type": family.type,
            "labels": None if family.name.endswith("_info") else labels,
        }
        if family.type == "histogram":
            bounds = {float(s.labels["le"]) for s in family.samples if "le" in s.labels}
            entry["buckets"] = sorted(
                b for b in bounds if not math.isinf(b)
            )  # +Inf: every histogram's
        out[family.name] = entry
    return out


def counter_totals(text: str) -> dict[str, float]:
    """Each counter's value summed over its label sets (the model's, the engine's, a reason's)."""
    return {
        family.name: sum(s.value for s in family.samples if s.name.endswith("_total"))
        for family in text_string_to_metric_families(text)
        if family.type == "counter"
    }


def load() -> dict[str, Any]:
    return json.loads(CONTRACT.read_text(encoding="utf-8"))


def record(url: str, version: str = "") -> dict[str, Any]:
    """The contract from a scrape of `url` (a vLLM's /metrics)."""
    text = httpx.get(url, timeout=30).text
    return {"recorded_from": f"vLLM {version}".strip(), "families": families(text)}


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m conformance.spec.metrics URL [VLLM_VERSION]", file=sys.stderr)
        return 2
    contract = record(*argv)
    CONTRACT.write_text(json.dumps(contract, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{len(contract['families'])} families written to {CONTRACT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
