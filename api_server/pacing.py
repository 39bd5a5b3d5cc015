"""How an engine's events become a stream's batches (`Engine.stream`'s default).

An engine's iterator may block (a real Inference in the reference implementation).
The stream must still send `: keepalive` while it waits, so the iterator runs in a
thread (`Pump`) and the response reads a list with a timeout. Closing the stream (the
client went away) cancels the thread. An engine whose events never wait (the fake one)
needs none of it: `batched` runs its iterator in the request's own thread or greenlet
(a pump thread and a hand-off per token cost more CPU than the rest of a stream).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Generic, TypeVar, cast

T = TypeVar("T")

# Items the iterator may hand over before its thread yields (a greenlet's switch under gevent).
YIELD_EVERY = 16
BATCH = 256  # items per list at most: Pump's maxsize, and batched's


class Flush:
    """An item of `batched`'s iterator that is no item: the list so far leaves now, and
    an empty one (a keepalive) when nothing is in it. FLUSH is the one instance."""


FLUSH = Flush()


def batched(items: Iterator[T | Flush], size: int = BATCH) -> Generator[list[T], None, None]:
    """`items` in lists of `size`, read in the caller's thread, as Pump.batches gives
    them: what the iterator raises comes after the items before it, so only an error
    before the first item reaches the caller's first `next`; FLUSH ends a list early
    (a paced engine's next event is not due yet: latency.stepped_batches). Closing
    closes `items`."""
    batch: list[T] = []
    try:
        for item in items:
            if item is FLUSH:  # the one Flush (identity: no call a token, as isinstance is)
                yield batch
                batch = []
                continue
            batch.append(cast(T, item))
            if len(batch) == size:
                yield batch
                batch = []
    except Exception:
        if batch:
            yield batch
        raise
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()
    if batch:
        yield batch


class _End:
    """Sentinel: the iterator finished (error holds what it raised, if anything)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class Pump(Generic[T]):
    """Runs an iterator in a daemon thread; `batches` yields lists of ready items,
    or an empty list when `interval` seconds pass with nothing.

    The hand-off is one list under a lock and two events: the reader takes every
    ready item at once, and the thread wakes it only when the list was empty (a
    queue.Queue costs a lock round trip and a wake-up per item). Events, not a
    Condition: Condition.wait allocates a lock per wait, and under gevent (the
    default worker) an Event is a greenlet primitive with one timer per wait."""

    def __init__(
        self,
        make: Callable[[Callable[[float], object]], Iterator[T]],
        interval: float,
        maxsize: int = BATCH,
    ) -> None:
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._ready = threading.Event()  # set exactly while _items is not empty
        self._room = threading.Event()  # set when the reader took a full list
        self._items: list[T | _End] = []
        self._maxsize = maxsize
        self._interval = interval
        # The iterator sleeps through `cancelled.wait`, so cancelling wakes it at once.
        self._thread = threading.Thread(target=self._run, args=(make,), daemon=True)
        self._thread.start()

    def _put(self, item: T | _End) -> bool:
        while True:
            with self._lock:
                if self.cancelled.is_set():
                    return False
                if len(self._items) < self._maxsize:
                    self._items.append(item)
                    if len(self._items) == 1:
                        self._ready.set()  # the reader waits only on an empty list
                    return True
                self._room.clear()
            self._room.wait(0.1)

    def _run(self, make: Callable[[Callable[[float], object]], Iterator[T]]) -> None:
        it: Iterator[T] | None = None
        try:
            it = make(self.cancelled.wait)
            since_yield = 0
            for item in it:
                if self.cancelled.is_set() or not self._put(item):
                    return
                # Under gevent this "thread" is a greenlet: while vLLM's stream has data
                # ready it would never block, and the response (which notices a client
                # that left) would not run. Yield after every YIELD_EVERY items: not after
                # each, so that the items vLLM sent while this process was busy (already
                # read, or waiting in the socket) leave in one write, not one write each.
                since_yield += 1
                if since_yield == YIELD_EVERY:
                    since_yield = 0
                    time.sleep(0)
            self._put(_End())
        except BaseException as exc:  # handed to the reader, which answers with an error event
            self._put(_End(exc))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

    def batches(self) -> Generator[list[T], None, None]:
        """Lists of items as they come; [] for each keepalive interval without one.
        Raises what the iterator raised, after the items before it."""
        try:
            while True:
                if not self._ready.is_set():
                    self._ready.wait(self._interval)
                with self._lock:
                    items, self._items = self._items, []
                    self._ready.clear()
                if items:
                    self._room.set()  # room again for a thread waiting on a full list
                if not items:
                    yield []
                    continue
                batch: list[T] = []
                for item in items:
                    if isinstance(item, _End):
                        if batch:
                            yield batch
                        if item.error is not None:
                            raise item.error
                        return
                    batch.append(item)
                yield batch
        finally:
            self.cancelled.set()
