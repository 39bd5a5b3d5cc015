"""Counters and histograms counted in the process and written to prometheus_client in
batches: the metrics of api_server/metrics.py and of the mock's vLLM names.

Why: under gunicorn, prometheus_client runs in its multiprocess mode (serve.prepare),
where each write of a value takes a lock, reads the pid and packs the value into a
file, about 1.2 us under gevent. A 16-token completion wrote ten (two acs_* counters;
vLLM's two counters and three histograms, a histogram a bucket and a sum each): about
15 us of its CPU (bench/results/http_house.md). Here a request queues its amounts
(a deque's append: the queue is safe for gthread's threads without a lock), and a
flush adds them up and writes each label set's total once.

A flush runs before this process's metrics are read (`Tally.read`, `exposition`), every FLUSH_S
seconds in multiprocess mode (a thread started by the first count in each process,
since gunicorn forks its workers after the app is built), when the process exits, and
whenever FLUSH_AT amounts are waiting. So a scrape sees its own process's counts at
once, another worker's at most FLUSH_S late.

A histogram is written as two counters, `NAME:bucket` (by `le`, each bucket's own
count) and `NAME:sum`: prometheus_client's Histogram has no way to add many
observations in one write. `Tally.read` turns the two back into NAME's histogram, with
its cumulative buckets, `_count` and `_sum`, as the Histogram class would expose it.
"""
from __future__ import annotations

import atexit
import bisect
import os
import threading
import time
import weakref
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Callable, Generic, Protocol, TypeVar

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
FLUSH_S = 1.0       # how late another worker's counts may be in a scrape
FLUSH_AT = 4096     # amounts waiting that are written at once, in any mode (a bound on the queue)
BUCKET, SUM = ":bucket", ":sum"   # the counters a histogram is written as


class _Written(Protocol):
    def write(self, amounts: list[float]) -> None: ...


class Tally:
    """The queue of one registry's counts. `counter`, `counters` and `histograms` define
    metrics in `registry`; `read` and `exposition` are what a scrape shows."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.queue: deque[tuple[_Written, float]] = deque()
        self.started = False   # this process's flusher (reset in a forked child)
        self._lock = threading.Lock()
        self._histograms: dict[str, Histogram] = {}
        _TALLIES.add(self)

    def counter(self, name: str, doc: str) -> Count:
        """A counter without labels."""
        return Count(self, Counter(name, doc, registry=self.registry))

    def counters(self, name: str, doc: str, labels: Sequence[str]) -> Labelled[Count]:
        """A counter with labels: a Count for each label set."""
        counter = Counter(name, doc, list(labels), registry=self.registry)
        return Labelled(lambda *values: Count(self, counter.labels(*values)))

    def histograms(self, name: str, doc: str, labels: Sequence[str], buckets: Sequence[float]) -> Labelled[Observed]:
        """A histogram with labels and these upper bounds (+Inf added): an Observed for each label set."""
        found = self._histograms[name] = Histogram(self, name, doc, list(labels), buckets)
        return Labelled(found.labels)

    def add(self, target: _Written, amount: float) -> None:
        self.queue.append((target, amount))
        if not self.started:
            self._start()
        elif len(self.queue) >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Write what is queued: one write for each counter's label set, and for each
        bucket of a histogram that has new observations."""
        with self._lock:
            waiting: defaultdict[_Written, list[float]] = defaultdict(list)
            queue = self.queue
            while queue:
                target, amount = queue.popleft()
                waiting[target].append(amount)
            for target, amounts in waiting.items():
                target.write(amounts)

    def read(self, source: CollectorRegistry | None = None) -> Iterator[Metric]:
        """The metrics of `source` (the registry by default; a multiprocess collector's
        registry under gunicorn), after a flush, with each histogram whole again."""
        self.flush()
        families = list((source or self.registry).collect())
        parts = {f.name: f for f in families if f.name.endswith((BUCKET, SUM))}
        for family in families:
            if family.name.endswith(BUCKET) and family.name[:-len(BUCKET)] in self._histograms:
                name = family.name[:-len(BUCKET)]
                yield self._histograms[name].family(family, parts.get(name + SUM))
            elif not (family.name.endswith(SUM) and family.name[:-len(SUM)] in self._histograms):
                yield family

    def exposition(self, source: CollectorRegistry | None = None) -> bytes:
        """`read`'s metrics in Prometheus' text format."""
        return generate_latest(_Read(self, source))  # type: ignore[arg-type]

    def _start(self) -> None:
        """The first count in this process: in multiprocess mode, a flusher every FLUSH_S
        and a flush at exit, since other processes read what this one writes."""
        with self._lock:   # gthread's threads may all count first at once: one flusher
            if self.started:
                return
            self.started = True
        if os.environ.get(MULTIPROC_DIR):
            me = weakref.ref(self)   # the thread ends once the app is gone
            threading.Thread(target=_flush_every, args=(me,), name="metrics-flush", daemon=True).start()
            atexit.register(_flush_at_exit, me)


