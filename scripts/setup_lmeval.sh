#!/usr/bin/env bash
# lm-eval, a real evaluation harness, for tests/support/lm_eval.py (idempotent, ~1 min):
#   .venv-lmeval   PyPI's lm-eval[api] (its local-completions model) and transformers for the
#                  tokenizer it loads from models/tiny-llama (no torch: only the tokenizer runs)
# Its own venv: lm-eval brings datasets, pandas, scipy and scikit-learn, which the project's
# .venv does not need. The tests that run it skip themselves when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${LMEVAL_VENV:-.venv-lmeval}
PY=${PYTHON:-python3}
LM_EVAL_VERSION=0.4.13
TRANSFORMERS_VERSION=5.25.0

if [[ -f "$VENV/.complete" ]]; then
    echo "setup_lmeval: $VENV is already complete"
    exit 0
fi
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "lm-eval[api]==$LM_EVAL_VERSION" \
    "transformers==$TRANSFORMERS_VERSION"
touch "$VENV/.complete"
echo "setup_lmeval: installed lm-eval $LM_EVAL_VERSION in $VENV"
