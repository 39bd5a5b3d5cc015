"""What the routes need, held by the app where Flask keeps an extension's state
(`app.extensions[STATE]`), looked up once per request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from flask import current_app

from api_server.budget import Budget
from api_server.config import ServerConfig
from api_server.engine import Engine
from api_server.hooks import Hook
from contract import Contract, ModelInfo

if TYPE_CHECKING:
    from flask import Flask

    from api_server.metrics import ApiMetrics  # (imported by create_app: see there)


@dataclass(frozen=True)
class State:
    contract: Contract  # the app's spec, built once: preflight, validation, error bodies
    config: ServerConfig
    models: Mapping[str, ModelInfo]
    engine: Engine
    budget: Budget
    hook: Hook | None
    started: int
    metrics: ApiMetrics


STATE = "acs"  # the app's key in app.extensions


def state_of(app: Flask | Any) -> State:
    """The State `app` holds (the bench's bare ceiling holds one with a config and a Contract)."""
    return cast(State, app.extensions[STATE])


def state() -> State:
    """The State of the app serving this request."""
    return cast(State, current_app.extensions[STATE])
