"""vLLM as a child process: started on a private port of 127.0.0.1, waited for, stopped.

vLLM runs in its own interpreter (REFERENCE_VLLM_PYTHON, else .venv-vllm/bin/python
when it exists, else this one) as `python -m reference_impl.vllm_server`, which
is vLLM's OpenAI server plus activations in completion streams. With `plain=True`
it is vLLM's own OpenAI server with its defaults (`python -m
vllm.entrypoints.openai.api_server`), as a team would deploy it on day one: the
conformance suite's second foil (bench/results/vllm_score.md).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from api_server.children import free_port, wait_ready
from contract import Spec

log = logging.getLogger("reference_impl")

ROOT = Path(__file__).resolve().parent.parent
PYTHON_ENV = "REFERENCE_VLLM_PYTHON"
SERVER_MODULE = "reference_impl.vllm_server"
PLAIN_SERVER_MODULE = "vllm.entrypoints.openai.api_server"
READY_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 20.0


def default_python() -> str:
    """The interpreter that runs vLLM."""
    if os.environ.get(PYTHON_ENV):
        return os.environ[PYTHON_ENV]
    venv = ROOT / ".venv-vllm" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies, even by SIGKILL (Linux),
    so a killed API never leaves vLLM's 3 GB behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class VllmProcess:
    """`with VllmProcess(model, "llama-8b") as vllm: ... vllm.url ...`"""

    def __init__(
        self,
        model: str,
        served_name: str,
        *,
        python: str | None = None,
        port: int | None = None,
        max_model_len: int | None = None,
        extra_args: Sequence[str] = (),
        log_file: IO[Any] | None = None,
        plain: bool = False,
        api: Spec,
    ) -> None:
        self.model, self.served_name = model, served_name
        self.api = api
        self.python = python or default_python()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.max_model_len = max_model_len
        self.extra_args = list(extra_args)
        self.log_file = log_file
        self.plain = plain
        self.proc: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the process that started vLLM; gunicorn's forked workers are not it

    def command(self) -> list[str]:
        model_info = self.api.models.get(self.served_name)
        cmd = [
            self.python,
            "-m",
            PLAIN_SERVER_MODULE if self.plain else SERVER_MODULE,
            "--model",
            self.model,
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--disable-uvicorn-access-log",
        ]
        if not self.plain:
            # vLLM's defaults, never the model's generation_config.json (completions.md)
            cmd += [
                "--generation-config",
                "vllm",
                # the API takes `priority`; vLLM refuses it unless it schedules by priority
                "--scheduling-policy",
                "priority",
            ]
            if model_info is not None:  # activations come in the model's dtype, as the spec says
                cmd += ["--dtype", model_info.dtype]
        if self.max_model_len:
            cmd += ["--max-model-len", str(self.max_model_len)]
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB, CPU builds only
        if self.plain:
            return env
        # vLLM refuses more than 1,024 prompts by default; the API's caps decide instead.
        env.setdefault("VLLM_MAX_COMPLETION_PROMPTS", str(self.api.caps["max_generated_tokens"]))
        return env

    def start(self, timeout: float = READY_TIMEOUT_S) -> VllmProcess:
        log.info("starting vLLM: %s", " ".join(self.command()))
        self._owner = os.getpid()
        self.proc = subprocess.Popen(
            self.command(),
            cwd=ROOT,
            env=self.environment(),
            stdout=self.log_file,
            stderr=subprocess.STDOUT if self.log_file else None,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        try:
            wait_ready(self.url, self.proc, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM to vLLM's process group (its engine processes too), then SIGKILL."""
        if self._owner != os.getpid():
            return
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    def __enter__(self) -> VllmProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
