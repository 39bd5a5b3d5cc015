"""What the routes need, held by the app (`app.state`), looked up once per request."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flask import current_app

from api_server.budget import Budget
from api_server.config import ServerConfig
from api_server.engine import Engine
from api_server.hooks import Hook
from contract import Contract, ModelInfo

if TYPE_CHECKING:
    from flask import Flask

    from api_server.metrics import ApiMetrics   # (imported by create_app: see there)


@dataclass(frozen=True)
class State:
    contract: Contract   # the app's spec, built once: preflight, validation, error bodies
    config: ServerConfig
    models: Mapping[str, ModelInfo]
    engine: Engine
    budget: Budget
    hook: Hook | None
    started: int
    metrics: "ApiMetrics"


def state() -> State:
    """The State of the app serving this request."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    return app.state  # type: ignore[attr-defined, no-any-return]
