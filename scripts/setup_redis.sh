#!/usr/bin/env bash
# redis-server (Debian's package) for the tests of the Budget in Redis (idempotent).
# The tests start their own servers on free ports; nothing here starts one.
set -euo pipefail
exec bash "$(dirname "$0")/apt_tool.sh" setup_redis redis-server redis-server "the Redis tests"
