"""Each request of the mock observed in vLLM's metrics (metrics.py) when it ends, timed as
vLLM times it (vllm/v1/metrics/stats.py): arrival, scheduled (out of the queue), each
step's new token, the last token.

As vLLM 0.32 counts them, an API request is an engine request per prompt and per sample of
`n` (vllm/v1/engine/parallel_sampling.py: a parent and its children): each child adds its own
success with its own finish reason, its latencies, and its prompt's tokens, counted at prefill
(its first token), so a stream its client left still counts the prompt it prefilled."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from api_server.engine import Batches, ChoiceDelta, Engine, Event, StreamEvent, Usage
from contract import CompletionRequest

if TYPE_CHECKING:  # (imported by create_app: api_server/metrics.py says why)
    from mock_server.metrics import VllmMetrics


class RequestClock:
    """One request's times: its arrival, when it was scheduled (the load model's Loaded
    says; else at arrival), its first and its last token, and how it finished. `timed`: the
    mock simulates this request's latency, so its phases and the gap before each later step
    (a step is one token of every choice) are vLLM's engine timings to show; a request
    answered at once has none (each gap the microseconds of a write), and an observe a
    token costs about 5 us (bench/results/metrics_cost.md), so it is not timed."""

    __slots__ = (
        "start",
        "timed",
        "scheduled",
        "first",
        "last",
        "usage",
        "reason",
        "tokens",
        "steps",
        "owed",
        "gaps",
        "reasons",
        "_counts",
    )

    def __init__(self, timed: bool = False, start: float | None = None) -> None:
        self.start = time.monotonic() if start is None else start
        self.timed = timed
        self.scheduled: float | None = None
        self.first: float | None = None
        self.last = 0.0
        self.usage: Usage | None = None
        self.reason = "abort"  # vLLM's finished_reason until a choice says how it finished
        self.tokens = 0  # tokens written so far (a stream its client left has no Usage)
        self.steps = 0  # the most tokens any one choice has had
        self.owed = 0  # steps of the last delta not yet out (latency.paced_steps)
        self.gaps: list[
            tuple[float, int]
        ] = []  # (seconds, steps at that gap): vLLM's inter-token latencies
        self.reasons: dict[int, str] = {}  # each finished choice's finish_reason
        self._counts: dict[int, int] = {}  # tokens of each choice

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
        self.last = now
        if self.first is None:
            self.first = now

    def _settle(self, now: float) -> None:
        if self.owed:
            self.gaps.append(((now - self.last) / self.owed, self.owed))
            self.last, self.owed = now, 0

    def _choice(self, event: ChoiceDelta) -> None:
        if not self.timed:
            self.tokens += len(event.token_ids)
            self._counts[event.index] = self._counts.get(event.index, 0) + len(event.token_ids)
        if event.finish_reason is not None:
            self.reason = self.reasons[event.index] = event.finish_reason

    def choice_tokens(self, index: int) -> int:
        return self._counts.get(index, 0)

    def see(self, event: StreamEvent) -> None:
        if isinstance(event, ChoiceDelta):
            now = time.monotonic()
            self._choice(event)
            if self.timed:
                self._delta(event, now)
            else:
                self._out(len(event.token_ids), now)
        elif isinstance(event, Usage):
            self.usage = event
            if self.first is None:
                return
            if self.timed:  # the last token is out when the Usage comes
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
        deltas = [e for e in batch if isinstance(e, ChoiceDelta)]
        for delta in deltas:
            self._choice(delta)
        if self.timed:
            for delta in deltas:
                self._delta(delta, now)
        elif deltas:
            self._out(0, now)
        for event in batch[-4:]:
            if isinstance(event, Usage):
                self.usage = event
                self._settle(now)


class Metered(Engine):
    """`engine`, its request observed in vLLM's metrics when it ends (or is left); `clock`
    is the request's, shared with the load model that schedules it."""

    def __init__(
        self, engine: Engine, metrics: VllmMetrics, model: str, clock: RequestClock | None = None
    ) -> None:
        self.engine, self.metrics, self.model = engine, metrics, model
        self.clock = clock if clock is not None else RequestClock()

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        clock = self.clock
        try:
            for event in self.engine.generate(req, request_id):
                clock.see(event)
                yield event
        finally:
            self._observe(clock, req)

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        clock = self.clock
        batches = self.engine.stream(req, request_id, interval)
        try:
            for batch in batches:
                clock.see_batch(batch)
                yield batch
        finally:
            batches.close()
            self._observe(clock, req)

    def _observe(self, clock: RequestClock, req: CompletionRequest) -> None:
        """Each engine request (a prompt's sample) as vLLM observes it when it ends."""
        m = self.metrics.model(self.model)
        n = req.n
        children = len(req.prompts) * n
        now = time.monotonic()
        prefilled = clock.first is not None  # vLLM prefills every child before its first token
        for _ in range(children if prefilled else 0):
            m.ttft.observe(clock.first - clock.start)  # type: ignore[operator]
        for seconds, steps in clock.gaps:
            for _ in range(steps * children):  # one a step and a child (no count argument)
                m.itl.observe(seconds)
        if prefilled:
            m.prompt_tokens.inc(sum(req.prompt_token_counts) * n)
        m.generation_tokens.inc(
            clock.tokens if clock.usage is None else clock.usage.completion_tokens
        )
        scheduled = clock.scheduled if clock.scheduled is not None else clock.start
        for index in range(children):
            reason = clock.reasons.get(index)
            if clock.usage is None or reason is None:
                m.success["abort"].inc()
                continue
            m.success[reason].inc()
            m.e2e.observe(now - clock.start)
            if clock.first is None:
                continue
            tokens = clock.choice_tokens(index) if not clock.timed else clock.steps
            if tokens > 1:
                m.tpot.observe((clock.last - clock.first) / (tokens - 1))
            if clock.timed:
                m.queue.observe(scheduled - clock.start)
                m.prefill.observe(clock.first - scheduled)
                m.decode.observe(clock.last - clock.first)
                m.inference.observe(clock.last - scheduled)
