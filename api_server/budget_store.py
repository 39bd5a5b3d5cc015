"""Where the Budget lives: one interface, two backends, chosen by one setting.

    budget_url unset          SQLite in budget_dir (budget.py): exact across the
                              workers of one machine; the embedded default
    redis://host:port/db      Redis (budget_redis.py): exact across API replicas on
    rediss://..., unix://...  any number of machines, which share it

Either way a Hold is taken, and later settled, in one atomic step, and a store
keeps a hash of each API key (key_id), never the key itself.
"""
from __future__ import annotations

import hashlib
import tempfile
from typing import TYPE_CHECKING, Protocol

from contract import CompletionRequest, Hold

if TYPE_CHECKING:
    from api_server.config import ServerConfig

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


class Budget(Protocol):
    """A Budget store: the Hold for a request, taken from its key's Budget, then settled."""

    def reserve(self, key: str, req: CompletionRequest) -> Hold:
        """The Hold for `req` (maybe clamped), or contract's 429 insufficient_quota."""
        ...

    def settle(self, key: str, held: Hold, used: int) -> None:
        """Give back what the Hold reserved beyond the `used` tokens."""
        ...


def key_id(api_key: str) -> str:
    """What a store keeps for an API key: its SHA-256, so a leaked store leaks no key."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def open_budget(config: ServerConfig) -> Budget:
    """The Budget store the settings name (Unlimited without budget_tokens)."""
    from api_server.budget import BudgetStore, Unlimited

    if config.budget_tokens is None:
        return Unlimited()
    url = config.budget_url
    if url:
        if not url.startswith(REDIS_SCHEMES):
            raise ValueError(f"budget_url: expected {', '.join(s + '...' for s in REDIS_SCHEMES)}, not {url!r}")
        from api_server.budget_redis import RedisBudget
        return RedisBudget(url, config.budget_tokens)
    return BudgetStore(config.budget_dir or tempfile.mkdtemp(prefix="api-budget-"), config.budget_tokens)
