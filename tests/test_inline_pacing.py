"""The fake engine's paced stream in the request's own thread (completions.Schedule and
_inline_batches): waits between events, a keepalive ([]) for each quiet interval, events
ready together in one batch, and no catching up after a late step. A fake clock, so no
test waits on the wall clock."""
from __future__ import annotations

import pytest

from api_server import completions
from api_server.completions import Schedule, _inline_batches
from api_server.engine import ChoiceDelta, Usage
from mock_server.latency import paced


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
    monkeypatch.setattr(completions.time, "monotonic", c.monotonic)
    monkeypatch.setattr(completions.time, "sleep", c.sleep)
    return c


def deltas(count: int) -> list[ChoiceDelta]:
    return [ChoiceDelta(0, f"t{i}", [i]) for i in range(count)]


def test_waits_send_a_keepalive_per_interval_and_ready_events_leave_together(clock: Clock) -> None:
    events = [*deltas(3), Usage(1, 3)]
    schedule = Schedule()
    batches = list(_inline_batches(paced(iter(events), 2.5, 0.5, schedule), schedule, 1.0))
    # 2.5 s to the first token: two quiet intervals, then the token; 0.5 s before each
    # later one; the usage is ready with the last token.
    assert batches == [[], [], [events[0]], [events[1]], [events[2], events[3]]]
    assert clock.sleeps == [1.0, 1.0, 0.5, 0.5, 0.5]


def test_a_late_step_does_not_wait_and_is_not_caught_up(clock: Clock) -> None:
    events = deltas(3)
    schedule = Schedule()
    out = []
    for batch in _inline_batches(paced(iter(events), 0.0, 0.5, schedule), schedule, 10.0):
        out.append(batch)
        if batch == [events[0]]:
            clock.now += 2.0   # the write of the first token took 2 s (a busy server)
    assert out == [[events[0]], [events[1]], [events[2]]]
    assert clock.sleeps == [0.5]   # the second token at once, the third 0.5 s after it


def test_without_a_schedule_events_leave_in_one_batch(clock: Clock) -> None:
    events = [*deltas(2), Usage(1, 2)]
    assert list(_inline_batches(iter(events))) == [events]
    assert clock.sleeps == []
