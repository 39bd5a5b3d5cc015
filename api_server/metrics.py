"""The API layer's own Prometheus metrics (GET /metrics), through prometheus_client.

Counted at the edge, where statuses and codes are known: every response by route,
status and error code; open streams; tokens generated; the Budget's tokens spent and
requests refused. A server may add its own metrics to the same registry (the mock:
vLLM's names for what it simulates). Under gunicorn the runner sets
PROMETHEUS_MULTIPROC_DIR before the app is built (serve.prepare), so each worker
writes its values to files there and one scrape of any worker sums them all
(prometheus_client's multiprocess mode); in one process the app's registry is read.
prometheus_client chooses its mode once, when it is imported, so only create_app
imports this module (after serve.prepare), and the others name it for types alone.
"""
from __future__ import annotations

import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client import multiprocess

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
# The route label of a response that no route took (a 404 or 405 of an unknown path).
NO_ROUTE = "none"


def new_registry() -> CollectorRegistry:
    return CollectorRegistry()


class ApiMetrics:
    """The acs_* metrics of one app, in `registry`."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter("acs_requests", "Responses, by route, status and error code ('' for none).",
                                ["route", "status", "code"], registry=registry)
        self.open_streams = Gauge("acs_open_streams", "Streams open now.", registry=registry,
                                  multiprocess_mode="livesum")
        self.generated_tokens = Counter("acs_generated_tokens", "Completion tokens sent.", registry=registry)
        self.budget_spent = Counter("acs_budget_spent_tokens", "Tokens settled against a Budget.",
                                    registry=registry)
        self.budget_refused = Counter("acs_budget_refused", "Requests the Budget refused (429 insufficient_quota).",
                                      registry=registry)
        self._responses: dict[tuple[str | None, int, str], Counter] = {}

    def responded(self, route: str | None, status: int, code: str = "") -> None:
        # Each label set's child once (prometheus_client's `labels()` costs a lock and a lookup).
        key = (route, status, code)
        child = self._responses.get(key)
        if child is None:
            child = self._responses[key] = self.requests.labels(route or NO_ROUTE, str(status), code)
        child.inc()

    def exposition(self) -> bytes:
        """The text format of every metric: of every worker in multiprocess mode, else the registry's."""
        if os.environ.get(MULTIPROC_DIR):
            merged = CollectorRegistry()
            multiprocess.MultiProcessCollector(merged)
            return generate_latest(merged)
        return generate_latest(self.registry)
