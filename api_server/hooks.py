"""What a server may add to a request besides the API: the hook `create_app` takes.

A hook picks the engine that runs each validated request: the app's, or one that
wraps it. The mock's (mock_server/hook/faults.py) wraps it in its simulated latency and
stream errors, and answers a forced status instead. A server of the real API passes
none, so a client of a real deployment cannot make it fake anything: the code that
fakes is not there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from api_server.engine import Engine
from contract import CompletionRequest


class Headers(Protocol):
    """A request's headers, looked up case-insensitively (werkzeug's Headers)."""

    def get(self, key: str) -> str | None: ...

    def __contains__(self, key: str, /) -> bool: ...

    def __getitem__(self, key: str) -> str: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


class Hook(Protocol):
    def engine(self, headers: Headers, req: CompletionRequest, engine: Engine) -> Engine:
        """The engine that runs this validated request: `engine` (the app's) or one that
        wraps it. May raise ApiError, which is answered instead, before the Budget holds
        anything (a bad header value, the mock's forced status)."""
        ...
