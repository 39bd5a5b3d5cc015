"""The mock's load model under rising concurrency, against its profile's expected curve.

    .venv/bin/python -m bench mock_load [--profile llama-8b-h200] [--max-num-seqs 16]
                                        [--concurrency 1,2,4,8,16,32,64] [--tokens 64]

Starts `python -m mock_server --workers 1 --load-profile P --max-num-seqs S` (one worker:
one batch and one queue, as one vLLM engine has) and, for each concurrency, opens that many
streams at once (the harness's uvloop client on raw sockets), each with the same prompt and
`--tokens` tokens. It draws the mean TTFT and TPOT against concurrency beside what the
profile's numbers give (bench/results/mock_load.png, made with matplotlib) and writes the
table to bench/results/mock_load.md. `--max-num-seqs` is lower than the profile's (vLLM's
1,024) so that the queue shows on two CPU cores: past S streams, requests wait in waves.

Expected, from the load model (mock_server/hook/load.py): a prompt's prefill work W = prompt
tokens x prefill per token, on one timeline, so the k-th of streams that arrive together
has its first token after ttft + k x W; TPOT = tpot x (1 + (F - 1)(c - 1)/(L - 1)) with c
running and L the profile's full_load_seqs. With c > S the streams run in waves of S: the
k-th of a later wave starts when the k-th of the wave before ends (their ends W apart, so
its prefill waits for no other), and takes ttft + W before its first token.
Exit codes: 0 measured; 1 a stream failed.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench import harness
from bench.harness import ROOT, command_line
from bench.report import write_report
from contract import Contract, spec
from mock_server.hook.profiles import PROFILES

RESULTS = ROOT / "bench" / "results"
PROMPT = "The sky is blue because " * 25  # 127 prompt tokens: a prefill that shows


def expected(
    settings: dict[str, float], seqs: int, c: int, prompt_tokens: int, tokens: int
) -> tuple[float, float]:
    """(mean TTFT, mean TPOT) in seconds that the load model gives `c` streams at once."""
    ttft, work = settings["ttft_ms"] / 1000, prompt_tokens * settings["prefill_ms_per_token"] / 1000
    factor, full = settings["time_factor_under_load"], settings.get("full_load_seqs", seqs)

    def tpot(running: int) -> float:
        load = (running - 1) / (full - 1) if full > 1 else float(running > 1)
        return settings["tpot_ms"] / 1000 * (1 + (factor - 1) * min(1.0, load))

    first = min(c, seqs)
    decode = (tokens - 1) * tpot(first)
    ttfts = []
    for i in range(c):
        wave, k = divmod(i, seqs)
        if wave == 0:
            ttfts.append(ttft + (k + 1) * work)
        else:  # after the first wave's k-th ends, then each later wave's
            ttfts.append(
                ttft + (k + 1) * work + decode + (wave - 1) * (ttft + work + decode) + ttft + work
            )
    last = c % seqs or seqs  # the last wave may run fewer
    tpots = [tpot(first if i < c - last or c <= seqs else last) for i in range(c)]
    return statistics.fmean(ttfts), statistics.fmean(tpots)


def measure(target: harness.Endpoint, c: int, tokens: int) -> tuple[float, float]:
    body = {
        "model": spec().default_model,
        "prompt": PROMPT,
        "max_tokens": tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    got, _ = harness.streams(target, body, c)
    failed = [s.error for s in got if not s.done or s.ttft_s is None]
    if failed:
        raise RuntimeError(f"{len(failed)} of {c} streams failed: {failed[0]}")
    ttft = statistics.fmean(s.ttft_s for s in got if s.ttft_s is not None)
    tpot = statistics.fmean(
        (s.seconds - s.ttft_s) / (s.tokens - 1) for s in got if s.ttft_s is not None
    )
    return ttft, tpot


def plot(path: Path, rows: list[tuple[int, float, float, float, float]], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cs = [r[0] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (got, want), name in ((axes[0], (1, 3), "TTFT"), (axes[1], (2, 4), "TPOT")):
        ax.plot(cs, [r[want] * 1000 for r in rows], "-", color="gray", label="profile (expected)")
        ax.plot(cs, [r[got] * 1000 for r in rows], "o", color="tab:blue", label="mock (measured)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("streams at once")
        ax.set_ylabel(f"mean {name} (ms)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench mock_load", description=__doc__.splitlines()[0]
    )
    p.add_argument("--profile", default="llama-8b-h200", choices=sorted(PROFILES))
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--concurrency", default="1,2,4,8,16,32,64")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--out", type=Path, default=RESULTS / "mock_load.md")
    args = p.parse_args(argv)
    counts = [int(c) for c in args.concurrency.split(",")]
    profile = PROFILES[args.profile]
    prompt_tokens = sum(
        Contract(spec())
        .validate_completion({"model": spec().default_model, "prompt": PROMPT, "max_tokens": 1})
        .prompt_token_counts
    )
    server = harness.mock(
        "--workers",
        "1",
        "--load-profile",
        args.profile,
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--keepalive-seconds",
        "0",
        key="mock-load",
    )
    rows = []
    try:
        server.run(Path(tempfile.mkdtemp(prefix="mock-load-")))
        measure(
            server, 1, args.tokens
        )  # a first request warms the worker (its first validation, the tokenizer)
        for c in counts:
            ttft, tpot = measure(server, c, args.tokens)
            rows.append(
                (
                    c,
                    ttft,
                    tpot,
                    *expected(profile.settings, args.max_num_seqs, c, prompt_tokens, args.tokens),
                )
            )
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        server.stop()
    title = f"{args.profile}, max-num-seqs {args.max_num_seqs}, {prompt_tokens} prompt tokens, {args.tokens} tokens"
    png = args.out.with_suffix(".png")
    plot(png, rows, title)
    lines = [
        f"# The mock's load model: {title}",
        "",
        f"`{command_line('mock_load', list(argv) if argv is not None else sys.argv[1:])}`, "
        f"{datetime.date.today()}, {platform.node()}; `python -m mock_server --workers 1 "
        f"--load-profile {args.profile} --max-num-seqs {args.max_num_seqs}`.",
        "",
        f"The profile: {profile.what}; {profile.sources}. Its settings: {profile.settings}.",
        "",
        f"![TTFT and TPOT against concurrency]({png.name})",
        "",
        "| streams at once | mean TTFT (ms) | expected | mean TPOT (ms) | expected |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {c} | {t * 1000:.1f} | {et * 1000:.1f} | {tp * 1000:.2f} | {etp * 1000:.2f} |"
        for c, t, tp, et, etp in rows
    ]
    lines += [
        "",
        "TTFT is the client's, from the moment all streams of a step are opened (its "
        "connections and the mock's own work included, on two CPU cores shared with other work); "
        "TPOT is each stream's (end - first token) / (tokens - 1), averaged. Each wait is jittered "
        f"by up to {profile.settings.get('jitter', 0):.1%} (seeded), so a point may fall below the curve.",
    ]
    report = "\n".join(lines) + "\n"
    write_report(args.out, report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
