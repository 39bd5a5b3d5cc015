"""What the gallery's middlewares stand on: WSGI's types, an app's answer read whole, the core
over openapi.yaml (a broken server decides as the API would, then gets one thing wrong), and the
main job's per-token time (scripts/main.sh, its one home: a mock that must pass the full profile
is paced so)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from contract import Contract, spec

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]

CONTRACT = Contract(spec())

MAIN_JOB = Path(__file__).resolve().parents[1] / "scripts" / "main.sh"
_found = re.search(r"--tpot-ms (\d+)", MAIN_JOB.read_text())
assert _found is not None, f"{MAIN_JOB} starts its mock without --tpot-ms"
PACED_TPOT_MS = float(_found[1])
PACED = ("--tpot-ms", _found[1])  # the mock's command-line option


def whole_response(app: App, environ: Environ) -> tuple[str, list[tuple[str, str]], bytes]:
    """`app`'s answer to `environ`, read whole: its status, headers and body."""
    captured: dict[str, Any] = {}

    def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        captured["status"], captured["headers"] = status, headers
        return lambda data: None

    chunks = app(environ, capture)
    try:
        body = b"".join(chunks)
    finally:
        getattr(chunks, "close", lambda: None)()
    return captured["status"], captured["headers"], body
