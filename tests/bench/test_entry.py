"""`python -m bench`: one entry that lists every benchmark and runs each by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.__main__ import BENCHES, main

ROOT = Path(__file__).resolve().parents[2]


def test_every_module_with_a_command_is_listed_and_nothing_else() -> None:
    commands = {
        p.stem
        for p in (ROOT / "bench").glob("*.py")
        if "\ndef main(" in p.read_text(encoding="utf-8")
    }
    assert commands - {"__main__"} == set(BENCHES.values())


def test_the_list_names_each_benchmark_with_its_summary() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.splitlines()[2:] if line.strip()]
    assert listed == list(BENCHES)


def test_a_benchmark_runs_by_name_with_its_own_options(capsys) -> None:  # type: ignore[no-untyped-def]
    try:
        main(["core", "--help"])
    except SystemExit as exc:  # argparse's --help
        assert exc.code == 0
    assert capsys.readouterr().out.startswith(
        "usage: python -m bench core [-h] [--seconds SECONDS]"
    )


def test_an_unknown_name_is_a_usage_error() -> None:
    assert main(["no-such-bench"]) == 2
