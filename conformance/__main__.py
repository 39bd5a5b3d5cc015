"""python -m conformance: see conformance/README.md."""

import sys

from conformance.cli.main import entry

sys.exit(entry())
