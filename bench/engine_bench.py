"""The fake engine's CPU per request and per generated token, before and after a change.

    .venv/bin/python -m bench engine [--before REV] [--rounds 7]   # writes bench/results/engine.md
    .venv/bin/python -m bench engine --cases allowed --before REV --rounds 1 --reps 1
        # requests with 1,000 to 100,000 allowed_token_ids: bench/results/engine-allowed.md

Runs the same timing script in this tree and in REV's (a git worktree, the same interpreter),
one after the other in one run: each case's FakeEngine.generate drained in-process (no HTTP),
the median of ROUNDS rounds; the cost per token is the difference between 512 and 16 tokens
over the 496 tokens between them.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.harness import ROOT, command_line
from bench.report import write_report

OUT = ROOT / "bench" / "results" / "engine.md"
ALLOWED_OUT = ROOT / "bench" / "results" / "engine-allowed.md"

# Run in each tree: prints {case: median seconds per request}.
SCRIPT = r"""
import json, random, statistics, sys, time
from contract import Contract, spec
from mock_server.engine.fake_engine import FakeEngine
api = spec()
model = api.models[api.default_model]
contract = Contract(api)
engine = FakeEngine(api, [model])
rounds, reps, which = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ids = random.Random(1).sample(range(model.vocab_size), 100000)
allowed = {
    f"16 tokens, {n:,} allowed ids{how}": {"max_tokens": 16, "ignore_eos": True,
                                          "allowed_token_ids": ids[:n], **fields}
    for n in (1000, 20000, 100000)
    for how, fields in ((", sampled", {"seed": 1}), (", greedy", {"temperature": 0}))
}
tokens = {
    "16 tokens": {"max_tokens": 16, "seed": 1, "ignore_eos": True},
    "512 tokens": {"max_tokens": 512, "seed": 1, "ignore_eos": True},
    "16 tokens, logprobs 5": {"max_tokens": 16, "seed": 1, "ignore_eos": True, "logprobs": 5},
    "512 tokens, logprobs 5": {"max_tokens": 512, "seed": 1, "ignore_eos": True, "logprobs": 5},
    "greedy 16, echo, logprobs 1": {"max_tokens": 16, "temperature": 0, "echo": True, "logprobs": 1},
}
cases = allowed if which == "allowed" else tokens
out = {}
for name, fields in cases.items():
    req = contract.validate_completion({"model": model.name, "prompt": "The capital of France is", **fields})
    for _ in range(min(3, reps)):
        list(engine.generate(req, "r"))
    times = []
    for _ in range(rounds):
        t = time.process_time()
        for _ in range(reps):
            list(engine.generate(req, "r"))
        times.append((time.process_time() - t) / reps)
    out[name] = statistics.median(times)
print(json.dumps(out))
"""


def measure(tree: Path, rounds: int, reps: int, cases: str) -> dict[str, float]:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(rounds), str(reps), cases],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench engine", description=__doc__.splitlines()[0])
    p.add_argument("--before", default="67e53b9~2", help="the revision to compare with")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--cases", choices=("tokens", "allowed"), default="tokens")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as tmp:
        before = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(before), args.before],
            cwd=ROOT,
            check=True,
        )
        try:
            old = measure(before, args.rounds, args.reps, args.cases)
            new = measure(ROOT, args.rounds, args.reps, args.cases)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False
            )
    lines = [
        "# The fake engine's CPU per request and per token, before and after",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, Python "
        f"{platform.python_version()}; `{command_line('engine_bench', argv or [])}`",
        "",
        f"FakeEngine.generate drained in-process, CPU time (process_time), the median of "
        f"{args.rounds} rounds of {args.reps}; before = {args.before}, after = this tree.",
        "",
        "| case | before (us) | after (us) | after / before |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in old:
        lines.append(
            f"| {name} | {old[name] * 1e6:.0f} | {new[name] * 1e6:.0f} | {new[name] / old[name]:.2f} |"
        )
    for suffix in ("", ", logprobs 5") if args.cases == "tokens" else ():
        a = (old[f"512 tokens{suffix}"] - old[f"16 tokens{suffix}"]) / 496
        b = (new[f"512 tokens{suffix}"] - new[f"16 tokens{suffix}"]) / 496
        lines.append(f"| per token{suffix} | {a * 1e6:.2f} | {b * 1e6:.2f} | {b / a:.2f} |")
    write_report(OUT if args.cases == "tokens" else ALLOWED_OUT, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
