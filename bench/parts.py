"""The mock's own path, part by part: each part's CPU per request and per token, timed alone.

    .venv/bin/python -m bench parts [--rounds 5] [--out bench/results/parts.md]

Issue 56 asks that a goal not met come with each component's cost measured, not inferred.
bench.served_profile splits a served worker's CPU by sampling; this times each part of the
mock's own path apart, in a child process set up as a served worker is (gevent's monkey patch,
whose locks prometheus_client takes, and prometheus_client's multiprocess mode, where each value
is an mmap write): each part's CPU (time.process_time), the median of ROUNDS rounds, each round
timing every part in turn. A part per token is the difference between 40 and 2 tokens over the
38 between, as bench.stream_cost splits a stream. The whole apps (the mock's and the bare
Flask app's WSGI callables, http_bench's two cases one request at a time) say what each app
costs without a server around it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import harness
from bench.harness import ROOT, command_line
from bench.report import write_report

OUT = ROOT / "bench" / "results" / "parts.md"
SHORT, LONG = 2, 40

# (key, what it is, per "request" or "token")
PARTS = (
    ("validate", "validate_completion: the schema, the rules, the caps, the tokenizer", "request"),
    ("plan", "FakeEngine.plan: the request planned once (sampling and output)", "request"),
    ("seed", "a fresh generator seeded from os.urandom (an unseeded sampled request)", "request"),
    ("generate_greedy", "FakeEngine.generate: a 16-token greedy completion, whole", "request"),
    ("sample_greedy", "... of it, sample_choice", "request"),
    ("stream_setup", "FakeEngine.generate: a sampled stream, less its tokens", "request"),
    ("observe_untimed", "vLLM's metrics for a completion (Metered, less the engine)", "request"),
    ("observe_stream", "vLLM's metrics for a paced stream, less its tokens", "request"),
    ("app_mock_b", "the mock's WSGI app, a 16-token completion (http_bench's b)", "request"),
    ("app_bare_b", "the bare Flask app's, the same", "request"),
    ("app_mock_a", "the mock's WSGI app, a 400 (http_bench's a)", "request"),
    ("app_bare_a", "the bare Flask app's, the same", "request"),
    ("sample_token", "sample_choice, temperature 1", "token"),
    ("deltas_token", "FakeEngine.generate's deltas, less sampling", "token"),
    ("assemble_token", "Assembler.feed + chunk: the SSE event", "token"),
    (
        "clock_token",
        "Recording.see, untimed: a step's counts, less its inter-token latency",
        "token",
    ),
    ("itl_token", "vLLM's metrics for a paced stream, less the step's counts", "token"),
    ("pacing_token", "the pacing (latency.stepped_batches), less a bare sleep a token", "token"),
)
PACED = 500  # streams paced at once, each in its own greenlet


def _interleaved(
    timers: dict[str, tuple[Callable[[], object], int]], rounds: int
) -> dict[str, float]:
    """Each timer's CPU per call in us, the median of `rounds`; each round times every timer
    once, in turn, so that this machine's drifts (its speed changes by half within minutes)
    fall on all parts alike rather than on the ones timed at a slow moment."""
    import statistics

    for fn, _ in timers.values():
        fn()  # warm: the first call builds tables
    seen: dict[str, list[float]] = {key: [] for key in timers}
    for _ in range(rounds):
        for key, (fn, number) in timers.items():
            before = time.process_time()
            for _ in range(number):
                fn()
            seen[key].append((time.process_time() - before) / number * 1e6)
    return {key: statistics.median(values) for key, values in seen.items()}


def _measure(rounds: int) -> dict[str, float]:
    """In this (child) process, set up as a served worker: each part's median, in us."""
    from gevent import monkey

    monkey.patch_all()
    import random

    import gevent

    from api_server.engine import ChoiceDelta, Engine
    from api_server.metrics import new_registry
    from api_server.responses import Assembler, Meta
    from contract import Contract, spec
    from mock_server.engine.fake_engine import FakeEngine, causal_model
    from mock_server.engine.sampler import sample_choice
    from mock_server.hook.latency import fixed, stepped_batches
    from mock_server.hook.metered import Metered, Recording, RequestClock
    from mock_server.hook.metrics import VllmMetrics

    api = spec()
    model = api.models[api.default_model]
    contract = Contract(api)
    engine = FakeEngine(api, [model])
    metrics = VllmMetrics(new_registry(), [model], api.metrics)
    cm = causal_model(model, engine.eos_rate)

    def request(tokens: int, greedy: bool, stream: bool) -> Any:
        body: dict[str, Any] = {"model": model.name, "prompt": "The sky is", "max_tokens": tokens}
        body.update({"temperature": 0} if greedy else {"ignore_eos": True})
        return contract.validate_completion({**body, "stream": stream})

    completion = request(16, True, False)
    body = dict(completion.body)
    sized = {SHORT: request(SHORT, False, True), LONG: request(LONG, False, True)}
    long = sized[LONG]
    prompt = long.prompts[0]
    deltas = [e for e in engine.generate(long, "req_bench") if isinstance(e, ChoiceDelta)]

    def sample(req: Any) -> Callable[[], object]:
        settings = engine.plan(req).settings
        return lambda: sample_choice(cm, prompt, random.Random(1).random, settings)

    def drain(req: Any) -> Callable[[], object]:
        return lambda: list(engine.generate(req, "req_bench"))

    def assemble() -> None:
        asm = Assembler(long, Meta("cmpl-bench", model.name))
        for delta in deltas:
            asm.feed(delta)
            asm.chunk(delta)

    def clocked(tokens: int) -> Callable[[], object]:
        def one() -> None:
            rec = Recording(metrics.model(model.name), long, RequestClock(loaded=True))
            for delta in deltas[:tokens]:
                rec.see((delta,), time.monotonic())

        return one

    class Replay(Engine):
        """The events of one request again, each its own batch in a stream (one step each)."""

        never_waits = True

        def __init__(self, events: list[Any]) -> None:
            self.events = events

        def generate(self, req: Any, request_id: str) -> Any:
            return iter(self.events)

        def stream(self, req: Any, request_id: str, interval: float) -> Any:
            return ([event] for event in self.events)

    def replayed(req: Any, stream: bool, wrap: bool) -> Callable[[], object]:
        """The events of `req` replayed, inside Metered (its clock and its metrics at the end,
        as a served request's) or alone."""
        replay = Replay(list(engine.generate(req, "req_bench")))

        def one() -> None:
            clock = RequestClock(timed=stream)
            inner = Metered(replay, metrics, model.name, clock) if wrap else replay
            if stream:
                list(inner.stream(req, "req_bench", 60.0))
            else:
                list(inner.generate(req, "req_bench"))

        return one

    def paced(mock: bool) -> Callable[[], object]:
        """PACED streams of the deltas 2 ms apart, each in its greenlet: paced by the mock's
        generators, or by a bare loop that sleeps as long and yields a list a token."""

        def stream() -> None:
            if mock:
                for _ in stepped_batches(iter(deltas), fixed(0, 0.002), 60.0):
                    pass
                return
            for delta in deltas:
                time.sleep(0.002)
                [delta]  # noqa: B018 (the list a bare stream hands on)

        return lambda: gevent.joinall([gevent.spawn(stream) for _ in range(PACED)])

    timers: dict[str, tuple[Callable[[], object], int]] = {
        "validate": (lambda: contract.validate_completion(body), 2000),
        "plan": (lambda: engine.plan(completion), 2000),
        "seed": (lambda: random.Random(os.urandom(16)).random, 2000),
        "generate_greedy": (drain(completion), 2000),
        "sample_greedy": (sample(completion), 2000),
        "assemble": (assemble, 200),
        "completion_metered": (replayed(completion, False, True), 2000),
        "completion_replayed": (replayed(completion, False, False), 2000),
        "paced_mock": (paced(True), 1),
        "paced_bare": (paced(False), 1),
    }
    for n, req in sized.items():
        timers[f"drain_{n}"] = (drain(req), 1000)
        timers[f"sample_{n}"] = (sample(req), 1000)
        timers[f"clock_{n}"] = (clocked(n), 500)
        timers[f"stream_metered_{n}"] = (replayed(req, True, True), 500)
        timers[f"stream_replayed_{n}"] = (replayed(req, True, False), 500)
    timers.update(_whole_apps())
    t = _interleaved(timers, rounds)

    def per_token(key: str) -> float:
        return (t[f"{key}_{LONG}"] - t[f"{key}_{SHORT}"]) / (LONG - SHORT)

    out = {key: t[key] for key in ("validate", "plan", "seed", "generate_greedy", "sample_greedy")}
    out |= {key: value for key, value in t.items() if key.startswith("app_")}
    out["sample_token"] = per_token("sample")
    out["deltas_token"] = per_token("drain") - out["sample_token"]
    out["stream_setup"] = t[f"drain_{SHORT}"] - SHORT * per_token("drain")
    out["assemble_token"] = t["assemble"] / len(deltas)
    out["clock_token"] = per_token("clock")
    out["observe_untimed"] = t["completion_metered"] - t["completion_replayed"]
    metered = {n: t[f"stream_metered_{n}"] - t[f"stream_replayed_{n}"] for n in sized}
    metered_token = (metered[LONG] - metered[SHORT]) / (LONG - SHORT)
    out["itl_token"] = metered_token - out["clock_token"]
    out["observe_stream"] = metered[SHORT] - SHORT * metered_token
    out["pacing_token"] = (t["paced_mock"] - t["paced_bare"]) / (PACED * len(deltas))
    return out


