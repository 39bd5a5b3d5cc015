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


def test_a_served_profiles_sample_goes_to_its_innermost_known_component() -> None:
    from bench.served_profile import COMPONENTS, component_of

    names = [name for name, _ in COMPONENTS]
    flask = "Flask.wsgi_app (flask/app.py:1511)"
    engine = "sample_choice (mock_server/engine/sampler.py:240)"
    prom = "MmapedValue.inc (prometheus_client/values.py:60)"
    rules = "Rules.check (contract/rules.py:36)"
    assert component_of([flask, engine]) == names[0]
    assert component_of([flask, engine, "mix (mock_server/engine/model.py:20)"]) == names[0]
    assert (
        component_of([flask, "Metered._observe (mock_server/hook/metered.py:9)", prom]) == names[1]
    )
    assert component_of([flask, rules, "<genexpr> (re/__init__.py:3)"]) == names[3]
    assert component_of(["main (x.py:1)", "loads (json/decoder.py:337)"]) == names[5]
    assert component_of([flask]) == names[6]
    assert component_of(["<module> (somewhere.py:1)"]) == names[-1]
