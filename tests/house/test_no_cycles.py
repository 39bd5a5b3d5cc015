"""A request, refused or not, leaves no reference cycle of the project's making: its objects
go when their last reference does, not at the cyclic collector's next pass. (An error raised
from a local variable is such a cycle: its traceback holds the frame that holds it. Under
gunicorn these cycles were ~50 objects a refused request and most of a worker's time in
the collector: bench/results/http_house.md.)"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import EnvironBuilder

from contract import ApiError, spec
from mock_server import MockConfig, create_app
from mock_server.hook.faults import STATUS, STREAM_ERROR_AFTER
from tests.support.mock import AUTH
from tests.support.wsgi import whole_response

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tuple(
    str(ROOT / package) for package in ("api_server", "contract", "mock_server", "reference_impl")
)
MODEL = spec().default_model
COMPLETIONS = spec().completions_path

CASES: dict[str, tuple[str, object, dict[str, str]]] = {
    "completion": (COMPLETIONS, {"model": MODEL, "prompt": "The sky is", "max_tokens": 8}, {}),
    "stream": (
        COMPLETIONS,
        {"model": MODEL, "prompt": "The sky is", "max_tokens": 8, "stream": True},
        {},
    ),
    "wrong type": (COMPLETIONS, {"model": MODEL, "prompt": "x", "max_tokens": "8"}, {}),
    "unknown field": (COMPLETIONS, {"model": MODEL, "prompt": "x", "nope": 1}, {}),
    "broken rule": (COMPLETIONS, {"model": MODEL, "prompt": "x", "best_of": 2, "stream": True}, {}),
    "unknown model": (COMPLETIONS, {"model": "nope", "prompt": "x"}, {}),
    "bad JSON": (COMPLETIONS, b"{nope", {}),
    "forced status": (
        COMPLETIONS,
        {"model": MODEL, "prompt": "x"},
        {STATUS: str(spec().mock_faults["statuses"][0])},
    ),
    "stream error": (
        COMPLETIONS,
        {"model": MODEL, "prompt": "x", "max_tokens": 8, "stream": True},
        {STREAM_ERROR_AFTER: "2"},
    ),
}


def _call(app: Any, path: str, body: object, headers: dict[str, str]) -> str:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    environ = EnvironBuilder(
        path=path,
        method="POST",
        data=raw,
        content_type="application/json",
        headers={**AUTH, **headers},
    ).get_environ()
    return whole_response(app, environ)[0]


@pytest.fixture
def garbage() -> Iterator[list[object]]:
    """What the cyclic collector finds while the test runs (kept, not freed)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _ours(found: list[object]) -> list[str]:
    """The cycles' objects of the project's making: its frames and its errors."""
    return sorted(
        {
            f"frame of {o.f_code.co_name} ({o.f_code.co_filename})"
            for o in found
            if type(o).__name__ == "frame" and o.f_code.co_filename.startswith(PROJECT)
        }  # type: ignore[attr-defined]
        | {f"{type(o).__name__}" for o in found if isinstance(o, ApiError)}
    )


@pytest.mark.parametrize("case", CASES)
def test_a_request_leaves_no_cycle_of_ours(case: str, garbage: list[object]) -> None:
    app = create_app(MockConfig())
    path, body, headers = CASES[case]
    _call(app, path, body, headers)  # warmed: the first request fills caches
    gc.collect()
    garbage.clear()
    statuses = {_call(app, path, body, headers)[:3] for _ in range(5)}
    gc.collect()
    assert _ours(garbage) == []
    answered = case in (
        "completion",
        "stream",
        "stream error",
    )  # (the stream error comes inside a 200)
    assert len(statuses) == 1 and (statuses == {"200"}) == answered, statuses
