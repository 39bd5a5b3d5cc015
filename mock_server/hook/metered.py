"""Each request of the mock observed in vLLM's metrics (metrics.py) as vLLM records them: per
engine step, while it runs (vllm/v1/metrics/stats.py, IterationStats), and when it ends
(update_from_finished_request).

As vLLM 0.32 counts them, an API request is an engine request per prompt and per sample of
`n` (vllm/v1/engine/parallel_sampling.py: a parent and its children). Each child is prefilled
before its first token (its prompt's tokens counted then, and looked up in the prefix cache),
gets one inter-token latency per token after its first (a child of 2 tokens beside one of 20
gets 1, not 19), and ends with its own finish reason and latencies; each parent observes its
`n` and its longest child once. A step is one token of every running choice: choices of one
request advance together, as in a batch, so a child's k-th token is at the request's step k.

The token counters and the time to first token and between tokens move as the tokens leave,
so a scrape during a stream counts what its client has received. A delta that carries several
tokens (the fake engine's whole choices without stream) takes a step per token: the steps
after its first are timed when the next event comes (latency.paced_steps waits them then)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from api_server.engine import Batches, ChoiceDelta, Engine, Event, StreamEvent, Usage
from contract import CompletionRequest

if TYPE_CHECKING:  # (imported by create_app: api_server/metrics.py says why)
    from mock_server.hook.metrics import ModelMetrics, VllmMetrics


class RequestClock:
    """One request's arrival and when it was scheduled (the load model's Loaded says; else
    at arrival). `timed`: the mock simulates this request's latency, so the gaps between its
    steps and its phases are vLLM's engine timings to show; a request answered at once has
    none (each gap the microseconds of a write), and an observe a token costs about 5 us
    (bench/results/metrics_cost.md), so its inter-token latencies and phases are not observed.
    `loaded`: the load model keeps the running and waiting gauges and the KV cache's share."""

    __slots__ = ("start", "timed", "scheduled", "loaded")

    def __init__(
        self, timed: bool = False, start: float | None = None, loaded: bool = False
    ) -> None:
        self.start = time.monotonic() if start is None else start
        self.timed = timed
        self.loaded = loaded
        self.scheduled: float | None = None


