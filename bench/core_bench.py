"""Core validation time per request, beside a naive baseline, in one run.

    .venv/bin/python -m bench core            # writes bench/results/core.md

Baseline: the jsonschema package's default validator (Draft 2020-12) on the same
request schema. It checks the schema only (no tokenizer, no vector decoding), so
it is a floor for what a generic validator costs, not a full equivalent.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import platform
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import jsonschema
import numpy as np

from bench.harness import BENCH, command_line, percentile
from bench.report import write_report
from contract import Contract, encode_tensor, spec

validate_completion = Contract(spec()).validate_completion

OUT = BENCH / "results" / "core.md"


def bodies() -> dict[str, dict[str, Any]]:
    model = spec().models[spec().default_model]
    rng = np.random.default_rng(0)
    layers = list(range(model.num_layers))

    def vectors(dtype: str) -> list[dict[str, Any]]:
        values = rng.standard_normal((len(layers), model.hidden_size), dtype=np.float32)
        if dtype == "bf16":
            bits = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
            wire = encode_tensor(bits, "torch.bfloat16")
        else:
            wire = encode_tensor(values, "torch.float32")
        return [{"activations": wire, "layer_indices": layers, "scale": 1.5}] * 8

    base = {"model": model.name, "prompt": "The sky is", "max_tokens": 16}
    return {
        "(a) minimal request": base,
        "(b) 8 steering vectors, 32 x 4096 bf16": {
            **base,
            "apply_steering_vectors": vectors("bf16"),
        },
        "(b) 8 steering vectors, 32 x 4096 float32": {
            **base,
            "apply_steering_vectors": vectors("f32"),
        },
        "(c) 100,000-token token-id prompt": {**base, "prompt": [791] * 100_000, "stream": True},
    }


def measure(fn: Callable[[], Any], seconds: float) -> tuple[float, float, int]:
    fn()  # warm caches (compiled validators, tokenizer)
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return percentile(times, 50), percentile(times, 90), len(times)


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.2f} ms"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per cell")
    args = parser.parse_args(argv)
    naive = jsonschema.Draft202012Validator(spec().schema("CompletionRequest"))
    rows = []
    for name, body in bodies().items():
        core = measure(functools.partial(validate_completion, body), args.seconds)
        base = measure(functools.partial(naive.validate, body), args.seconds)
        rows.append(
            f"| {name} | {fmt(core[0])} | {fmt(core[1])} | {fmt(base[0])} | {fmt(base[1])} "
            f"| {base[0] / core[0]:.1f}x |"
        )
    table = "\n".join(
        [
            "# Core validation time per request",
            "",
            f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
            f"{platform.machine()}, jsonschema {importlib.metadata.version('jsonschema')}. "
            f"Command: `{command_line('core_bench', ['--seconds', str(args.seconds)])}`.",
            "",
            "Core: `contract.Contract.validate_completion` (schema, rules, model checks, tokenizer,"
            " vector decoding, caps).",
            "Naive: `jsonschema.Draft202012Validator(...).validate` on the same schema (schema only).",
            "Targets: (a) under 50 µs, (b) under 50 ms.",
            "",
            "| request | core p50 | core p90 | naive p50 | naive p90 | naive / core |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )
    write_report(OUT, table)
    print(table)


if __name__ == "__main__":
    main()
