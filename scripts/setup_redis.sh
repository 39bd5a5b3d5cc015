#!/usr/bin/env bash
# redis-server (Debian's package) for the tests of the Budget in Redis (idempotent).
# Installed when missing and this machine can (root, apt-get); otherwise the Redis
# tests skip themselves with that reason. The tests start their own servers on free
# ports; nothing here starts one.
set -euo pipefail
if command -v redis-server > /dev/null 2>&1; then
    echo "setup_redis: $(redis-server --version | cut -d' ' -f1-3) is installed"
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get > /dev/null 2>&1; then
    echo "setup_redis: no redis-server, and installing it needs root and apt-get: the Redis tests will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends redis-server > /dev/null
echo "setup_redis: installed $(redis-server --version | cut -d' ' -f1-3)"
