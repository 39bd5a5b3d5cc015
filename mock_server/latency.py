"""Simulated latency: the mock's time to first token and per output token."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from api_server.engine import ChoiceDelta, Event


def paced(events: Iterator[Event], ttft_s: float, tpot_s: float,
          sleep: Callable[[float], object] = time.sleep) -> Iterator[Event]:
    """`events` with a wait before the first token and before each later step.

    A step is one token of every running choice: choices of one request advance
    together, as in a batch, so n choices take as long as one.
    """
    if not ttft_s and not tpot_s:
        return events   # no latency asked for: no extra generator per event
    return _paced(events, ttft_s, tpot_s, sleep)


def _paced(events: Iterator[Event], ttft_s: float, tpot_s: float,
           sleep: Callable[[float], object]) -> Iterator[Event]:
    # A delta may carry several tokens (the fake engine's whole choices without
    # stream): it takes one step per token. Steps so far = the most tokens any one
    # choice has had; each new step waits (the first ttft_s, the others tpot_s).
    counts: dict[int, int] = {}
    steps = 0
    for event in events:
        if isinstance(event, ChoiceDelta):
            count = counts.get(event.index, 0) + max(1, len(event.token_ids))
            counts[event.index] = count
            while steps < count:
                sleep(ttft_s if steps == 0 else tpot_s)
                steps += 1
        yield event