class _Read:
    """What generate_latest reads: anything with `collect`."""

    def __init__(self, tally: Tally, source: CollectorRegistry | None) -> None:
        self.tally, self.source = tally, source

    def collect(self) -> Iterator[Metric]:
        return self.tally.read(self.source)


def _flush_every(me: weakref.ref[Tally]) -> None:
    while True:
        time.sleep(FLUSH_S)
        tally = me()
        if tally is None:
            return
        tally.flush()
        del tally


def _flush_at_exit(me: weakref.ref[Tally]) -> None:
    tally = me()
    if tally is not None:
        tally.flush()


_TALLIES: weakref.WeakSet[Tally] = weakref.WeakSet()


def _forked() -> None:
    # A forked child (a gunicorn worker) has none of its parent's threads: its first
    # count starts its own flusher. What the parent queued is the parent's to write, and
    # a lock its flusher held at the fork would stay held here.
    for tally in _TALLIES:
        tally.started = False
        tally.queue.clear()
        tally._lock = threading.Lock()


os.register_at_fork(after_in_child=_forked)


T = TypeVar("T")


class Labelled(Generic[T]):
    """A metric's children, each label set's made once (prometheus_client's `labels()`
    costs a lock and a lookup)."""

    def __init__(self, make: Callable[..., T]) -> None:
        self._make = make
        self._children: dict[tuple[str, ...], T] = {}

    def labels(self, *values: str) -> T:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._make(*values)
        return child


class Count:
    """One label set of a counter."""

    __slots__ = ("_tally", "_child")

    def __init__(self, tally: Tally, child: Counter) -> None:
        self._tally, self._child = tally, child

    def inc(self, amount: float = 1) -> None:
        self._tally.add(self, amount)

    def write(self, amounts: list[float]) -> None:
        self._child.inc(sum(amounts))


class Histogram:
    """A histogram written as two counters (the module's docstring says why)."""

    def __init__(self, tally: Tally, name: str, doc: str, labels: list[str], buckets: Sequence[float]) -> None:
        self.tally, self.name, self.doc, self.labelnames = tally, name, doc, labels
        self.bounds = [float(b) for b in buckets]
        self.les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        self._buckets = Counter(name + BUCKET, doc, [*labels, "le"], registry=tally.registry)
        self._sums = Counter(name + SUM, doc, labels, registry=tally.registry)

    def labels(self, *values: str) -> Observed:
        return Observed(self, values)

    def write(self, values: tuple[str, ...], observations: list[float]) -> None:
        counts = [0] * len(self.les)
        for v in observations:
            counts[bisect.bisect_left(self.bounds, v)] += 1   # `le`: a value on a bound is in it
        for le, count in zip(self.les, counts):
            if count:
                self._buckets.labels(*values, le).inc(count)
        self._sums.labels(*values).inc(sum(observations))

    def family(self, buckets: Metric, sums: Metric | None) -> HistogramMetricFamily:
        """This histogram as the Histogram class exposes it, from its two counters' samples."""
        counts: dict[tuple[str, ...], dict[str, float]] = defaultdict(dict)
        for s in _totals(buckets.samples):
            counts[tuple(s.labels[n] for n in self.labelnames)][s.labels["le"]] = s.value
        totals = {tuple(s.labels[n] for n in self.labelnames): s.value for s in _totals(sums.samples if sums else ())}
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labelnames)
        for values, by_le in counts.items():
            running, cumulative = 0.0, []
            for le in self.les:
                running += by_le.get(le, 0.0)
                cumulative.append((le, running))
            family.add_metric(list(values), cumulative, sum_value=totals.get(values, 0.0))
        return family


def _totals(samples: Iterable) -> Iterator:  # type: ignore[type-arg]
    """A counter's `_total` samples (not its `_created`)."""
    return (s for s in samples if s.name.endswith("_total"))


class Observed:
    """One label set of a histogram."""

    __slots__ = ("_histogram", "_values")

    def __init__(self, histogram: Histogram, values: tuple[str, ...]) -> None:
        self._histogram, self._values = histogram, values

    def observe(self, value: float) -> None:
        self._histogram.tally.add(self, value)

    def write(self, amounts: list[float]) -> None:
        self._histogram.write(self._values, amounts)
