"""The command line: `python -m conformance` (main.py), its `diff` (diff.py) and `replay`
(replay.py) subcommands. What they print and write lives in conformance/reports/."""

from conformance.cli.main import entry, main

__all__ = ["entry", "main"]
