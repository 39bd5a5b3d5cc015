"""The load model: vLLM's running batch and waiting queue, and latency that grows
with load (off unless --max-num-seqs is set, by itself or by a --load-profile).

A worker process holds one `Scheduler`. A request is n x prompts sequences, as vLLM
schedules each choice of each prompt. It takes that many places in the running batch
(at most max_num_seqs sequences; a request larger than the batch runs alone), or waits
in the queue, first come first served. vLLM 0.32's max_num_queued_reqs bounds the
sequences in flight, waiting plus running (AsyncLLM.check_admission: `current + n >
max_num_queued_reqs`): a request that would pass it is refused with 503
inference_unavailable (and Retry-After), and counted in vllm:admission_rejections.

Once running, its first token comes after the prefill: ttft_ms, then its prompt tokens at
prefill_ms_per_token each on one prefill timeline the whole batch shares (prefill is
bound by compute: prompts that arrive together are prefilled one after another, first
come first served). Each later step takes tpot_ms times the load factor: 1 with one
sequence running, rising linearly to time_factor_under_load with full_load_seqs running
(llm-d inference-sim's time-factor-under-load; full_load_seqs is the hardware's, a
profile's own max_num_seqs, so a smaller --max-num-seqs under a profile leaves its
per-token time alone). Each wait is jittered by up to `jitter` of itself, from a
generator seeded with load_seed.

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

from api_server.engine import Engine, Event
from contract import CompletionRequest, InferenceUnavailable
from mock_server.config import MockConfig
from mock_server.hook.latency import Paced, Steps, paced_steps, stepped_batches
from mock_server.hook.metered import RequestClock

if TYPE_CHECKING:  # (imported by create_app: api_server/metrics.py says why)
    from mock_server.hook.metrics import VllmMetrics


class Ticket:
    """One request's places, `seqs` sequences: running (its `turn` set, `scheduled` the
    time it was) or waiting for it."""

    __slots__ = ("turn", "running", "seqs", "scheduled")

    def __init__(self, seqs: int) -> None:
        self.turn = threading.Event()
        self.running = False
        self.seqs = seqs
        self.scheduled: float | None = None


RECHECK_S = 0.1  # how often a waiting request looks at the live limit


def sequences(req: CompletionRequest) -> int:
    """The sequences vLLM schedules for a request: each choice of each prompt."""
    return req.n * len(req.prompt_token_counts)


class Scheduler:
    """The running batch and the waiting queue of one worker process, in sequences, and
    the prefill timeline they share. `settings` gives the current MockConfig (live control
    may change the limits while it runs); `clock` is time.monotonic but in tests."""

    def __init__(
        self,
        settings: Callable[[], MockConfig],
        metrics: VllmMetrics | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.metrics, self.clock = settings, metrics, clock
        self.running = 0  # sequences
        self.queued = 0  # sequences waiting
        self.waiting: deque[Ticket] = deque()
        self.prefill_free = 0.0  # when the prefills already begun are done
        self._lock = threading.Lock()
        self.rng = random.Random(settings().load_seed)

    def enter(self, seqs: int = 1) -> Ticket:
        """Places for `seqs` sequences; 503 inference_unavailable when they would pass
        max_num_queued_reqs."""
        config = self.settings()
        ticket = Ticket(seqs)
        with self._lock:
            self._admit(config)  # a limit raised live: those waiting first
            limit = config.max_num_queued_reqs
            if limit is not None and self.running + self.queued + seqs > limit:
                if self.metrics is not None:
                    self.metrics.rejected()
                raise InferenceUnavailable.from_template("inference_unavailable")
            if self.waiting or not self._fits(ticket, config):
                self.waiting.append(ticket)
                self.queued += seqs
            else:
                self._start(ticket)
            self._report()
        return ticket

    def leave(self, ticket: Ticket) -> None:
        """The request ended (or its client left): its places go to the next waiting."""
        with self._lock:
            if ticket.running:
                self.running -= ticket.seqs
                ticket.running = False
            elif ticket in self.waiting:
                self.waiting.remove(ticket)
                self.queued -= ticket.seqs
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

    def _fits(self, ticket: Ticket, config: MockConfig) -> bool:
        """Whether the batch has the ticket's places free (every one with max_num_seqs turned
        off live; a ticket larger than the batch fits an empty one)."""
        return not self.running or self.running + ticket.seqs <= (config.max_num_seqs or math.inf)

    def _admit(self, config: MockConfig) -> None:
        """Those waiting, first come first served, into the free places of the batch."""
        while self.waiting and self._fits(self.waiting[0], config):
            ticket = self.waiting.popleft()
            self.queued -= ticket.seqs
            self._start(ticket)

    def _start(self, ticket: Ticket) -> None:
        self.running += ticket.seqs
        ticket.running = True
        ticket.scheduled = self.clock()
        ticket.turn.set()

    def _report(self) -> None:
        if self.metrics is not None:
            self.metrics.load(self.running, self.queued, self.settings().max_num_seqs or 0)

    def steps(self, req: CompletionRequest, ttft_s: float, tpot_s: float) -> Steps:
        """The waits of a running request: the prefill (its turn on the shared prefill
        timeline), then decode steps slowed by the sequences running at each step."""
        prompt_tokens = sum(req.prompt_token_counts)

        def step(n: int) -> float:
            c = self.settings()
            if n == 0:
                return self._jitter(
                    ttft_s + self._prefill(prompt_tokens * c.prefill_ms_per_token / 1000), c.jitter
                )
            full = c.full_load_seqs or c.max_num_seqs or 1
            load = (self.running - 1) / (full - 1) if full > 1 else float(self.running > 1)
            return self._jitter(
                tpot_s * (1 + (c.time_factor_under_load - 1) * min(1.0, load)), c.jitter
            )

        return step

    def _prefill(self, work_s: float) -> float:
        """Seconds until a prefill of `work_s` asked now is done, behind those begun before."""
        if not work_s:
            return 0.0
        with self._lock:
            now = self.clock()
            self.prefill_free = max(now, self.prefill_free) + work_s
            return self.prefill_free - now

    def _jitter(self, seconds: float, jitter: float) -> float:
        return seconds * (1 + jitter * self.rng.uniform(-1, 1)) if jitter else seconds


class Loaded(Paced):
    """`engine` as one request of a loaded mock runs it: its places in the batch (or the
    queue) first, then the prefill and decode steps of `Scheduler.steps`. `ttft_s` and
    `tpot_s` are the prefill's fixed part and a decode step with one sequence running
    (--ttft-ms, --tpot-ms, or this request's X-Mock-* headers); `clock`, the request's in
    vLLM's metrics, learns when it was scheduled."""

    def __init__(
        self,
        engine: Engine,
        scheduler: Scheduler,
        ttft_s: float,
        tpot_s: float,
        clock: RequestClock | None = None,
    ) -> None:
        super().__init__(engine)
        self.scheduler, self.ttft_s, self.tpot_s, self.clock = scheduler, ttft_s, tpot_s, clock

    def _scheduled(self, ticket: Ticket) -> None:
        if self.clock is not None:
            self.clock.scheduled = ticket.scheduled

    def paced(
        self, req: CompletionRequest, request_id: str, sleep: Callable[[float], object]
    ) -> Iterator[Event]:
        ticket = self.scheduler.enter(sequences(req))  # a full queue raises here: an HTTP 503
        try:
            self.scheduler.wait(ticket)
            self._scheduled(ticket)
            yield from paced_steps(
                self.engine.generate(req, request_id),
                self.scheduler.steps(req, self.ttft_s, self.tpot_s),
                sleep,
            )
        finally:
            self.scheduler.leave(ticket)

    def batches(
        self, req: CompletionRequest, request_id: str, interval: float
    ) -> Generator[list[Event], None, None]:
        ticket = self.scheduler.enter(sequences(req))  # raised before the first batch: an HTTP 503
        try:
            while not self.scheduler.wait(ticket, interval):
                yield []  # waiting in the queue: a keepalive
            self._scheduled(ticket)
            yield from stepped_batches(
                self.engine.generate(req, request_id),
                self.scheduler.steps(req, self.ttft_s, self.tpot_s),
                interval,
            )
        finally:
            self.scheduler.leave(ticket)
