"""The mock server: the API server (api_server/) with a deterministic fake engine."""

from mock_server.config import MockConfig
from mock_server.server import create_app

__all__ = ["MockConfig", "create_app"]
