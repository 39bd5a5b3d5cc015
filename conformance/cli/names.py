"""The command's name as the user typed it, for its usage and --version (main and replay)."""

from __future__ import annotations

import os
import sys

COMMAND = "acs-conformance"  # the installed command (pyproject.toml's [project.scripts])


def prog() -> str:
    """The command as the user typed it: `acs-conformance`, or `python -m conformance`."""
    return COMMAND if os.path.basename(sys.argv[0] or "") == COMMAND else "python -m conformance"
