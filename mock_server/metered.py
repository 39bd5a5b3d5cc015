"""Each request of the mock observed in vLLM's metrics (metrics.py) when it ends."""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from api_server.engine import Batches, ChoiceDelta, Engine, Event, StreamEvent, Usage
from contract import CompletionRequest

if TYPE_CHECKING:   # (imported by create_app: api_server/metrics.py says why)
    from mock_server.metrics import VllmMetrics


class _Clock:
    """One request's times: from its start, its first and its last token; how it finished."""

    __slots__ = ("start", "first", "last", "usage", "reason", "tokens")

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.first: float | None = None
        self.last = 0.0
        self.usage: Usage | None = None
        self.reason = "abort"      # vLLM's finished_reason until a choice says how it finished
        self.tokens = 0            # tokens written so far (a stream its client left has no Usage)

    def see(self, event: StreamEvent) -> None:
        if isinstance(event, ChoiceDelta):
            self.last = time.monotonic()
            self.tokens += len(event.token_ids)
            if self.first is None:
                self.first = self.last
            if event.finish_reason is not None:
                self.reason = event.finish_reason
        elif isinstance(event, Usage):
            # without stream a delta holds a whole choice, its later tokens' steps waited
            # after it (latency.paced_steps): the last token is out when the Usage comes
            self.usage = event
            if self.first is not None:
                self.last = time.monotonic()

    def see_batch(self, batch: Sequence[StreamEvent]) -> None:
        """A stream's batch, looked at once but for its tokens' count (a look per event cost
        0.5 us a token): the
        events of a batch leave together, deltas first; the Usage comes after the last
        delta, followed at most by the Activations and an ErrorEvent."""
        if not batch:
            return
        self.tokens += sum(len(e.token_ids) for e in batch if type(e) is ChoiceDelta)
        if isinstance(batch[0], ChoiceDelta) or isinstance(batch[-1], ChoiceDelta):
            self.last = time.monotonic()
            if self.first is None:
                self.first = self.last
        for event in batch[-4:]:
            if isinstance(event, Usage):
                self.usage = event
            elif isinstance(event, ChoiceDelta) and event.finish_reason is not None:
                self.reason = event.finish_reason


class Metered(Engine):
    """`engine`, its requests observed in vLLM's metrics when they end (or are left)."""

    def __init__(self, engine: Engine, metrics: VllmMetrics, model: str) -> None:
        self.engine, self.metrics, self.model = engine, metrics, model

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        clock = _Clock()
        try:
            for event in self.engine.generate(req, request_id):
                clock.see(event)
                yield event
        finally:
            self._observe(clock)

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        clock = _Clock()
        batches = self.engine.stream(req, request_id, interval)
        try:
            for batch in batches:
                clock.see_batch(batch)
                yield batch
        finally:
            batches.close()
            self._observe(clock)

    def _observe(self, clock: _Clock) -> None:
        m = self.metrics.model(self.model)
        if clock.first is not None:
            m.ttft.observe(clock.first - clock.start)
        m.success[clock.reason if clock.usage is not None else "abort"].inc()
        if clock.usage is not None:
            m.prompt_tokens.inc(clock.usage.prompt_tokens)
            m.generation_tokens.inc(clock.usage.completion_tokens)
            m.e2e.observe(time.monotonic() - clock.start)
            if clock.first is not None and clock.usage.completion_tokens > 1:
                m.tpot.observe((clock.last - clock.first) / (clock.usage.completion_tokens - 1))
        elif clock.tokens:
            m.generation_tokens.inc(clock.tokens)   # vLLM counts what it generated, read or not

