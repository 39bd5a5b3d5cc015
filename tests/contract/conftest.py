"""The contract room's fixtures: the shipped spec and a smaller one loaded from a file as any
spec is (tests/support/contract.py's `smaller`), and a mock over each, built before either answers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from flask.testing import FlaskClient

from contract import Spec, load_spec
from mock_server import MockConfig, create_app
from tests.support.contract import smaller


@pytest.fixture(scope="module")
def specs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Spec, Spec]:
    default = load_spec()
    path: Path = tmp_path_factory.mktemp("small") / "openapi.yaml"
    path.write_text(yaml.safe_dump(smaller(default.raw), sort_keys=False), encoding="utf-8")
    return default, load_spec(path)


@pytest.fixture(scope="module")
def clients(specs: tuple[Spec, Spec]) -> tuple[FlaskClient, FlaskClient]:
    # Both built before either answers: neither app's checks may come from the other's spec.
    apps = [create_app(MockConfig(), api=s) for s in specs]
    return apps[0].test_client(), apps[1].test_client()
