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
from pathlib import Path
from typing import Any

from api_server.children import remove_at_exit
from api_server.config import ConfigError, parse_keys, parse_max_model_len
from api_server.serve import PORT, add_arguments, options_of, prepare, serve
from api_server.state import state_of
from contract.version import VersionAction
from mock_server.config import MockConfig
from mock_server.hook.profiles import PROFILES


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get("MOCK_" + name, default)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mock_server", description=__doc__.splitlines()[0])
    p.add_argument("--version", action=VersionAction)
    p.add_argument("--host", default=_env("HOST", "127.0.0.1"))
    p.add_argument("--port", type=PORT, default=_env("PORT", "8000"))
    add_arguments(p, _env, os.cpu_count() or 1)
    p.add_argument("--keys", help="comma-separated API keys (default: any non-empty Bearer key)")
    p.add_argument("--budget-tokens", type=int, help="tokens per key (default: unlimited)")
    p.add_argument("--budget-dir", help="directory of the Budget file (default: a new temp dir)")
    p.add_argument(
        "--budget-url",
        help="redis://host:port/db: the Budget in Redis, shared by replicas "
        "(default: the SQLite file in --budget-dir)",
    )
    p.add_argument("--ttft-ms", type=float, help="simulated time to first token")
    p.add_argument("--tpot-ms", type=float, help="simulated time per output token")
    p.add_argument(
        "--keepalive-seconds",
        type=float,
        help="interval of ': keepalive' in streams; 0 turns them off, as in vLLM",
    )
    p.add_argument(
        "--body-read-seconds",
        type=float,
        help="a client's read silent this long gets 400 (default: the spec's x-caps)",
    )
    p.add_argument(
        "--fault-rate", type=float, help="fraction of requests failed with a random status"
    )
    p.add_argument(
        "--stream-error-rate", type=float, help="fraction of streams broken by an error event"
    )
    p.add_argument(
        "--fault-seed",
        type=int,
        help="the faults' seed: with one worker, a run's faults repeat exactly",
    )
    p.add_argument(
        "--fault-statuses", help="the statuses --fault-rate picks from, e.g. 500,503 (default: all)"
    )
    p.add_argument("--eos-rate", type=float, help="chance per token of an end-of-text token")
    p.add_argument("--max-model-len", help="'4096' for every model, or 'llama-8b=4096,...'")
    load = p.add_argument_group("load model (off unless --max-num-seqs or --load-profile is given)")
    load.add_argument(
        "--load-profile",
        choices=sorted(PROFILES),
        help="a named profile's numbers (mock_server/hook/profiles.py); the options below override them",
    )
    load.add_argument(
        "--max-num-seqs",
        type=int,
        help="the running batch, as vLLM's option (the load model runs one worker)",
    )
    load.add_argument(
        "--max-num-queued-reqs",
        type=int,
        help="sequences in flight, waiting plus running, as vLLM 0.32 counts them (n a request); "
        "past it: 503 with Retry-After (default: unbounded)",
    )
    load.add_argument(
        "--prefill-ms-per-token", type=float, help="prefill time per prompt token, after --ttft-ms"
    )
    load.add_argument(
        "--time-factor-under-load",
        type=float,
        help="a decode step's slowdown with --full-load-seqs running (1: none)",
    )
    load.add_argument(
        "--full-load-seqs",
        type=int,
        help="the running sequences at which a step takes --time-factor-under-load "
        "(default: --max-num-seqs; a profile's own)",
    )
    load.add_argument(
        "--jitter", type=float, help="each wait varies by up to this fraction of itself"
    )
    load.add_argument("--load-seed", type=int, help="the jitter's seed")
    tape = p.add_argument_group("record and replay (mock_server/cassettes/cassette.py)")
    tape.add_argument(
        "--record",
        metavar="UPSTREAM",
        default=_env("RECORD"),
        help="be a proxy to this URL, appending each exchange to --cassette (no header of a request kept)",
    )
    tape.add_argument(
        "--cassette",
        metavar="FILE",
        default=_env("CASSETTE"),
        help="the cassette --record appends to",
    )
    tape.add_argument(
        "--replay",
        metavar="CASSETTE",
        default=_env("REPLAY"),
        help="answer from this cassette, at its recorded times",
    )
    tape.add_argument(
        "--replay-speed",
        type=_speed,
        default=_env("REPLAY_SPEED", "1"),
        help="replay this many times faster than recorded (0: every chunk at once; default 1)",
    )
    tape.add_argument(
        "--replay-miss",
        choices=("error", "engine"),
        default=_env("REPLAY_MISS", "error"),
        help="a request the cassette lacks: the API's 404 naming it (error), or the fake engine's answer",
    )
    p.add_argument(
        "--control-file", help="a JSON file of settings the running mock rereads when it changes"
    )
    p.add_argument(
        "--disable-log-stats",
        action="store_true",
        default=None,
        help="no vllm:* metrics on /metrics, as vLLM's option (saves their per-request cost)",
    )
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "warning"))
    p.add_argument("--access-log", action="store_true", help="log every request to stdout")
    return p


