"""`python -m mock_server --host H --port P --workers N`: the mock under gunicorn.

gevent workers by default (api_server/serve.py): a greenlet per connection, so
thousands of open streams fit; the worker also answers unparseable HTTP in the
API's error shape and bounds a stalled body's read (api_server/worker.py). The app is built once in the master before
the workers fork (preload), so the spec, tokenizer and tables load once, and
every worker shares one Budget file. Every option also reads MOCK_<NAME>.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from collections.abc import Sequence

from api_server.config import parse_keys, parse_max_model_len
from api_server.serve import add_arguments, gunicorn_options, prepare, serve
from contract.version import VersionAction
from mock_server.config import MockConfig


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("MOCK_" + name, default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mock_server", description=__doc__.splitlines()[0])
    p.add_argument("--version", action=VersionAction)
    p.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(_env("PORT", "8000") or 8000))
    add_arguments(p, _env, os.cpu_count() or 1)
    p.add_argument("--keys", help="comma-separated API keys (default: any non-empty Bearer key)")
    p.add_argument("--budget-tokens", type=int, help="tokens per key (default: unlimited)")
    p.add_argument("--budget-dir", help="directory of the Budget file (default: a new temp dir)")
    p.add_argument("--budget-url", help="redis://host:port/db: the Budget in Redis, shared by replicas "
                                        "(default: the SQLite file in --budget-dir)")
    p.add_argument("--ttft-ms", type=float, help="simulated time to first token")
    p.add_argument("--tpot-ms", type=float, help="simulated time per output token")
    p.add_argument("--keepalive-seconds", type=float, help="interval of ': keepalive' in streams")
    p.add_argument("--body-read-seconds", type=float,
                   help="a client's read silent this long gets 400 (default: the spec's x-caps)")
    p.add_argument("--fault-rate", type=float, help="fraction of requests failed with a random status")
    p.add_argument("--stream-error-rate", type=float, help="fraction of streams broken by an error event")
    p.add_argument("--eos-rate", type=float, help="chance per token of an end-of-text token")
    p.add_argument("--max-model-len", help="'4096' for every model, or 'llama-8b=4096,...'")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "warning"))
    p.add_argument("--access-log", action="store_true", help="log every request to stderr")
    return p


def config_from(args: argparse.Namespace) -> MockConfig:
    """MOCK_* variables, overridden by the options given on the command line."""
    config = MockConfig.from_env(
        keys=parse_keys(args.keys) if args.keys else None,
        budget_tokens=args.budget_tokens, budget_dir=args.budget_dir, budget_url=args.budget_url,
        ttft_ms=args.ttft_ms, tpot_ms=args.tpot_ms, keepalive_seconds=args.keepalive_seconds,
        body_read_seconds=args.body_read_seconds, fault_rate=args.fault_rate,
        stream_error_rate=args.stream_error_rate, eos_rate=args.eos_rate,
        max_model_len=parse_max_model_len(args.max_model_len) if args.max_model_len else None)
    if config.budget_tokens is not None and config.budget_dir is None and not config.budget_url:
        # Made before the fork, so that every worker spends from the same file.
        config = dataclasses.replace(config, budget_dir=tempfile.mkdtemp(prefix="mock-budget-"))
    return config


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    prepare(args.worker)   # before the app's modules are imported
    from mock_server.server import create_app  # after parsing, so --help is instant

    app = create_app(config_from(args))
    serve(app, gunicorn_options(args.host, args.port, args.workers, args.threads, args.log_level,
                                args.access_log, args.worker, args.connections, args.graceful_timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
