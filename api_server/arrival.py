"""When the server took a request in: the start of its time to first token.

A request waits in the stack before the app sees it: its connection accepted while the worker
serves others, its head parsed. A load tool's time to first token counts that wait; vLLM's own
counts from the request's arrival. The worker (worker.py) notes when it took the request up, in
the context of the greenlet or thread that runs the app for it (contextvars: one per greenlet
under gevent, per thread under gthread); served otherwise (werkzeug, a test's WSGI call) nothing
is noted and the app's own clock starts it.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

RECEIVED: ContextVar[float | None] = ContextVar("received", default=None)


def received() -> float:
    """The monotonic time the worker took the current request up, or now."""
    stamp = RECEIVED.get()
    return time.monotonic() if stamp is None else stamp
