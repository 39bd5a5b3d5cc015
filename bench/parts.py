"""The mock's own path, part by part: each part's CPU per request and per token, timed alone.

    .venv/bin/python -m bench parts [--rounds 5] [--out bench/results/parts.md]

Issue 56 asks that a goal not met come with each component's cost measured, not inferred.
bench.served_profile splits a served worker's CPU by sampling; this times each part of the
mock's own path apart, in a child process set up as a served worker is (gevent's monkey patch,
whose locks prometheus_client takes, and prometheus_client's multiprocess mode, where each value
is an mmap write): the median of ROUNDS rounds of timeit. A part per token is the difference
between 40 and 2 tokens over the 38 between, as bench.stream_cost splits a stream.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import ROOT, command_line
from bench.report import write_report

OUT = ROOT / "bench" / "results" / "parts.md"
SHORT, LONG = 2, 40

# (key, what it is, per "request" or "token")
PARTS = (
    ("validate", "validate_completion: the schema, the rules, the caps, the tokenizer", "request"),
    ("settings", "FakeEngine.settings: the sampling settings", "request"),
    ("seed", "a fresh generator seeded from os.urandom (an unseeded sampled request)", "request"),
    ("generate_greedy", "FakeEngine.generate: a 16-token greedy completion, whole", "request"),
    ("sample_greedy", "... of it, sample_choice", "request"),
    ("stream_setup", "FakeEngine.generate: a sampled stream, less its tokens", "request"),
    ("observe_untimed", "vLLM's metrics at a completion's end (Metered._observe)", "request"),
    ("observe_stream", "vLLM's metrics at a paced stream's end, less its gaps", "request"),
    ("sample_token", "sample_choice, temperature 1", "token"),
    ("deltas_token", "FakeEngine.generate's deltas, less sampling", "token"),
    ("assemble_token", "Assembler.feed + chunk: the SSE event", "token"),
    ("clock_token", "RequestClock.see_batch: the step's time", "token"),
    ("itl_token", "vllm:inter_token_latency_seconds.observe, at the stream's end", "token"),
    ("pacing_token", "the pacing (latency.stepped_batches), less a bare sleep a token", "token"),
)
PACED = 500  # streams paced at once, each in its own greenlet


def _measure(rounds: int) -> dict[str, float]:
    """In this (child) process, set up as a served worker: each part's median, in us."""
    from gevent import monkey

    monkey.patch_all()
    import random
    import statistics
    import timeit

    import gevent

    from api_server.engine import ChoiceDelta, Usage
    from api_server.metrics import new_registry
    from api_server.responses import Assembler, Meta
    from contract import Contract, spec
    from mock_server.fake_engine import FakeEngine, causal_model
    from mock_server.latency import fixed, stepped_batches
    from mock_server.metered import Metered, RequestClock
    from mock_server.metrics import VllmMetrics
    from mock_server.sampler import sample_choice

    api = spec()
    model = api.models[api.default_model]
    contract = Contract(api)
    engine = FakeEngine(api, [model])
    metrics = VllmMetrics(new_registry(), [model.name])
    cm = causal_model(model, engine.eos_rate)

    def request(tokens: int, greedy: bool, stream: bool) -> Any:
        body: dict[str, Any] = {"model": model.name, "prompt": "The sky is", "max_tokens": tokens}
        body.update({"temperature": 0} if greedy else {"ignore_eos": True})
        return contract.validate_completion({**body, "stream": stream})

    def median_us(fn: Any, number: int = 2000) -> float:
        fn()
        return (
            statistics.median(timeit.timeit(fn, number=number) / number for _ in range(rounds))
            * 1e6
        )

    completion = request(16, True, False)
    body = dict(completion.body)
    short, long = request(SHORT, False, True), request(LONG, False, True)
    prompt = long.prompts[0]

    def sample(settings: Any) -> Any:
        return lambda: sample_choice(cm, prompt, random.Random(1).random, settings)

    def drain(req: Any) -> Any:
        return lambda: list(engine.generate(req, "req_bench"))

    out: dict[str, float] = {
        "validate": median_us(lambda: contract.validate_completion(body)),
        "settings": median_us(lambda: engine.settings(completion)),
        "seed": median_us(lambda: random.Random(os.urandom(16)).random),
        "generate_greedy": median_us(drain(completion)),
        "sample_greedy": median_us(sample(engine.settings(completion))),
    }
    per = {n: median_us(drain(r)) for n, r in ((SHORT, short), (LONG, long))}
    sampling = {n: median_us(sample(engine.settings(r))) for n, r in ((SHORT, short), (LONG, long))}
    out["sample_token"] = (sampling[LONG] - sampling[SHORT]) / (LONG - SHORT)
    out["deltas_token"] = (per[LONG] - per[SHORT]) / (LONG - SHORT) - out["sample_token"]
    out["stream_setup"] = per[SHORT] - SHORT * (out["sample_token"] + out["deltas_token"])

    deltas = [e for e in engine.generate(long, "req_bench") if isinstance(e, ChoiceDelta)]

    def assemble() -> None:
        asm = Assembler(long, Meta("cmpl-bench", model.name))
        for delta in deltas:
            asm.feed(delta)
            asm.chunk(delta)

    out["assemble_token"] = median_us(assemble, 200) / len(deltas)

    def clocked(tokens: int) -> RequestClock:
        clock = RequestClock(timed=True)
        for delta in deltas[:tokens]:
            clock.see_batch([delta])
        return clock

    out["clock_token"] = (
        median_us(lambda: clocked(LONG), 500) - median_us(lambda: clocked(SHORT), 500)
    ) / (LONG - SHORT)
    metered = Metered(engine, metrics, model.name)
    untimed = RequestClock()
    for event in engine.generate(completion, "req_bench"):
        untimed.see(event)
    out["observe_untimed"] = median_us(lambda: metered._observe(untimed, completion))
    ends = {n: clocked(n) for n in (SHORT, LONG)}
    for n, clock in ends.items():
        clock.reasons[0], clock.usage = "length", Usage(4, n)
    observed = {
        n: median_us(lambda n=n: metered._observe(ends[n], long if n == LONG else short), 500)
        for n in ends
    }
    out["itl_token"] = (observed[LONG] - observed[SHORT]) / (LONG - SHORT)
    out["observe_stream"] = observed[SHORT] - (SHORT - 1) * out["itl_token"]

    def paced_cpu(paced: bool) -> float:
        """CPU of PACED streams of the deltas 2 ms apart, each in its greenlet: paced by the
        mock's generators, or by a bare loop that sleeps as long and yields a list a token."""

        def one() -> None:
            if paced:
                for _ in stepped_batches(iter(deltas), fixed(0, 0.002), 60.0):
                    pass
                return
            for delta in deltas:
                time.sleep(0.002)
                [delta]  # noqa: B018 (the list a bare stream hands on)

        before = time.process_time()
        gevent.joinall([gevent.spawn(one) for _ in range(PACED)])
        return time.process_time() - before

    cpu = {
        paced: statistics.median(paced_cpu(paced) for _ in range(rounds)) for paced in (True, False)
    }
    out["pacing_token"] = (cpu[True] - cpu[False]) / (PACED * len(deltas)) * 1e6
    return out


