"""The mock server: the whole API over the core, with a deterministic fake engine."""
from mock_server.app import create_app
from mock_server.config import MockConfig
from mock_server.engine import Activations, ChoiceDelta, Engine, Event, LogprobsDelta, Usage

__all__ = ["Activations", "ChoiceDelta", "Engine", "Event", "LogprobsDelta", "MockConfig",
           "Usage", "create_app"]
