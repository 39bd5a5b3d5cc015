#!/usr/bin/env bash
# scripts/apt_tool.sh NAME COMMAND PACKAGE "WHAT SKIPS": Debian's PACKAGE for a tool the tests
# use (idempotent): nothing when COMMAND is on PATH; installed when this machine can (root,
# apt-get); otherwise the tests that need it skip themselves ("WHAT SKIPS" says which).
# The package's own service is never started (policy-rc.d; one already there stays).
set -euo pipefail
name=$1 command=$2 package=$3 skips=$4
if command -v "$command" > /dev/null 2>&1; then
    echo "$name: $package is installed"
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get > /dev/null 2>&1; then
    echo "$name: no $command, and installing it needs root and apt-get: $skips will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends "$package" > /dev/null
echo "$name: installed $package"
