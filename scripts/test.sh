#!/usr/bin/env bash
# The project's tests: set up (the project's .venv, then real vLLM on the CPU with a
# tiny model for the reference implementation), then pytest.
# redis-server too (scripts/setup_redis.sh), for the tests of the Budget in Redis, and nginx
# (scripts/setup_nginx.sh), for the tests of the shipped front.
# ACS_SKIP_VLLM=1 skips the vLLM set-up; the tests marked `vllm` then skip themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/setup_redis.sh
bash scripts/setup_nginx.sh
if [[ "${ACS_SKIP_VLLM:-0}" != 1 ]]; then
  bash scripts/setup_vllm.sh
fi
exec .venv/bin/python -m pytest -q "$@"
