#!/usr/bin/env bash
# nginx (Debian's package) for the tests of the shipped front, reference_impl/deploy/nginx
# (idempotent). Installed when missing and this machine can (root, apt-get); otherwise those
# tests skip themselves with that reason. The tests start their own nginx on free ports, as
# their own user, with a temp prefix; the package's own service is never started.
set -euo pipefail
if command -v nginx > /dev/null 2>&1; then
    echo "setup_nginx: $(nginx -v 2>&1) is installed"
    exit 0
fi
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get > /dev/null 2>&1; then
    echo "setup_nginx: no nginx, and installing it needs root and apt-get: the front's tests will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d: the package would start its own nginx on port 80 otherwise (one already there stays).
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get install -y -qq --no-install-recommends nginx > /dev/null
service nginx stop > /dev/null 2>&1 || true
echo "setup_nginx: installed $(nginx -v 2>&1)"
