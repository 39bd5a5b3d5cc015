"""The mock room's fixtures: one server for the session's HTTP tests."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.mock import AUTH, KEEPALIVE_S, MockProcess


@pytest.fixture(scope="session")
def mock_server() -> Iterator[MockProcess]:
    """One server for the HTTP tests: two workers, any key, no Budget."""
    server = MockProcess(
        "--workers", "2", "--threads", "16", "--keepalive-seconds", str(KEEPALIVE_S)
    ).start()
    yield server
    server.close()


@pytest.fixture(scope="session")
def mock_url(mock_server: MockProcess) -> str:
    return mock_server.url


@pytest.fixture()
def mock_http(mock_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=mock_url, headers=AUTH, timeout=60) as client:
        yield client
