"""A WSGI app served for real in-process (the mock's own `served`, which client developers use
too), an app's answer read whole, and two middlewares: what every broken server and every test
that runs the suite against one stands on."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gallery.support import Environ, StartResponse, whole_response
from mock_server import create_app
from mock_server.config import MockConfig
from mock_server.testing import served as serve

__all__ = ["Counting", "Environ", "RecordsHeaders", "StartResponse", "serve", "whole_response"]


class Counting:
    """WSGI middleware that counts the requests that reach the wrapped app."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.app, self.requests = app, 0

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        self.requests += 1
        return self.app(environ, start_response)


class RecordsHeaders:
    """The mock, remembering the headers each request came with (as an upstream would see them)."""

    def __init__(self) -> None:
        self.app = create_app(MockConfig())
        self.headers: list[dict[str, str]] = []

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        self.headers.append({k: str(v) for k, v in environ.items() if k.startswith("HTTP_")})
        return self.app(environ, start_response)
