"""A real redis-server for the tests of the Budget in Redis: bench/harness.py's, on a free port.

redis-server is Debian's package, installed by scripts/setup_redis.sh (from scripts/test.sh)
where it can be; without it the tests that need one skip themselves with that reason.
"""

from __future__ import annotations

import pytest

from bench import harness
from bench.harness import redis_missing as missing

__all__ = ["RedisServer", "missing"]


class RedisServer(harness.RedisServer):
    """The bench's server; started where redis-server is missing, the test skips, saying why."""

    def start(self) -> RedisServer:
        reason = missing()
        if reason:
            pytest.skip(reason)
        super().start()
        return self
