"""`python -m bench`: the list of benchmarks; `python -m bench NAME [ARGS]`: run one, its own
options after its name (`python -m bench NAME --help`). Each writes its results to
bench/results/ through bench/report.py, keeping the hand-written notes of the earlier report."""

from __future__ import annotations

import ast
import sys
from importlib import import_module
from pathlib import Path

# name -> module: a benchmark's name is its module's, less "_bench"
BENCHES = {
    module.removesuffix("_bench"): module
    for module in (
        "core_bench",
        "conformance_bench",
        "http_bench",
        "stacks",
        "stream_cost",
        "served_profile",
        "parts",
        "patches_bench",
        "memory_bench",
        "cassette_bench",
        "engine_bench",
        "budget_bench",
        "mock_load",
        "mock_vs_vllm",
        "reference_bench",
        "reference_load",
        "under_traffic",
        "prefix_isolation",
        "effects_power",
        "drawn_power",
        "prism_score",
        "vllm_score",
        "peer_score",
    )
}


def summary(module: str) -> str:
    """The first line of a benchmark's docstring, read without importing it (some need vLLM)."""
    source = (Path(__file__).parent / f"{module}.py").read_text(encoding="utf-8")
    return (ast.get_docstring(ast.parse(source)) or "").splitlines()[0]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "list"):
        print("usage: python -m bench NAME [ARGS]   (python -m bench NAME --help: its options)\n")
        for name, module in BENCHES.items():
            print(f"  {name:<18} {summary(module)}")
        return 0
    name, *rest = argv
    if name not in BENCHES:
        print(f"unknown benchmark {name!r}: python -m bench lists them", file=sys.stderr)
        return 2
    sys.argv = [f"python -m bench {name}", *rest]  # what its parser shows in usage and errors
    return import_module(f"bench.{BENCHES[name]}").main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
