"""Waits that share their wake-up, as the streams of one engine step come out together.

A paced stream waits for its next token's time (latency._on_time). Under gevent each wait was
a timer of its own: 2,000 streams at 100 ms a token started and stopped 20,000 timers a
second. Here every wait due within the same GRAIN (a millisecond, rounded up: never early)
waits on one Event, set by one timer: a worker's streams whose steps fall together wake in
one turn of the loop. Without gevent's time (threads: werkzeug, gthread) a wait is
time.sleep, as before.
"""

from __future__ import annotations

import math
import time

from gevent import get_hub, monkey
from gevent.event import Event

GRAIN = 0.001  # seconds: waits due within one grain share a wake-up


class Ticks:
    """The shared wake-ups of one process, keyed by their grain."""

    def __init__(self) -> None:
        self._due: dict[int, Event] = {}
        self.timers = 0  # timers started, ever (the sharing, seen from a test)

    def sleep_until(self, due: float) -> None:
        """Returns at `due` (time.monotonic) or within a grain after it."""
        left = due - time.monotonic()
        if left <= 0:
            return
        if not monkey.is_module_patched("time"):
            time.sleep(left)
            return
        key = math.ceil(due / GRAIN)
        event = self._due.get(key)
        if event is None:
            event = self._due[key] = Event()
            timer = get_hub().loop.timer(max(key * GRAIN - time.monotonic(), 0.0))
            timer.start(self._fire, key, timer)
            self.timers += 1
        event.wait()
        left = due - time.monotonic()
        if left > 0:  # the loop's clock may lag the monotonic one: never early
            time.sleep(left)

    def _fire(self, key: int, timer: object) -> None:
        self._due.pop(key).set()
        timer.close()  # type: ignore[attr-defined]


TICKS = Ticks()
