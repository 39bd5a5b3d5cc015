"""The house room's fixtures: the wheel built as the images build it, and the gate a deployment's
CI installs from it (tests/support/wheel.py), each once for the room."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.wheel import Venv, build_wheel, fresh_venv


@pytest.fixture(scope="package")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel --no-deps .` in a copy of the build context, as the images' first stage does."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="package")
def gate(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """What a deployment's CI installs: the wheel's [conformance] extra only."""
    return fresh_venv(tmp_path_factory.mktemp("gate"), f"{wheel}[conformance]")