class Recording:
    """One request's engine requests (each prompt's `n` children) recorded in `m` as their
    steps go: `see` each batch of events as it leaves, `end` once."""

    def __init__(self, m: ModelMetrics, req: CompletionRequest, clock: RequestClock) -> None:
        self.m, self.req, self.clock = m, req, clock
        self.n = req.n
        children = len(req.prompts) * req.n
        self.counts = [0] * children  # steps each child has had (a delta without tokens: one)
        self.tokens = [0] * children  # tokens each child has generated
        self.done = [0] * children  # steps of each child recorded
        self.cached = [0] * children  # prompt tokens each child found in the prefix cache
        self.held = [0] * children  # KV blocks each child holds (the load model's: none)
        self.reasons: list[str | None] = [None] * children
        self.times: list[float] = []  # each step's time, as far as known
        self.owed = 0  # steps begun whose time is not known yet
        self.usage: Usage | None = None
        self.pending: set[int] = set()  # children with steps not yet recorded
        if not clock.loaded:
            m.running.inc(children)

    def see(self, batch: Sequence[StreamEvent], now: float) -> None:
        """Events that left together at `now`: each delta's tokens counted, the steps they
        reach recorded."""
        new = prefilled = 0
        for event in batch:
            if isinstance(event, ChoiceDelta):
                j = event.index
                got = len(event.token_ids)
                new += got
                self.tokens[j] += got
                count = self.counts[j] = self.counts[j] + max(1, got)
                if event.finish_reason is not None:
                    self.reasons[j] = event.finish_reason
                if count > len(self.times) + self.owed:
                    self._settle(now)
                    self.times.append(now)
                    self.owed = count - len(self.times)
                self.pending.add(j)
            elif isinstance(event, Usage):
                self.usage = event
                self._settle(now)
        if self.pending:
            prefilled = self._record()
        if new:
            self.m.generation_tokens.inc(new)
        if new or prefilled:
            self.m.iteration.observe(new + prefilled)

    def _settle(self, now: float) -> None:
        """The steps owed, spread evenly from the last known one to `now`."""
        if self.owed:
            last = self.times[-1]
            gap = (now - last) / self.owed
            self.times.extend(last + gap * (i + 1) for i in range(self.owed))
            self.owed = 0

    def _record(self) -> int:
        """Each pending child's steps whose times are known: a first token prefills the child
        (the prompt tokens it computed are returned); each later one is an inter-token latency."""
        m, times, known, timed = self.m, self.times, len(self.times), self.clock.timed
        computed = 0
        for j in list(self.pending):
            done, count = self.done[j], self.counts[j]
            upto = min(count, known)
            if done == 0 and upto:
                computed += self._prefill(j)
                m.ttft.observe(times[0] - self.clock.start)
                done = 1
            if timed:
                for s in range(done, upto):  # step s + 1's gap
                    m.itl.observe(times[s] - times[s - 1])
            self.done[j] = upto
            if upto == count:
                self.pending.discard(j)
            if not self.clock.loaded and upto:
                self._hold(j)
        return computed

    def _prompt(self, j: int) -> Sequence[int]:
        return self.req.prompts[j // self.n]

    def _prefill(self, j: int) -> int:
        """Child `j` scheduled and prefilled: its prompt looked up in the prefix cache and
        counted by source; the tokens it computed."""
        m, prompt = self.m, self._prompt(j)
        hits = self.cached[j] = m.kv.prefill(prompt)
        computed = len(prompt) - hits
        m.prefix_queries.inc(len(prompt))
        m.prompt_tokens.inc(len(prompt))
        m.prompt_by_source["local_compute"].inc(computed)
        if hits:
            m.prefix_hits.inc(hits)
            m.prompt_cached.inc(hits)
            m.prompt_by_source["local_cache_hit"].inc(hits)
            m.cached_by_source["device"].inc(hits)
        return computed

    def _hold(self, j: int) -> None:
        """Child `j`'s KV blocks: its prompt's (less those it shares from the prefix cache)
        and its tokens'."""
        kv = self.m.kv
        blocks = kv.blocks(len(self._prompt(j)) + self.tokens[j]) - self.cached[j] // kv.block_size
        if blocks != self.held[j]:
            self.m.kv_cache.set(kv.hold(blocks - self.held[j]))
            self.held[j] = blocks

    def end(self) -> None:
        """The request ended (or its client left): each child finished as vLLM observes it,
        each parent's `n` and longest child, and its places freed."""
        m, clock, now = self.m, self.clock, time.monotonic()
        self._settle(now)
        if self.pending:
            self._record()
        times = self.times
        scheduled = clock.scheduled if clock.scheduled is not None else clock.start
        finished: list[bool] = []
        for j, reason in enumerate(self.reasons):
            if self.usage is None or reason is None or not self.done[j]:
                m.success["abort"].inc()
                finished.append(False)
                continue
            finished.append(True)
            m.success[reason].inc()
            m.e2e.observe(now - clock.start)
            first, last, k = times[0], times[self.done[j] - 1], self.tokens[j]
            if k > 1:
                m.tpot.observe((last - first) / (k - 1))
            m.request_prompt.observe(len(self._prompt(j)))
            m.request_generation.observe(k)
            m.params_max_tokens.observe(self.req.max_tokens)
            m.kv_computed.observe(len(self._prompt(j)) - self.cached[j])
            m.request_preemptions.observe(0)  # the mock never preempts
            if clock.timed:
                m.queue.observe(scheduled - clock.start)
                m.prefill.observe(first - scheduled)
                m.decode.observe(last - first)
                m.inference.observe(last - scheduled)
        for p in range(len(self.req.prompts)):
            children = range(p * self.n, (p + 1) * self.n)
            if all(finished[j] for j in children):
                m.params_n.observe(self.n)
                m.max_generation.observe(max(self.tokens[j] for j in children))
        if not clock.loaded:
            m.running.dec(len(self.reasons))
            held = sum(self.held)
            if held:
                m.kv_cache.set(m.kv.hold(-held))


class Metered(Engine):
    """`engine`, its request recorded in vLLM's metrics as its steps go and when it ends (or
    is left); `clock` is the request's, shared with the load model that schedules it."""

    def __init__(
        self, engine: Engine, metrics: VllmMetrics, model: str, clock: RequestClock | None = None
    ) -> None:
        self.engine, self.metrics, self.model = engine, metrics, model
        self.clock = clock if clock is not None else RequestClock()

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        rec = Recording(self.metrics.model(self.model), req, self.clock)
        try:
            for event in self.engine.generate(req, request_id):
                rec.see((event,), time.monotonic())
                yield event
        finally:
            rec.end()

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        rec = Recording(self.metrics.model(self.model), req, self.clock)
        batches = self.engine.stream(req, request_id, interval)
        try:
            for batch in batches:
                if batch:
                    rec.see(batch, time.monotonic())
                yield batch
        finally:
            batches.close()
            rec.end()
