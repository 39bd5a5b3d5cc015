"""python -m conformance: see conformance/README.md."""
import sys

from conformance.cli import entry

sys.exit(entry())
