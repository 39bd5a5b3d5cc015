"""The api room's fixtures: a real redis-server (the Budget in Redis), and gunicorn's names put
back after a test patches them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def restored(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """gunicorn's names as they were, after the test (patch_gunicorn replaces them)."""
    from gunicorn import util
    from gunicorn.http import wsgi

    for module, name in ((wsgi, "Response"), (util, "http_date"), (wsgi, "WSGIErrorsWrapper")):
        monkeypatch.setattr(module, name, getattr(module, name))
    return monkeypatch
