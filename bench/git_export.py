"""The tracked files of a git commit, exported to a temporary folder: how a benchmark's
`--baseline REF` runs the old code beside the new, with this checkout's Python."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_commit(ref: str, prefix: str, error: type[Exception] = RuntimeError) -> Path:
    """A new temporary folder holding `ref`'s tracked files (the caller removes it);
    `error` is raised, with git's message, when git cannot export `ref`."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True)
    if archive.returncode != 0:
        shutil.rmtree(folder)
        raise error(f"git archive {ref}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    return folder
