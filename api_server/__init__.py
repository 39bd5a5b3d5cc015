"""The API server both engines share: the Flask app over the core, the completions
route, responses and SSE, the engine protocol and its events, the Budget, the
server's settings and the gunicorn runner (ARCHITECTURE.md)."""

from api_server.app import create_app, served_models
from api_server.config import ServerConfig
from api_server.engine import (
    Activations,
    ChoiceDelta,
    Engine,
    ErrorEvent,
    Event,
    LogprobsDelta,
    StreamEvent,
    Usage,
)
from api_server.hooks import Hook

__all__ = [
    "Activations",
    "ChoiceDelta",
    "Engine",
    "ErrorEvent",
    "Event",
    "Hook",
    "LogprobsDelta",
    "ServerConfig",
    "StreamEvent",
    "Usage",
    "create_app",
    "served_models",
]
