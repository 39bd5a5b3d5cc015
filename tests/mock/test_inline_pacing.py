"""A stream in the request's own thread: the fake engine's paced stream (the mock's
latency.paced_batches: waits between events, a keepalive ([]) for each quiet interval,
events ready together in one batch, no catching up after a late step), and an unpaced
one (pacing.batched, Engine.stream's default for an engine that never waits). A fake
clock, so no test waits on the wall clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from api_server.engine import ChoiceDelta, Event, Usage
from api_server.pacing import BATCH, FLUSH, batched
from mock_server.hook import latency
from mock_server.hook.latency import paced_batches, stepped_batches


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(latency.time, "monotonic", c.monotonic)
    monkeypatch.setattr(latency.time, "sleep", c.sleep)
    return c


def deltas(count: int) -> list[ChoiceDelta]:
    return [ChoiceDelta(0, f"t{i}", [i]) for i in range(count)]


def test_waits_send_a_keepalive_per_interval_and_ready_events_leave_together(clock: Clock) -> None:
    events = [*deltas(3), Usage(1, 3)]
    batches = list(paced_batches(iter(events), 2.5, 0.5, 1.0))
    # 2.5 s to the first token: two quiet intervals, then the token; 0.5 s before each
    # later one; the usage is ready with the last token.
    assert batches == [[], [], [events[0]], [events[1]], [events[2], events[3]]]
    assert clock.sleeps == [1.0, 1.0, 0.5, 0.5, 0.5]


def test_a_late_step_does_not_wait_and_is_not_caught_up(clock: Clock) -> None:
    events = deltas(3)
    out = []
    for batch in paced_batches(iter(events), 0.0, 0.5, 10.0):
        out.append(batch)
        if batch == [events[0]]:
            clock.now += 2.0  # the write of the first token took 2 s (a busy server)
    assert out == [[events[0]], [events[1]], [events[2]]]
    assert clock.sleeps == [0.5]  # the second token at once, the third 0.5 s after it


def test_without_waits_events_leave_in_batches_of_the_pumps_size(clock: Clock) -> None:
    events = [*deltas(BATCH), Usage(1, BATCH)]
    assert list(batched(iter(events))) == [events[:BATCH], events[BATCH:]]
    assert clock.sleeps == []


def test_flush_sends_the_batch_so_far_and_an_empty_one_as_a_keepalive(clock: Clock) -> None:
    events = deltas(3)
    items = iter([events[0], events[1], FLUSH, FLUSH, events[2]])
    assert list(batched(items)) == [events[:2], [], events[2:]]
    # a paced stream whose first wait comes right after a full batch sends no empty batch for it
    late = stepped_batches(iter(deltas(BATCH + 1)), lambda step: 0.0 if step < BATCH else 0.5, 10.0)
    assert [len(b) for b in late] == [BATCH, 1]
    assert clock.sleeps == [0.5]


def failing_after(events: list[Event]) -> Iterator[Event]:
    yield from events
    raise RuntimeError("engine down")


Batching = Callable[[Iterator[Event]], Iterator[list[Event]]]


@pytest.mark.parametrize("make", [batched, lambda events: paced_batches(events, 0.0, 0.5, 10.0)])
def test_an_error_comes_after_the_events_before_it(clock: Clock, make: Batching) -> None:
    """So an error before the first event reaches the route's first `next` (an HTTP error),
    and a later one is an error event after the chunks before it."""
    events = deltas(2)
    batches = make(failing_after(events))
    got = []
    with pytest.raises(RuntimeError, match="engine down"):
        for batch in batches:
            got.extend(batch)
    assert got == events
    with pytest.raises(RuntimeError, match="engine down"):
        next(make(failing_after([])))
