"""Fixtures more than one room uses, registered once for the session (a plugin is loaded once,
so each session-scoped server is one process, whichever rooms ask for it): the reference's
on real vLLM (tests/support/reference.py). A room's own fixtures are in its conftest.py."""

import pytest

pytest_plugins = ("tests.support.reference",)

# The session's servers on real vLLM: a start costs about a minute, so under pytest-xdist
# (scripts/test.sh runs `-n 2 --dist loadgroup`) each is started by one worker only.
SESSION_SERVERS = ("reference", "plain_vllm")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """One xdist group per session server and one per module (so a module's own servers start
    once); the session servers' tests first, so their long group starts as the run does."""

    def server(item: pytest.Item) -> str | None:
        names = getattr(item, "fixturenames", ())
        return next((name for name in SESSION_SERVERS if name in names), None)

    for item in items:
        item.add_marker(pytest.mark.xdist_group(server(item) or item.nodeid.split("::")[0]))
    items.sort(key=lambda item: server(item) is None)