def config_from(args: argparse.Namespace) -> MockConfig:
    """MOCK_* variables, overridden by the options given on the command line (ConfigError
    names the option of a value out of its range)."""
    config = MockConfig.from_env(
        keys=parse_keys(args.keys) if args.keys else None,
        budget_tokens=args.budget_tokens,
        budget_dir=args.budget_dir,
        budget_url=args.budget_url,
        ttft_ms=args.ttft_ms,
        tpot_ms=args.tpot_ms,
        keepalive_seconds=args.keepalive_seconds,
        body_read_seconds=args.body_read_seconds,
        fault_rate=args.fault_rate,
        stream_error_rate=args.stream_error_rate,
        eos_rate=args.eos_rate,
        fault_seed=args.fault_seed,
        fault_statuses=args.fault_statuses,
        max_model_len=parse_max_model_len(args.max_model_len) if args.max_model_len else None,
        load_profile=args.load_profile,
        max_num_seqs=args.max_num_seqs,
        max_num_queued_reqs=args.max_num_queued_reqs,
        prefill_ms_per_token=args.prefill_ms_per_token,
        time_factor_under_load=args.time_factor_under_load,
        full_load_seqs=args.full_load_seqs,
        jitter=args.jitter,
        load_seed=args.load_seed,
        control_file=args.control_file,
        disable_log_stats=args.disable_log_stats,
    )
    if config.budget_tokens is not None and config.budget_dir is None and not config.budget_url:
        # Made before the fork, so that every worker spends from the same file.
        budget_dir = tempfile.mkdtemp(prefix="mock-budget-")
        remove_at_exit(budget_dir)  # the master's: its workers' exits leave it
        config = dataclasses.replace(config, budget_dir=budget_dir)
    return config


def _workers_given(argv: Sequence[str] | None) -> bool:
    """Whether --workers (or MOCK_WORKERS) was given, not left to its default (the cores)."""
    args = sys.argv[1:] if argv is None else argv
    return bool(_env("WORKERS")) or any(
        a == "--workers" or a.startswith("--workers=") for a in args
    )


def workers_for(config: MockConfig, workers: int, *, given: bool) -> int:
    """The load model's batch and queue are one process's, so the server as a whole holds
    them only with one worker: its default is then 1, and more, asked for, is refused."""
    if not config.loaded or workers == 1:
        return workers
    if given:
        raise ConfigError(
            f"--workers {workers} with the load model would admit {workers} times "
            f"--max-num-seqs {config.max_num_seqs} (each worker has its own batch and queue): "
            "run --workers 1 (one gevent worker holds thousands of streams)"
        )
    return 1


def tape_app(args: argparse.Namespace, config: MockConfig, create_app: Any) -> Any:
    """The app to serve: the recording proxy, the replayer (over the mock for misses, when
    asked), or the mock."""
    app = create_app(config)
    if not (args.record or args.replay):
        return app
    from mock_server.cassettes.cassette import Recorder, Replayer

    api = state_of(app).contract.api  # the mock's own
    if args.record:
        return Recorder(args.record, Path(args.cassette), api, app)
    return Replayer(
        Path(args.replay),
        api,
        app,
        misses_to_local=args.replay_miss == "engine",
        speed=args.replay_speed,
    )


def _speed(raw: str) -> float:
    """--replay-speed: a factor of at least 0 (0: no waits)."""
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {raw!r}") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least 0 (0: no waits), got {raw!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        config = config_from(args)
        args.workers = workers_for(config, args.workers, given=_workers_given(argv))
        if args.replay and not _workers_given(argv):
            args.workers = 1  # one place in each request's recorded exchanges, not one a worker
    except ConfigError as error:
        p.error(str(error))
    if args.record and (args.replay or not args.cassette):
        p.error("--record needs --cassette FILE, and not --replay")
    if args.cassette and not args.record:
        p.error("--cassette is --record's: to answer from one, --replay FILE")
    prepare(args.worker)  # before the app's modules are imported
    from mock_server.server import create_app  # after parsing, so --help is instant

    try:
        app = tape_app(args, config, create_app)
    except ConfigError as error:  # a cassette's fault, not the command line's: no usage
        p.exit(2, f"{p.prog}: error: {error}\n")
    serve(app, options_of(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