def measure(rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-parts-") as folder:
        done = subprocess.run(
            [sys.executable, "-m", "bench.parts", "--inner", str(rounds)],
            cwd=ROOT,
            env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": folder},
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(done.stdout.splitlines()[-1])


def markdown(values: dict[str, float], rounds: int, cmd: str) -> str:
    lines = [
        "# The mock's own path, part by part",
        "",
        f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- Command: `{cmd}`",
        f"- Machine: {os.cpu_count()} cores; one child process, gevent's monkey patch and "
        "prometheus_client's multiprocess mode, as a served worker",
        f"- Each part timed alone (timeit), the median of {rounds} rounds; per token: the "
        f"difference between {LONG} and {SHORT} tokens over the {LONG - SHORT} between",
        "",
    ]
    for unit in ("request", "token"):
        lines += [f"| per {unit} | us |", "| --- | ---: |"]
        lines += [f"| {what} | {values[key]:.2f} |" for key, what, u in PARTS if u == unit]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="rounds of each part (default 5)")
    p.add_argument("--inner", type=int, help=argparse.SUPPRESS)  # ROUNDS: the child's run
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    if args.inner is not None:
        print(json.dumps(_measure(args.inner)))
        return 0
    values = measure(args.rounds)
    write_report(
        args.out, markdown(values, args.rounds, command_line("parts", argv or sys.argv[1:]))
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
