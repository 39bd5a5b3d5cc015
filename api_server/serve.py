"""Serve a Flask app of this API under gunicorn: one set of settings for the mock,
the reference implementation and the benchmark's bare ceiling."""
from __future__ import annotations

from typing import Any

from gunicorn.app.base import BaseApplication


def gunicorn_options(host: str, port: int, workers: int, threads: int, log_level: str = "warning",
                     access_log: bool = False, graceful_timeout: int = 5) -> dict[str, Any]:
    # gthread: a thread per open stream. The app is loaded before the fork, so the
    # spec, tokenizer and compiled validators are built once. ApiThreadWorker answers
    # HTTP that gunicorn cannot parse in the API's error shape. On SIGTERM, requests in
    # flight get graceful_timeout seconds to finish.
    return {
        "bind": f"{host}:{port}", "workers": workers, "threads": threads,
        "worker_class": "api_server.worker.ApiThreadWorker", "preload_app": True,
        "loglevel": log_level, "accesslog": "-" if access_log else None, "keepalive": 5,
        "timeout": 60, "graceful_timeout": graceful_timeout,
    }


class _Gunicorn(BaseApplication):  # type: ignore[misc]
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
    _Gunicorn(app, options).run()
