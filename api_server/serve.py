"""Serve a Flask app of this API under gunicorn: one set of settings for the mock,
the reference implementation and the benchmark's bare ceiling.

The default worker is gevent's (bench/results/servers.md has the measurements): a
greenlet per connection, so 2,000 open streams, or 500 clients stalled mid-body,
cost memory, not threads; the accept loop never waits on a busy pool. gthread (a
thread per open request, `--worker gthread --threads N`) stays available.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import glob
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication

from api_server.children import remove_at_exit

WORKERS = {
    "gevent": "api_server.worker.ApiGeventWorker",
    "gthread": "api_server.worker.ApiThreadWorker",
}
DEFAULT_WORKER = "gevent"
# Open connections per gevent worker. A sleeping stream costs a few KiB; past this,
# new connections wait in the listen backlog.
DEFAULT_CONNECTIONS = 4096
DEFAULT_THREADS = 32
DEFAULT_GRACEFUL_TIMEOUT = 5
BACKLOG = 4096
MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"  # set by prepare: api_server/metrics.py says why
# Seconds an idle keep-alive connection waits for its next request (gunicorn's keepalive).
IDLE_CONNECTION_S = 5
# Container objects allocated (net) before the collector's youngest pass: Python's default
# 700. A worker with thousands of open streams keeps every stream's generators and events
# alive for seconds, so at 700 each young pass walks live objects only to promote them, and
# every tenth old pass walks them all again: 7-10% of a worker's CPU at 2,000 paced streams,
# 2-3% at this threshold (bench/results/gc_threshold.md).
GC_YOUNG_THRESHOLD = 50_000


def at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer of at least `low` (and at most `high`); argparse's
    message names the option when it is not."""

    def parse(raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {raw!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"between {low} and {high}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


PORT = at_least(0, 65535)


def add_arguments(
    p: argparse.ArgumentParser, env: Callable[[str, str], str | None], workers: int
) -> None:
    """--workers, --worker, --connections, --threads, --graceful-timeout: the options both
    servers share. Their defaults are strings (the variable's, or ours), which argparse
    checks as it checks the command line's, so a bad variable names its option too."""
    p.add_argument(
        "--workers", type=at_least(1), default=env("WORKERS", str(workers)), help="worker processes"
    )
    p.add_argument(
        "--worker",
        choices=sorted(WORKERS),
        default=env("WORKER", DEFAULT_WORKER),
        help="gevent: a greenlet per connection (default); gthread: a thread per request",
    )
    p.add_argument(
        "--connections",
        type=at_least(1),
        default=env("CONNECTIONS", str(DEFAULT_CONNECTIONS)),
        help="open connections per gevent worker",
    )
    p.add_argument(
        "--threads",
        type=at_least(1),
        default=env("THREADS", str(DEFAULT_THREADS)),
        help="threads per gthread worker: the open requests one worker serves at once",
    )
    p.add_argument(
        "--graceful-timeout",
        type=at_least(0),
        default=env("GRACEFUL_TIMEOUT", str(DEFAULT_GRACEFUL_TIMEOUT)),
        help="on SIGTERM, seconds that requests in flight get to finish",
    )


def prepare(worker: str) -> None:
    """Before the app is built (in gunicorn's master: preload): patch the standard library
    for gevent, since the app's locks, sockets and threads (the stream pump's, the
    reference's connection pool) must be gevent's in the workers; and give the metrics a
    directory of their own, so that every worker writes there and one scrape sums them
    (api_server/metrics.py: before prometheus_client is imported)."""
    _MASTER_EXIT.pid = os.getpid()
    atexit.register(_MASTER_EXIT)  # first, so that it runs last
    if worker == "gevent":
        from gevent import monkey

        monkey.patch_all()
    given = os.environ.get(MULTIPROC_DIR)
    if given:
        # prometheus_client's documentation: wiped between runs, before start (else the last
        # run's counts carry over into this one's)
        for stale in glob.glob(os.path.join(given, "*.db")):
            os.remove(stale)
    else:
        os.environ[MULTIPROC_DIR] = path = tempfile.mkdtemp(prefix="acs-metrics-")
        remove_at_exit(path)  # when the master exits, not when a worker does


def _child_exit(server: Any, worker: Any) -> None:
    """gunicorn's hook: a dead worker's gauges (open streams, vLLM's running and waiting)
    leave the sums."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def _worker_exit(server: Any, worker: Any) -> None:
    """gunicorn's hook, a worker's last step (its SystemExit in flight): the logs flushed and
    closed, then the worker leaves with its exit code by os._exit, without the interpreter's
    finalization, as a forked child should. Under gevent, finalization frees module-level
    logging handlers (logging's, Flask's) after gevent.thread is torn down, and logging's
    weakref callback on each printed a TypeError traceback from every worker at every
    shutdown (gevent issue #2148, open). The master leaves the same way, after its atexit
    cleanups (_MasterExit)."""
    _leave(_status(sys.exc_info()[1]))


def _status(leaving: BaseException | None) -> int:
    """The exit status of a SystemExit (1 for anything else): sys.exit(None) is 0;
    sys.exit("message") prints it, status 1."""
    code = leaving.code if isinstance(leaving, SystemExit) else 1
    if not isinstance(code, int):
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    return code


def _leave(code: int) -> None:
    """Out of the process by os._exit, the logs flushed and closed first: no finalization."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class _MasterExit:
    """The master's way out after gunicorn stops (serve): its atexit cleanups run (those
    registered after this one: the metrics folder, the mock's counts; atexit runs the last
    registered first), then it leaves by os._exit, as a worker does (_worker_exit), so that
    finalization never frees logging's handlers under gevent (gevent issue #2148). Registered
    first, in prepare: before it only logging's own atexit (logging.shutdown, which _leave
    calls)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.code: int | None = None  # set by serve once gunicorn has stopped

    def __call__(self) -> None:
        if self.code is not None and os.getpid() == self.pid:
            _leave(self.code)


_MASTER_EXIT = _MasterExit()


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """gunicorn_options from the command line both servers' mains parse (add_arguments, and
    their --host, --port, --log-level and --access-log)."""
    return gunicorn_options(
        args.host,
        args.port,
        args.workers,
        args.threads,
        args.log_level,
        args.access_log,
        args.worker,
        args.connections,
        args.graceful_timeout,
    )


def gunicorn_options(
    host: str,
    port: int,
    workers: int,
    threads: int = DEFAULT_THREADS,
    log_level: str = "warning",
    access_log: bool = False,
    worker: str = DEFAULT_WORKER,
    connections: int = DEFAULT_CONNECTIONS,
    graceful_timeout: int = DEFAULT_GRACEFUL_TIMEOUT,
) -> dict[str, Any]:
    # The app is loaded before the fork, so the spec, tokenizer and compiled validators
    # are built once. Both workers answer HTTP that gunicorn cannot parse in the API's
    # error shape (worker.py). graceful_timeout: on SIGTERM, open streams get this long
    # to finish.
    return {
        "bind": f"{host}:{port}",
        "workers": workers,
        "threads": threads,
        "worker_class": WORKERS[worker],
        "worker_connections": connections,
        "backlog": BACKLOG,
        "preload_app": True,
        "loglevel": log_level,
        "accesslog": "-" if access_log else None,
        "keepalive": IDLE_CONNECTION_S,
        "timeout": 60,
        "graceful_timeout": graceful_timeout,
        "child_exit": _child_exit,
        "worker_exit": _worker_exit,
        # gunicorn's Python parser, not its C one (gunicorn_h1c 0.6): the C parser takes a
        # request line with two spaces between its parts (`POST  /v1/completions  HTTP/1.1`)
        # as if it were well formed, and has no setting to refuse it; malformed HTTP gets
        # 400 malformed_http (api-decisions.md). The C parser saved about 10 us a request
        # (bench/results/http.md).
        "http_parser": "python",
    }


class _Gunicorn(BaseApplication):
    def __init__(self, app: Any, options: dict[str, Any]) -> None:
        self._app, self._options = app, options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._app


def serve(app: Any, options: dict[str, Any]) -> None:
    """Run gunicorn in this process until it is stopped."""
    # The app is built (preloaded) before the workers fork: move what it holds out of
    # the collector's reach. A full collection in a worker would otherwise walk the
    # spec, the tokenizer and the tables each time (30-50 ms, every few tens of
    # thousands of requests: a pause for every request open on that worker), and
    # touching their headers copies the pages the workers share.
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])  # the workers inherit it
    try:
        _Gunicorn(app, options).run()
    except SystemExit as leaving:  # gunicorn's halt: the atexit cleanups, then _MASTER_EXIT
        _MASTER_EXIT.code = _status(leaving)
        raise
