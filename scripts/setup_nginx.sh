#!/usr/bin/env bash
# nginx (Debian's package) for the tests of the shipped front, reference_impl/deploy/nginx
# (idempotent). The tests start their own nginx on free ports with a temp prefix.
set -euo pipefail
exec bash "$(dirname "$0")/apt_tool.sh" setup_nginx nginx nginx "the front's tests"
