"""The drawn probes' power: how often a server wrong where fixed probes never look fails, over
runs of distinct seeds, and how often the unbroken mock does (a false finding).

    .venv/bin/python -m bench drawn_power [--runs 60]

Each way is the mock (in this process, ignore_eos's end-of-text rate 0) behind
gallery/wrong.py's `Wrong` middleware: the ways of issue 63 on every request, and four
wrong on a quarter of one drawn range only (the top log-quarter of max_tokens, stop strings of
13 to 16 characters, temperatures in [0.25, 0.69) or in [1.56, 2], prompts past 606
characters: the top log-quarter of their lengths). Each run is `drawn:*` and `model:n.children` with its own
seed. Writes bench/results/drawn_power.md (notes below its marker kept). engine/draws.py says
how the probes are sized: a way wrong on a quarter of a range fails at least 99 runs in 100.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import ROOT, command_line
from bench.report import write_report
from conformance.checks import REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select
from conformance.engine.results import Outcome
from conformance.engine.runner import run
from contract import ModelInfo
from gallery.wrong import WRONGS, Wrong
from mock_server import create_app
from mock_server.config import MockConfig
from mock_server.testing import served

DEFAULT_OUT = ROOT / "bench" / "results" / "drawn_power.md"
CHECKS = ("drawn:*", "model:n.children")
Body = dict[str, Any]
# issue 63's ways, every request
NAMED = (
    "long prompts unbounded",
    "cut at 16",
    "default max_tokens 16",
    "long stops dropped",
    "temperature 1 without top_k",
    "top_p dropped in [0.01, 1)",
    "n of 4 or more copied",
)


def _cut_at_77(body: Body, _: ModelInfo) -> Body:
    k = body.get("max_tokens")
    return {**body, "max_tokens": 77} if isinstance(k, int) and k > 77 else body


def _long_stops(body: Body, _: ModelInfo) -> Body:
    stop = body.get("stop")
    return {**body, "stop": [s for s in stop if len(s) <= 12]} if isinstance(stop, list) else body


def _cold_as_1(body: Body, _: ModelInfo) -> Body:
    t = body.get("temperature")
    cold = isinstance(t, (int, float)) and 0.25 <= t < 0.6875 and not body.get("top_k")
    return {**body, "temperature": 1.0} if cold else body


def _hot_as_1(body: Body, _: ModelInfo) -> Body:
    t = body.get("temperature")
    hot = isinstance(t, (int, float)) and t >= 1.5625 and not body.get("top_k")
    return {**body, "temperature": 1.0} if hot else body


def _long_prompts(body: Body, _: ModelInfo) -> Body:
    prompt, k = body.get("prompt"), body.get("max_tokens")
    long = isinstance(prompt, str) and len(prompt) > 606 and isinstance(k, int)
    return {**body, "max_tokens": k + 8} if long and isinstance(k, int) else body


QUARTERS: dict[str, Callable[[Body, ModelInfo], Body]] = {
    "max_tokens past 77 cut to 77 (its top log-quarter)": _cut_at_77,
    "stop strings of 13 to 16 characters dropped": _long_stops,
    "temperatures in [0.25, 0.69) read as 1": _cold_as_1,
    "temperatures in [1.56, 2] read as 1": _hot_as_1,
    "prompts past 606 characters: max_tokens overrun by 8": _long_prompts,
}


def measure(runs: int) -> list[tuple[str, dict[str, int], float]]:
    """(way, failed check -> runs it failed in, seconds) for the unbroken mock and each way."""
    app = Wrong(create_app(MockConfig(eos_rate=0)))
    ways: dict[str, Any] = {"none (the unbroken mock)": None}
    ways |= {name: WRONGS[name] for name in NAMED}
    ways |= {name: (rewrite, None) for name, rewrite in QUARTERS.items()}
    out = []
    with served(app) as url:
        for name, way in ways.items():
            app.set(way)
            counts: dict[str, int] = {}
            start = time.monotonic()
            for seed in range(runs):
                config = RunConfig(url, "k", profile="full", select=CHECKS, seed=10_000 + seed)
                report = run(config, select(REGISTRY, config))
                assert not report.errors, [(r.id, r.reason) for r in report.errors]
                for result in report.results:
                    if result.outcome is Outcome.FAILED:
                        counts[result.id] = counts.get(result.id, 0) + 1
            out.append((name, counts, time.monotonic() - start))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench drawn_power")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    rows = measure(args.runs)
    lines = [
        "# The drawn probes' power: servers wrong where fixed probes never look",
        "",
        f"`{command_line('drawn_power', argv or [])}`: each way {args.runs} runs of `drawn:*` and "
        "`model:n.children`, each run its own seed (10,000 on), against the mock behind "
        "gallery/wrong.py's middleware.",
        "",
        "| way | runs failed, by check | seconds |",
        "| --- | --- | ---: |",
    ]
    for name, counts, seconds in rows:
        found = ", ".join(f"`{k}` {v}/{args.runs}" for k, v in sorted(counts.items())) or "none"
        lines.append(f"| {name} | {found} | {seconds:.0f} |")
    write_report(args.out, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