def _call(app: Any, environ: dict[str, Any], raw: bytes) -> int:
    """One request through a WSGI callable, its body read whole: the status."""
    statuses: list[str] = []
    body = app(
        {**environ, "wsgi.input": io.BytesIO(raw)},
        lambda status, headers, exc_info=None: statuses.append(status),
    )
    try:
        b"".join(body)
    finally:
        getattr(body, "close", lambda: None)()
    return int(statuses[0].split()[0])


def _whole_apps() -> dict[str, tuple[Callable[[], object], int]]:
    """Each of http_bench's cases, one request at a time, through the mock's and the bare
    app's WSGI callables in this process: what each app costs without a server around it."""
    from functools import partial

    from bench.http_servers import CASES
    from bench.servers.bare_app import app as bare
    from mock_server import create_app

    timers: dict[str, tuple[Callable[[], object], int]] = {}
    for name, app in {"mock": create_app(), "bare": bare}.items():
        for case in CASES:
            raw = json.dumps(case.body).encode()
            environ = harness.wsgi_environ(raw)
            status = _call(app, environ, raw)
            if status != case.expect_status:
                raise RuntimeError(f"{name} answered {status} to case {case.key}")
            timers[f"app_{name}_{case.key}"] = (partial(_call, app, environ, raw), 1000)
    return timers


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
        f"- Each part's CPU timed alone, the median of {rounds} rounds (each round times every part "
        "in turn); per token: the "
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
