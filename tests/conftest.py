"""Fixtures more than one room uses, registered once for the session (a plugin is loaded once,
so each session-scoped server is one process, whichever rooms ask for it): the reference's
on real vLLM (tests/support/reference.py). A room's own fixtures are in its conftest.py."""

pytest_plugins = ("tests.support.reference",)
