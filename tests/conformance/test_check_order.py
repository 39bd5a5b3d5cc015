"""The full profile's checks and their order, pinned: moving a module, splitting a group or
registering a check another way must not change what a run does. After a deliberate change
(a check added, renamed or moved), write the file anew:

    python -c "from tests.conformance.test_check_order import write; write()"
"""

from pathlib import Path

from conformance.checks import GROUPS, REGISTRY
from conformance.engine.config import RunConfig
from conformance.engine.registry import select

PINNED = Path(__file__).parents[1] / "data" / "full_profile_checks.txt"


def full_profile() -> list[str]:
    return [c.id for c in select(REGISTRY, RunConfig("http://x", "k", profile="full"))]


def write() -> None:
    PINNED.write_text("\n".join(full_profile()) + "\n")


def test_the_full_profile_runs_the_pinned_checks_in_the_pinned_order() -> None:
    assert full_profile() == PINNED.read_text().split()


def test_groups_run_in_the_order_the_code_states() -> None:
    """One stretch per group, in GROUPS' order: no group registered from another's module."""
    stretches = [
        group
        for i, group in enumerate(c.group for c in REGISTRY)
        if i == 0 or group != list(REGISTRY)[i - 1].group
    ]
    assert stretches == list(GROUPS)
