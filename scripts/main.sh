#!/usr/bin/env bash
# The main job: set up, then check the API's golden cases.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q tests/test_golden_core.py "$@"
