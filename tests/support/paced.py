"""The per-token time of the main job's bundled mock (scripts/main.sh, its one home): a mock that
must pass the full profile (exit 0) is paced so, and its run proves isolation:steering.same_batch's
overlap (a steered stream outlives the plain request sent beside it)."""

from __future__ import annotations

import re
from pathlib import Path

MAIN_JOB = Path(__file__).resolve().parents[2] / "scripts" / "main.sh"
_found = re.search(r"--tpot-ms (\d+)", MAIN_JOB.read_text())
assert _found is not None, f"{MAIN_JOB} starts its mock without --tpot-ms"
PACED_TPOT_MS = float(_found[1])
PACED = ("--tpot-ms", _found[1])  # the mock's command-line option
