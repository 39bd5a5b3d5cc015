"""python -m conformance: see conformance/README.md."""
from conformance.cli import entry

entry()
