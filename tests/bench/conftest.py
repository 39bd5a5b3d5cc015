"""The bench room's fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import harness
from tests.support.vllm_stream import MODEL


@pytest.fixture(scope="package")
def upstreams(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[harness.Server, harness.Server]]:
    """The fake vLLM and the relay in front of it, as bench.reference_load starts them."""
    logs = tmp_path_factory.mktemp("upstreams")
    fake = harness.fake_vllm(2, MODEL).run(logs)
    relay = harness.relay(fake.url)
    try:
        yield fake, relay.run(logs)
    finally:
        relay.stop()
        fake.stop()
