"""The load model: vLLM's running batch and waiting queue, and latency that grows
with load (off unless --max-num-seqs is set, by itself or by a --load-profile).

A worker process holds one `Scheduler`. A request takes a place in the running
batch (at most max_num_seqs), or waits in the queue, first come first served; with
max_num_queued_reqs waiting already, it is refused with 503 inference_unavailable
(and Retry-After), as vLLM refuses a request when its queue is full. Once running,
its first token comes after the prefill (ttft_ms, plus prefill_ms_per_token for each
prompt token), and each later step after tpot_ms times the load factor: 1 with one
sequence running, rising linearly to time_factor_under_load with max_num_seqs running
(llm-d inference-sim's time-factor-under-load). Each wait is jittered by up to
`jitter` of itself, from a generator seeded with load_seed. A request counts as one
sequence whatever its n and prompts (vLLM counts each choice).

The limits are per worker process: with --workers N the mock runs N batches and N
queues (see the README); `--workers 1` gives one, as one vLLM engine has.
"""
from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING

from api_server.engine import Batches, Engine, Event
from api_server.pacing import Pump
from contract import CompletionRequest, InferenceUnavailable
from mock_server.config import MockConfig
from mock_server.latency import Steps, paced_steps, stepped_batches

if TYPE_CHECKING:   # (imported by create_app: api_server/metrics.py says why)
    from mock_server.metrics import VllmMetrics


class Ticket:
    """One request's place: running (its `turn` set) or waiting for it."""

    __slots__ = ("turn", "running")

    def __init__(self) -> None:
        self.turn = threading.Event()
        self.running = False


RECHECK_S = 0.1   # how often a waiting request looks at the live limit


class Scheduler:
    """The running batch and the waiting queue of one worker process. `settings` gives
    the current MockConfig (live control may change the limits while it runs)."""

    def __init__(self, settings: Callable[[], MockConfig], metrics: VllmMetrics | None) -> None:
        self.settings, self.metrics = settings, metrics
        self.running = 0
        self.waiting: deque[Ticket] = deque()
        self._lock = threading.Lock()
        self.rng = random.Random(settings().load_seed)

    def enter(self) -> Ticket:
        """A place for one request; 503 inference_unavailable when the queue is full."""
        config = self.settings()
        ticket = Ticket()
        with self._lock:
            self._admit(config)   # a limit raised live: those waiting first
            if self.waiting or self.running >= (config.max_num_seqs or 1):
                limit = config.max_num_queued_reqs
                if limit is not None and len(self.waiting) >= limit:
                    raise InferenceUnavailable.from_template("inference_unavailable")
                self.waiting.append(ticket)
            else:
                self._start(ticket)
            self._report()
        return ticket

    def leave(self, ticket: Ticket) -> None:
        """The request ended (or its client left): its place goes to the next waiting."""
        with self._lock:
            if ticket.running:
                self.running -= 1
                ticket.running = False
            elif ticket in self.waiting:
                self.waiting.remove(ticket)
            self._admit(self.settings())
            self._report()

    def wait(self, ticket: Ticket, timeout: float | None = None) -> bool:
        """Until the ticket runs (True) or `timeout` passes (False). A waiting ticket looks
        at the live limit every RECHECK_S: raised while nothing ends, it admits those waiting
        into the slots it frees, not at the next request's end."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while not ticket.turn.wait(min(RECHECK_S, max(deadline - time.monotonic(), 0))):
            if time.monotonic() >= deadline:
                return False
            with self._lock:
                self._admit(self.settings())
                self._report()
        return True

    def _admit(self, config: MockConfig) -> None:
        """Those waiting, first come first served, into the free slots of the batch (every
        one with max_num_seqs turned off live)."""
        limit = config.max_num_seqs or math.inf
        while self.waiting and self.running < limit:
            self._start(self.waiting.popleft())

    def _start(self, ticket: Ticket) -> None:
        self.running += 1
        ticket.running = True
        ticket.turn.set()

    def _report(self) -> None:
        if self.metrics is not None:
            self.metrics.load(self.running, len(self.waiting), self.settings().max_num_seqs or 0)

    def steps(self, req: CompletionRequest, ttft_s: float, tpot_s: float) -> Steps:
        """The waits of a running request: the prefill, then decode steps slowed by the
        batch running at each step."""
        config = self.settings()
        prefill_s = ttft_s + sum(req.prompt_token_counts) * config.prefill_ms_per_token / 1000

        def step(n: int) -> float:
            c = self.settings()
            seqs = c.max_num_seqs or 1
            if n == 0:
                return self._jitter(prefill_s, c.jitter)
            load = (self.running - 1) / (seqs - 1) if seqs > 1 else 0.0
            return self._jitter(tpot_s * (1 + (c.time_factor_under_load - 1) * min(1.0, load)), c.jitter)
        return step

    def _jitter(self, seconds: float, jitter: float) -> float:
        return seconds * (1 + jitter * self.rng.uniform(-1, 1)) if jitter else seconds


class Loaded(Engine):
    """`engine` as one request of a loaded mock runs it: a place in the batch (or the
    queue) first, then the prefill and decode steps of `Scheduler.steps`. `ttft_s` and
    `tpot_s` are the prefill's fixed part and a decode step with one sequence running
    (--ttft-ms, --tpot-ms, or this request's X-Mock-* headers)."""

    def __init__(self, engine: Engine, scheduler: Scheduler, ttft_s: float, tpot_s: float) -> None:
        self.engine, self.scheduler, self.ttft_s, self.tpot_s = engine, scheduler, ttft_s, tpot_s

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        return self._generate(req, request_id, time.sleep)

    def _generate(self, req: CompletionRequest, request_id: str,
                  sleep: Callable[[float], object]) -> Iterator[Event]:
        ticket = self.scheduler.enter()   # a full queue raises here: an HTTP 503
        try:
            self.scheduler.wait(ticket)
            yield from paced_steps(self.engine.generate(req, request_id),
                                   self.scheduler.steps(req, self.ttft_s, self.tpot_s), sleep)
        finally:
            self.scheduler.leave(ticket)

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        if self.engine.never_waits:   # the waits in the request's own greenlet
            return self._batches(req, request_id, interval)
        return Pump(lambda sleep: self._generate(req, request_id, sleep), interval).batches()

    def _batches(self, req: CompletionRequest, request_id: str,
                 interval: float) -> Generator[list[Event], None, None]:
        ticket = self.scheduler.enter()   # raised before the first batch: an HTTP 503
        try:
            while not self.scheduler.wait(ticket, interval):
                yield []   # waiting in the queue: a keepalive
            yield from stepped_batches(self.engine.generate(req, request_id),
                                       self.scheduler.steps(req, self.ttft_s, self.tpot_s), interval)
        finally:
            self.scheduler.leave(ticket)
