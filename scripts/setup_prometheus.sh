#!/usr/bin/env bash
# prometheus (Debian's package) for the test that evaluates vLLM's Grafana dashboard against
# the mock (tests/mock/test_dashboard.py) (idempotent). The test starts its own server on a
# free port with its own configuration; nothing here starts one.
set -euo pipefail
exec bash "$(dirname "$0")/apt_tool.sh" setup_prometheus prometheus prometheus "the dashboard test"
