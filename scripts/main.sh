#!/usr/bin/env bash
# The main job: set up, start the bundled mock, run the conformance suite against it (its
# /metrics too, against vLLM's: --metrics-url).
# Reports land in reports/ (JUnit, JSON, HTML). Extra arguments go to the suite
# (for example --profile quick). The exit code is the suite's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PORT=${MOCK_PORT:-$(.venv/bin/python -c 'from reference_impl.launcher import free_port; print(free_port())')}
mkdir -p reports
# paced (--tpot-ms): a steered stream outlives a plain request sent beside it, so the run proves
# isolation:steering.same_batch's overlap rather than leaving it unproven
.venv/bin/python -m mock_server --host 127.0.0.1 --port "$PORT" --tpot-ms 5 > reports/mock.log 2>&1 &
MOCK=$!
trap 'kill "$MOCK" 2>/dev/null; wait "$MOCK" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://127.0.0.1:$PORT/health" > /dev/null 2>&1 && break
  sleep 0.2
done
.venv/bin/python -m conformance --base-url "http://127.0.0.1:$PORT" --api-key local-key \
  --profile full --metrics-url "http://127.0.0.1:$PORT/metrics" --junit reports/conformance.xml --json reports/conformance.json \
  --html reports/conformance.html "$@"
