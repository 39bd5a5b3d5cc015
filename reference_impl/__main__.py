"""`python -m reference_impl --model DIR_OR_ID --served-model-name llama-8b --port P`: the API on real vLLM.

Starts vLLM as a child process on a private port of 127.0.0.1, waits until it
is ready, and serves the API (api_server's app with the vLLM engine) under
gunicorn, like the mock; vLLM stops when the API stops (also on SIGTERM).
With `--upstream URL` it fronts a vLLM that is already running instead.
Every option also reads REFERENCE_<NAME>.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

from api_server.config import ConfigError, ServerConfig, parse_keys
from api_server.serve import PORT, add_arguments, options_of, prepare, serve
from contract.version import VersionAction

if TYPE_CHECKING:
    from contract import Spec

log = logging.getLogger("reference_impl")


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("REFERENCE_" + name, default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reference_impl", description=__doc__.splitlines()[0]
    )
    p.add_argument("--version", action=VersionAction)
    p.add_argument(
        "--model",
        default=_env("MODEL"),
        help="model directory or hub id for vLLM (with --upstream: only read for its config.json)",
    )
    p.add_argument(
        "--served-model-name",
        default=_env("SERVED_MODEL_NAME"),
        help="the API's name of the model, one of openapi.yaml's x-models (default: the first)",
    )
    p.add_argument(
        "--upstream", default=_env("UPSTREAM"), help="front the vLLM at this URL; start none"
    )
    p.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=PORT, default=_env("PORT", "8000"))
    add_arguments(p, _env, 2)
    p.add_argument(
        "--keys", default=_env("KEYS"), help="comma-separated API keys (default: any Bearer key)"
    )
    p.add_argument(
        "--budget-tokens",
        type=int,
        default=_env("BUDGET_TOKENS"),
        help="tokens per key (default: unlimited)",
    )
    p.add_argument("--budget-dir", default=_env("BUDGET_DIR"), help="directory of the Budget file")
    p.add_argument(
        "--budget-url",
        default=_env("BUDGET_URL"),
        help="redis://host:port/db: the Budget in Redis, shared by replicas (default: the SQLite file)",
    )
    p.add_argument(
        "--max-model-len",
        type=int,
        default=_env("MAX_MODEL_LEN"),
        help="vLLM's --max-model-len (with --upstream: used when its /v1/models does not say it)",
    )
    p.add_argument(
        "--vllm-python",
        default=_env("VLLM_PYTHON"),
        help="the interpreter with vLLM (default: .venv-vllm/bin/python if present)",
    )
    p.add_argument(
        "--vllm-port", type=int, default=_env("VLLM_PORT"), help="vLLM's port (default: a free one)"
    )
    p.add_argument(
        "--vllm-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument for vLLM (repeat; e.g. --vllm-arg=--tensor-parallel-size=2)",
    )
    p.add_argument("--vllm-log", default=_env("VLLM_LOG"), help="write vLLM's output to this file")
    p.add_argument(
        "--startup-timeout", type=float, default=float(_env("STARTUP_TIMEOUT", "300") or 300)
    )
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "warning"))
    p.add_argument("--access-log", action="store_true", help="log every request to stderr")
    return p


def warm(models: Mapping[str, Any], api: Spec) -> None:
    """Compile the core's validators and load the tokenizer now, in gunicorn's master,
    so that the workers share them instead of each paying ~0.5 s on its first request.
    (create_app's Contract compiled its own validators; this one loads the tokenizer.)"""
    from contract import Contract
    from reference_impl.upstream import request_defaults

    contract = Contract(api)
    for name in models:
        contract.validate_completion({"model": name, "prompt": "warm", "max_tokens": 1}, models)
    request_defaults(api)


def api_config(
    keys: str | None = None,
    budget_tokens: int | None = None,
    budget_dir: str | None = None,
    budget_url: str | None = None,
) -> ServerConfig:
    """The app's settings for a deployment of the real API (no faults or latency to
    fake: those are the mock's, and its hook is not part of this server)."""
    config = ServerConfig(
        keys=parse_keys(keys) if keys else None,
        budget_tokens=int(budget_tokens) if budget_tokens is not None else None,
        budget_dir=budget_dir,
        budget_url=budget_url or None,
    )
    if config.budget_tokens is not None and config.budget_dir is None and not config.budget_url:
        # Made before the fork, so that every worker spends from the same file.
        config = dataclasses.replace(
            config, budget_dir=tempfile.mkdtemp(prefix="reference-budget-")
        )
    return config


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through main's finally, which stops vLLM


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:  # a setting out of range stops here, naming its option, before vLLM starts
        config = api_config(args.keys, args.budget_tokens, args.budget_dir, args.budget_url)
    except ConfigError as error:
        parser().error(str(error))
    prepare(args.worker)  # before the app's modules are imported
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    if not args.upstream and not args.model:
        parser().error("--model is required unless --upstream is given")
    # Imported after parsing, so that --help is instant.
    from api_server import create_app
    from api_server.children import wait_ready
    from contract import spec
    from reference_impl.deployment import (
        DeploymentError,
        deployment_models,
        pick_upstream,
        read_model_config,
        upstream_models,
    )
    from reference_impl.engine import VllmEngine
    from reference_impl.launcher import VllmProcess

    api = spec()  # the command's spec: everything below is handed it
    served = args.served_model_name or api.default_model
    signal.signal(signal.SIGTERM, _stop_on_sigterm)  # gunicorn installs its own once it runs
    vllm: VllmProcess | None = None
    log_file = open(args.vllm_log, "ab") if args.vllm_log else None  # noqa: SIM115  (closed in finally)
    try:
        if args.upstream:
            url = args.upstream.rstrip("/")
            wait_ready(
                url, None, args.startup_timeout, f"the upstream {url}"
            )  # it may start after us
        else:
            vllm = VllmProcess(
                args.model,
                served,
                python=args.vllm_python,
                port=args.vllm_port,
                max_model_len=args.max_model_len,
                extra_args=args.vllm_arg,
                log_file=log_file,
                api=api,
            ).start(args.startup_timeout)
            url = vllm.url
        entry = pick_upstream(upstream_models(url), served)
        # vLLM's /v1/models says max_model_len; a router's (production-stack's) does not.
        max_model_len = entry.get("max_model_len") or args.max_model_len
        if not max_model_len:
            raise DeploymentError(f"{url}/v1/models gives no max_model_len: pass --max-model-len")
        models = deployment_models(
            served, max_model_len, read_model_config(args.model or entry.get("root")), api
        )
        # The pool to vLLM keeps as many connections as one worker serves requests.
        pool = args.connections if args.worker == "gevent" else args.threads
        app = create_app(
            config, VllmEngine(url, entry["id"], pool_size=pool, api=api), models, api=api
        )
        warm(models, api)
        info = models[served]
        print(
            f"reference_impl: serving {served} on http://{args.host}:{args.port} with vLLM's "
            f"{entry['id']} at {url} ({info.num_layers} layers, hidden {info.hidden_size}, "
            f"max_model_len {info.max_model_len})",
            file=sys.stderr,
            flush=True,
        )
        serve(app, options_of(args))
        return 0
    finally:
        if vllm is not None:
            vllm.stop()
        if log_file is not None:
            log_file.close()


if __name__ == "__main__":
    sys.exit(main())
