"""Every check, registered on import in a fixed order (the order a run follows).

Cheap, independent checks come first so a broken deployment fails fast;
schemathesis, the longest, comes last.
"""
from conformance.checks import (  # noqa: F401, I001  (import order = run order)
    premise, routes, golden, caps, streams, semantics, logprobs, shape, lens, effects, isolation, budget, metrics, robust, schema,
)
from conformance.registry import REGISTRY

__all__ = ["REGISTRY"]
