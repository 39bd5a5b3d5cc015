"""Where the Budget lives: one interface, two backends, chosen by one setting.

    budget_url unset          SQLite in budget_dir (sqlite.py): exact across the
                              workers of one machine; the embedded default
    redis://host:port/db      Redis (redis.py): exact across API replicas on
    rediss://..., unix://...  any number of machines, which share it

Either way a Hold is taken, and later settled, in one atomic step, and a store
keeps a hash of each API key (key_id), never the key itself. The interface and
key_id live in protocol.py, which the backends import; this package's own module
(open_budget) imports the backends, and no backend imports it.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING

from api_server.budget.protocol import Budget, key_id, redacted
from api_server.budget.sqlite import BudgetStore, Unlimited
from api_server.children import remove_at_exit

if TYPE_CHECKING:
    from api_server.config import ServerConfig

__all__ = ["REDIS_SCHEMES", "Budget", "key_id", "open_budget"]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def open_budget(config: ServerConfig) -> Budget:
    """The Budget store the settings name (Unlimited without budget_tokens)."""
    if config.budget_tokens is None:
        return Unlimited()
    url = config.budget_url
    if url:
        if not url.startswith(REDIS_SCHEMES):
            raise ValueError(
                f"budget_url: expected {', '.join(s + '...' for s in REDIS_SCHEMES)}, not {redacted(url)!r}"
            )
        from api_server.budget.redis import RedisBudget  # redis is loaded only when used

        return RedisBudget(url, config.budget_tokens)
    directory = config.budget_dir
    if directory is None:  # the process's own file, gone with it (an in-process mock's too)
        directory = tempfile.mkdtemp(prefix="api-budget-")
        remove_at_exit(directory)
    return BudgetStore(directory, config.budget_tokens)
