"""gallery/'s one registry of modes: every mode builds its family's middleware around the
mock, with that mode on, and the middleware serves."""

from __future__ import annotations

import pytest

from gallery import FAMILIES, MODES, broken
from mock_server import MockConfig, create_app
from tests.support.wsgi import whole_response

APP = create_app(MockConfig())
ENVIRON = {
    "REQUEST_METHOD": "GET",
    "PATH_INFO": "/v1/models",
    "SERVER_NAME": "x",
    "SERVER_PORT": "80",
    "wsgi.url_scheme": "http",
    "HTTP_AUTHORIZATION": "Bearer k",
    "CONTENT_LENGTH": "0",
}


def test_every_family_names_its_modes_and_no_name_is_two_modes() -> None:
    names = [name for family, (modes, _) in FAMILIES.items() for name in modes]
    assert len(names) == len(set(names)) == len(MODES)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_mode_builds_a_middleware_that_serves(mode: str) -> None:
    import io

    app = broken(APP, mode)
    status, _, body = whole_response(app, {**ENVIRON, "wsgi.input": io.BytesIO(b"")})
    assert status.split()[0].isdigit() and body, (mode, status)
