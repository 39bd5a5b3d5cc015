"""The API layer's own Prometheus metrics (GET /metrics), through prometheus_client as its
documentation shows.

Counted at the edge, where statuses and codes are known: every response by route,
status and error code; open streams; tokens generated; the Budget's tokens spent and
requests refused. A server may add its own metrics to the same registry (the mock:
vLLM's names for what it simulates, mock_server/hook/metrics.py).

Under gunicorn the client runs in its multiprocess mode: the entry point sets
PROMETHEUS_MULTIPROC_DIR, a directory wiped at start, before anything imports the client
(serve.prepare, called first by both servers' __main__), each worker writes its values
to files there, a scrape of any worker sums them (MultiProcessCollector), and gunicorn's
child_exit marks a dead worker's gauges dead. In one process (tests, the in-process
transports) the app's own registry is read.

The rule that follows, stated here once: prometheus_client picks its mode when it is first
imported, so no module a server's __main__ imports may import it (or this module, or
mock_server/hook/metrics.py) at module level; create_app imports them when it runs, after
serve.prepare, and others name them under TYPE_CHECKING only. tests/house/test_layers.py
holds every server's entry to it.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
    multiprocess,
)

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
# The route label of a response that no route took (a 404 or 405 of an unknown path).
NO_ROUTE = "none"


def new_registry() -> CollectorRegistry:
    """The metrics of a new app, in a registry of their own."""
    return CollectorRegistry()


def exposition(registry: CollectorRegistry) -> bytes:
    """The text format of every metric: of every worker in multiprocess mode, else `registry`'s."""
    if os.environ.get(MULTIPROC_DIR):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


class ApiMetrics:
    """The acs_* metrics of one app, in `registry`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "acs_requests",
            "Responses, by route, status and error code ('' for none).",
            ["route", "status", "code"],
            registry=registry,
        )
        self.open_streams = Gauge(
            "acs_open_streams", "Streams open now.", registry=registry, multiprocess_mode="livesum"
        )
        self.generated_tokens = Counter(
            "acs_generated_tokens", "Completion tokens sent.", registry=registry
        )
        self.budget_spent = Counter(
            "acs_budget_spent_tokens", "Tokens settled against a Budget.", registry=registry
        )
        self.budget_refused = Counter(
            "acs_budget_refused",
            "Requests the Budget refused (429 insufficient_quota).",
            registry=registry,
        )
        self._responses: dict[tuple[str | None, int, str], Counter] = {}

    def responded(self, route: str | None, status: int, code: str = "") -> None:
        key = (route, status, code)  # as given: no label strings built for a label set seen before
        child = self._responses.get(key)
        if child is None:
            child = self._responses[key] = self.requests.labels(
                route or NO_ROUTE, str(status), code
            )
        child.inc()

    def exposition(self) -> bytes:
        return exposition(self.registry)
