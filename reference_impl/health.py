"""The upstream's readiness, for the API's own GET /health.

The reference is ready when what it fronts is: vLLM itself, vLLM's data-parallel
server, or a router made for vLLM (production-stack's router, llm-d's gateway),
each of which answers GET /health with 200 while it can serve. A load balancer or
Kubernetes probes /health often, and every probe must stay cheap: the answer is
asked with a short timeout and kept for a few seconds, per worker process, and
only one thread asks at a time (the others wait for its answer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from reference_impl.wire import WireError, get

log = logging.getLogger("reference_impl")

HEALTH_PATH = "/health"
TIMEOUT_S = 1.0  # a probe that waits longer than this calls the upstream not ready
CACHE_S = 2.0  # how long one answer stands


class UpstreamHealth:
    """`ready()`: did the upstream's GET /health answer 200 within the last CACHE_S?"""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = TIMEOUT_S,
        cache_seconds: float = CACHE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = base_url.rstrip("/") + HEALTH_PATH
        self.timeout, self.cache_seconds, self.clock = timeout, cache_seconds, clock
        self._lock = threading.Lock()
        self._checked_at: float | None = None
        self._ready = False

    def ready(self) -> bool:
        with self._lock:
            now = self.clock()
            if self._checked_at is None or now - self._checked_at >= self.cache_seconds:
                ready = self._ask()
                if ready != self._ready or self._checked_at is None:
                    log.log(
                        logging.INFO if ready else logging.WARNING,
                        "upstream %s: %s",
                        self.url,
                        "ready" if ready else "not ready",
                    )
                self._ready, self._checked_at = ready, now
            return self._ready

    def _ask(self) -> bool:
        try:
            return get(self.url, self.timeout)[0] == 200  # a connection per probe
        except WireError:
            return False
