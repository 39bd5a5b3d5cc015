"""Each request of the mock observed in vLLM's metrics (metrics.py) when it ends, timed as
vLLM times it (vllm/v1/metrics/stats.py): arrival, scheduled (out of the queue), each
step's new token, the last token."""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from api_server.engine import Batches, ChoiceDelta, Engine, Event, StreamEvent, Usage
from contract import CompletionRequest

if TYPE_CHECKING:   # (imported by create_app: api_server/metrics.py says why)
    from mock_server.metrics import VllmMetrics


class RequestClock:
    """One request's times: its arrival, when it was scheduled (the load model's Loaded
    says; else at arrival), its first and its last token, and how it finished. `timed`: the
    mock simulates this request's latency, so its phases and the gap before each later step
    (a step is one token of every choice) are vLLM's engine timings to show; a request
    answered at once has none (each gap the microseconds of a write), and an observe a
    token costs about 5 us (bench/results/metrics_cost.md), so it is not timed."""

    __slots__ = ("start", "timed", "scheduled", "first", "last", "usage", "reason", "tokens", "steps", "owed",
                 "gaps", "_counts")

    def __init__(self, timed: bool = False) -> None:
        self.start = time.monotonic()
        self.timed = timed
        self.scheduled: float | None = None
        self.first: float | None = None
        self.last = 0.0
        self.usage: Usage | None = None
        self.reason = "abort"      # vLLM's finished_reason until a choice says how it finished
        self.tokens = 0            # tokens written so far (a stream its client left has no Usage)
        self.steps = 0             # the most tokens any one choice has had
        self.owed = 0              # steps of the last delta not yet out (latency.paced_steps)
        self.gaps: list[tuple[float, int]] = []   # (seconds, steps at that gap): vLLM's inter-token latencies
        self._counts: dict[int, int] = {}

    def _delta(self, event: ChoiceDelta, now: float) -> None:
        # A delta leaves after its first token's step; the steps of its later tokens are
        # waited before whatever comes next (latency.paced_steps), so they are timed then.
        self.tokens += len(event.token_ids)
        count = self._counts.get(event.index, 0) + max(1, len(event.token_ids))
        self._counts[event.index] = count
        if count <= self.steps:
            return
        self._settle(now)
        if self.first is None:
            self.first = now
        else:
            self.gaps.append((now - self.last, 1))
        self.last = now
        self.owed = count - self.steps - 1
        self.steps = count

    def _out(self, tokens: int, now: float) -> None:
        """Untimed: `tokens` out at `now`, the first and the last token's time all it keeps."""
        self.tokens += tokens
        self.last = now
        if self.first is None:
            self.first = now

    def _settle(self, now: float) -> None:
        if self.owed:
            self.gaps.append(((now - self.last) / self.owed, self.owed))
            self.last, self.owed = now, 0

    def see(self, event: StreamEvent) -> None:
        if isinstance(event, ChoiceDelta):
            now = time.monotonic()
            if self.timed:
                self._delta(event, now)
            else:
                self._out(len(event.token_ids), now)
            if event.finish_reason is not None:
                self.reason = event.finish_reason
        elif isinstance(event, Usage):
            self.usage = event
            if self.first is None:
                return
            if self.timed:   # the last token is out when the Usage comes
                self._settle(time.monotonic())
            else:
                self.last = time.monotonic()

    def see_batch(self, batch: Sequence[StreamEvent]) -> None:
        """A stream's batch: its events leave together, deltas first; the Usage comes after
        the last delta, followed at most by the Activations and an ErrorEvent. Untimed, it
        is looked at once but for its tokens' count (a look per event cost 0.5 us a token)."""
        if not batch:
            return
        now = time.monotonic()
        if self.timed:
            for event in batch:
                if type(event) is ChoiceDelta:
                    self._delta(event, now)
        else:
            tokens = sum(len(e.token_ids) for e in batch if type(e) is ChoiceDelta)
            if isinstance(batch[0], ChoiceDelta) or isinstance(batch[-1], ChoiceDelta):
                self._out(tokens, now)
            else:
                self.tokens += tokens
        for event in batch[-4:]:
            if isinstance(event, Usage):
                self.usage = event
                self._settle(now)
            elif isinstance(event, ChoiceDelta) and event.finish_reason is not None:
                self.reason = event.finish_reason


class Metered(Engine):
    """`engine`, its request observed in vLLM's metrics when it ends (or is left); `clock`
    is the request's, shared with the load model that schedules it."""

    def __init__(self, engine: Engine, metrics: VllmMetrics, model: str, clock: RequestClock | None = None) -> None:
        self.engine, self.metrics, self.model = engine, metrics, model
        self.clock = clock if clock is not None else RequestClock()

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        clock = self.clock
        try:
            for event in self.engine.generate(req, request_id):
                clock.see(event)
                yield event
        finally:
            self._observe(clock)

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        clock = self.clock
        batches = self.engine.stream(req, request_id, interval)
        try:
            for batch in batches:
                clock.see_batch(batch)
                yield batch
        finally:
            batches.close()
            self._observe(clock)

    def _observe(self, clock: RequestClock) -> None:
        m = self.metrics.model(self.model)
        if clock.first is not None:
            m.ttft.observe(clock.first - clock.start)
        for seconds, steps in clock.gaps:
            for _ in range(steps):   # vLLM observes one a step (the client has no count argument)
                m.itl.observe(seconds)
        m.success[clock.reason if clock.usage is not None else "abort"].inc()
        if clock.usage is None:
            if clock.tokens:
                m.generation_tokens.inc(clock.tokens)   # vLLM counts what it generated, read or not
            return
        m.prompt_tokens.inc(clock.usage.prompt_tokens)
        m.generation_tokens.inc(clock.usage.completion_tokens)
        m.e2e.observe(time.monotonic() - clock.start)
        if clock.first is None:
            return
        if clock.usage.completion_tokens > 1:
            m.tpot.observe((clock.last - clock.first) / (clock.usage.completion_tokens - 1))
        if clock.timed:
            scheduled = clock.scheduled if clock.scheduled is not None else clock.start
            m.queue.observe(scheduled - clock.start)
            m.prefill.observe(clock.first - scheduled)
            m.decode.observe(clock.last - clock.first)
            m.inference.observe(clock.last - scheduled)
