"""Simulated latency: the mock's time to first token and per output token.

The waits are `Steps`: the seconds before each step (0: the first token). Fixed ones
come from --ttft-ms/--tpot-ms and the X-Mock-* headers; the load model's (load.py)
depend on the prompt and on how many sequences run at each step."""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Generator, Iterator
from typing import TypeAlias

from api_server.engine import Batches, ChoiceDelta, Engine, Event
from api_server.pacing import BATCH, FLUSH, Flush, Pump, batched
from contract import CompletionRequest

Steps: TypeAlias = Callable[[int], float]  # seconds to wait before step n (0: the first token)


def fixed(ttft_s: float, tpot_s: float) -> Steps:
    return lambda step: ttft_s if step == 0 else tpot_s


class Paced(Engine):
    """`engine` as one request of the mock runs it, its events after waits of the
    wrapper's own (a latency asked for, the load model's queue and steps). The one place
    a wrapper picks where its waits happen: `generate` waits with time.sleep; `stream`
    waits in the request's own greenlet when `engine` never waits (`batches`: a pump and
    a hand-off per token would cost more CPU than the rest of a paced stream), else in a
    pump, whose sleep cancelling wakes (`paced` with the pump's sleep)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @abstractmethod
    def paced(
        self, req: CompletionRequest, request_id: str, sleep: Callable[[float], object]
    ) -> Iterator[Event]:
        """The events, each after its wait, waited with `sleep`."""

    @abstractmethod
    def batches(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        """The stream's batches in the request's own greenlet (`engine` never waits),
        [] for each quiet `interval`."""

    def generate(self, req: CompletionRequest, request_id: str) -> Iterator[Event]:
        return self.paced(req, request_id, time.sleep)

    def stream(self, req: CompletionRequest, request_id: str, interval: float) -> Batches:
        if self.engine.never_waits:
            return self.batches(req, request_id, interval)
        return Pump(lambda sleep: self.paced(req, request_id, sleep), interval).batches()


def paced(
    events: Iterator[Event],
    ttft_s: float,
    tpot_s: float,
    sleep: Callable[[float], object] = time.sleep,
) -> Iterator[Event]:
    """`events` with a wait before the first token and before each later step.

    A step is one token of every running choice: choices of one request advance
    together, as in a batch, so n choices take as long as one.
    """
    if not ttft_s and not tpot_s:
        return events  # no latency asked for: no extra generator per event
    return paced_steps(events, fixed(ttft_s, tpot_s), sleep)


def paced_steps(
    events: Iterator[Event], steps: Steps, sleep: Callable[[float], object] = time.sleep
) -> Iterator[Event]:
    """`events` with `steps(n)` seconds waited before step n."""
    # A delta may carry several tokens (the fake engine's whole choices without
    # stream): it takes one step per token. Steps so far = the most tokens any one
    # choice has had; each new step waits steps(n). A delta leaves after its first
    # token's step, and the steps of its later tokens are waited before what follows
    # it: the same time in all, and its first token comes when an engine's would
    # (vLLM's time to first token, stream or not: metered.py reads it).
    counts: dict[int, int] = {}
    done = owed = 0
    for event in events:
        while done < owed:
            sleep(steps(done))
            done += 1
        if isinstance(event, ChoiceDelta):
            count = counts.get(event.index, 0) + max(1, len(event.token_ids))
            counts[event.index] = count
            if done < count:
                sleep(steps(done))
                done += 1
            owed = max(owed, count)
        yield event
    while done < owed:
        sleep(steps(done))
        done += 1


class Schedule:
    """The `sleep` a paced engine runs with in the request's own thread: it only notes
    when the next event is due, and paced_batches waits until then between events,
    with a keepalive for each quiet interval. The waits keep to one schedule from the
    request's start, as an engine's steps would (the writes between them do not add up);
    an event that is already late leaves at once, and the next step is due after it
    (no burst to catch up)."""

    def __init__(self) -> None:
        self.due = time.monotonic()

    def __call__(self, seconds: float) -> None:
        self.due += seconds


def paced_batches(
    events: Iterator[Event], ttft_s: float, tpot_s: float, interval: float
) -> Generator[list[Event], None, None]:
    return stepped_batches(events, fixed(ttft_s, tpot_s), interval)


def stepped_batches(
    events: Iterator[Event], steps: Steps, interval: float
) -> Generator[list[Event], None, None]:
    """A stream's batches (Engine.stream) of `events`, an engine's that never waits,
    paced in the request's own thread: an event not yet due ends the batch before it,
    and the wait for it (time.sleep: a greenlet's under gevent) yields [] for each
    `interval` without one. A pump thread (a greenlet under gevent) and a hand-off per
    token would cost more CPU than the rest of a paced stream. What `events` raises
    comes after the events before it (pacing.batched makes the lists)."""
    return batched(_on_time(events, steps, interval))


def _on_time(events: Iterator[Event], steps: Steps, interval: float) -> Iterator[Event | Flush]:
    """`events`, each when it is due, with FLUSH for the events before a wait and for
    each quiet `interval` (a keepalive)."""
    schedule = Schedule()
    waiting = 0  # events since the last list left (batched sends one every BATCH)
    try:
        for event in paced_steps(events, steps, schedule):
            if waiting and schedule.due > time.monotonic():
                yield FLUSH  # the events before it leave now
                waiting = 0
            left = schedule.due - time.monotonic()  # after the write above
            while left > interval:
                time.sleep(interval)
                yield FLUSH
                left = schedule.due - time.monotonic()
            if left > 0:
                time.sleep(left)
            else:  # late: the next step counts from now
                schedule.due = time.monotonic()
            yield event
            waiting = (waiting + 1) % BATCH
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
