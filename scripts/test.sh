#!/usr/bin/env bash
# The project's tests: set up (the project's .venv, then real vLLM on the CPU with a
# tiny model for the reference implementation), then pytest.
# redis-server too (scripts/setup_redis.sh), for the tests of the Budget in Redis, and nginx
# (scripts/setup_nginx.sh), for the tests of the shipped front, and prometheus
# (scripts/setup_prometheus.sh), for the test that evaluates vLLM's Grafana dashboard on the mock.
# ACS_SKIP_VLLM=1 skips the vLLM set-up (and lm-eval's, which reads the tiny model's tokenizer);
# the tests marked `vllm` and those that run lm-eval then skip themselves.
# Without arguments, a second, shorter run follows with ACS_PATCHES=0 (see below).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The habits first, in seconds, whatever the arguments: the code formatted and linted (ruff), and
# typed (mypy); their settings are pyproject.toml's.
.venv/bin/ruff format --check --quiet .
.venv/bin/ruff check --quiet .
.venv/bin/mypy
bash scripts/setup_redis.sh
bash scripts/setup_nginx.sh
bash scripts/setup_prometheus.sh
if [[ "${ACS_SKIP_VLLM:-0}" != 1 ]]; then
  bash scripts/setup_vllm.sh
  bash scripts/setup_lmeval.sh
fi
# Two workers (pytest-xdist; ACS_TEST_WORKERS=0 runs in one process): most tests wait on servers
# they start, so two share the 2 cores of CI well (the suite: 22 minutes against 39 in one). Each
# module's tests stay on one worker, and those of the session's vLLM servers too (tests/conftest.py).
# A worker that crashes is not replaced (--max-worker-restart 0): the run ends there, its test
# failed, rather than hang (pytest-xdist 3.8's loadgroup re-queues a crashed worker's finished
# groups as empty units, and the run can wait for ever: pytest-dev/pytest-xdist#1378).
WORKERS=${ACS_TEST_WORKERS:-2}
XDIST=()
[[ "$WORKERS" != 0 ]] && XDIST=(-n "$WORKERS" --dist loadgroup --max-worker-restart 0)
.venv/bin/python -m pytest -q --durations=25 "${XDIST[@]}" "$@"
# The whole suite (no arguments): then once more with the patches of gunicorn and Flask
# off (ACS_PATCHES=0, api_server/patches.py), over the tests that start the servers
# (about a minute): both servers must work on those packages' own code.
if [[ $# -eq 0 ]]; then
  ACS_PATCHES=0 .venv/bin/python -m pytest -q tests/api/test_patches.py \
    tests/mock/test_app.py tests/mock/test_http.py tests/mock/test_serving.py \
    tests/mock/test_bytes.py tests/reference/test_upstream.py
fi
