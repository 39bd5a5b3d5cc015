"""The reference room's fixtures: fake upstreams (a /health that answers as told, a router's
health and models: tests/support/fake_vllm.py) and a self-signed certificate for TLS to vLLM."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_vllm import Health, Router
from tests.support.wsgi import serve


@pytest.fixture
def upstream() -> Iterator[Health]:
    with Health() as served:
        yield served


@pytest.fixture
def router() -> Iterator[tuple[Router, str]]:
    app = Router()
    with serve(app) as url:
        yield app, url


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl's command), and its key."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
