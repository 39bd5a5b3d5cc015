"""Every check, one module (or package) per group, named as its group.

GROUPS is the run order: cheap, independent checks first so a broken deployment fails fast;
schemathesis, the longest, last (the runner puts the premises before all of them wherever
checks may generate). Within a group, checks run in the order their module registers them.
Helpers shared by groups live in helpers/, never in a group's module.
"""

from conformance.engine.registry import REGISTRY

GROUPS = (
    "premise",
    "routes",
    "auth",
    "headers",
    "golden",
    "caps",
    "stream",
    "usage",
    "determinism",
    "semantics",
    "logprobs",
    "shape",
    "lens",
    "model",
    "effects",
    "drawn",
    "isolation",
    "budget",
    "metrics",
    "robust",
    "schema",
)
REGISTRY.defer(__name__, GROUPS)  # imported when the registry is first looked at

__all__ = ["GROUPS", "REGISTRY"]
