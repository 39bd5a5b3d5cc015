"""The conformance room's fixtures: the mock served in process behind a Breaker, which a test
sets to break one thing at a time (gallery/breaker.py); one a module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gallery.breaker import Breaker
from mock_server import MockConfig, create_app
from tests.support.wsgi import serve


@pytest.fixture(scope="module")
def mock() -> Iterator[tuple[Breaker, str]]:
    """The mock (its defaults) behind a Breaker that breaks nothing until told: (it, its URL)."""
    app = Breaker(create_app(MockConfig()))
    with serve(app) as url:
        yield app, url
