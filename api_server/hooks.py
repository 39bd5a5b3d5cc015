"""What a server may add to a request besides the API: the hook `create_app` takes.

The mock's faults and simulated latency (mock_server/faults.py) are one such hook.
A server of the real API passes none, so a client of a real deployment cannot make
it fake anything: the code that fakes is not there.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from api_server.engine import Event
from contract import ApiError, CompletionRequest

# Wraps the engine's events, given the sleep to wait with (the pump's, which cancelling wakes).
Pace = Callable[[Iterator[Event], Callable[[float], object]], Iterator[Event]]


class Headers(Protocol):
    """A request's headers, looked up case-insensitively (werkzeug's Headers)."""

    def get(self, key: str) -> str | None: ...

    def __contains__(self, key: str, /) -> bool: ...

    def __getitem__(self, key: str) -> str: ...


@dataclass(frozen=True)
class Plan:
    """What this request goes through besides the API itself."""
    error: ApiError | None = None             # answered instead (after validation, before the Hold)
    pace: Pace | None = None                  # None: the engine's events as they come
    stream_error_after: int | None = None     # choice deltas a stream sends before stream_error
    stream_error: ApiError | None = None


PLAIN = Plan()


class Hook(Protocol):
    def plan(self, headers: Headers, req: CompletionRequest) -> Plan:
        """The plan for a validated request; may raise ApiError (a bad header value)."""
        ...
