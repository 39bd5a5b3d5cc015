"""The API layer's own Prometheus metrics (GET /metrics), through prometheus_client.

Counted at the edge, where statuses and codes are known: every response by route,
status and error code; open streams; tokens generated; the Budget's tokens spent and
requests refused. A server may add its own metrics to the same registry (the mock:
vLLM's names for what it simulates). Under gunicorn the runner sets
PROMETHEUS_MULTIPROC_DIR before the app is built (serve.prepare), so each worker
writes its values to files there and one scrape of any worker sums them all
(prometheus_client's multiprocess mode); in one process the app's registry is read.
The counters are written in batches (tally.py says why and when).
prometheus_client chooses its mode once, when it is imported, so only create_app
imports this module (after serve.prepare), and the others name it for types alone.
"""
from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge
from prometheus_client import multiprocess

from api_server.tally import MULTIPROC_DIR, Count, Tally
# The route label of a response that no route took (a 404 or 405 of an unknown path).
NO_ROUTE = "none"


def new_tally() -> Tally:
    """The metrics of a new app, in a registry of their own."""
    return Tally(CollectorRegistry())


class ApiMetrics:
    """The acs_* metrics of one app, in `tally`'s registry."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.requests = tally.counters("acs_requests", "Responses, by route, status and error code ('' for none).",
                                       ["route", "status", "code"])
        # A gauge moves both ways and is read while streams are open: written at once.
        self.open_streams = Gauge("acs_open_streams", "Streams open now.", registry=tally.registry,
                                  multiprocess_mode="livesum")
        self.generated_tokens = tally.counter("acs_generated_tokens", "Completion tokens sent.")
        self.budget_spent = tally.counter("acs_budget_spent_tokens", "Tokens settled against a Budget.")
        self.budget_refused = tally.counter("acs_budget_refused",
                                            "Requests the Budget refused (429 insufficient_quota).")
        self._responses: dict[tuple[str | None, int, str], Count] = {}

    def responded(self, route: str | None, status: int, code: str = "") -> None:
        key = (route, status, code)   # as given: no label strings built for a label set seen before
        count = self._responses.get(key)
        if count is None:
            count = self._responses[key] = self.requests.labels(route or NO_ROUTE, str(status), code)
        count.inc()

    def exposition(self) -> bytes:
        """The text format of every metric: of every worker in multiprocess mode, else the registry's."""
        source = None
        if os.environ.get(MULTIPROC_DIR):
            source = CollectorRegistry()
            multiprocess.MultiProcessCollector(source)
        return self.tally.exposition(source)
