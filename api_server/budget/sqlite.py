"""The per-key Budget, shared by every thread and every worker process of one server.

The remaining tokens of each key live in one SQLite file (WAL mode). Each Hold
and each settlement is one `BEGIN IMMEDIATE` transaction, which takes the
file's write lock before reading, so two requests can never both spend the
same tokens and no update is lost, whichever process they run in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from api_server.budget.protocol import key_id
from contract import CompletionRequest, Hold, hold

FILE_NAME = "budget.sqlite3"
LOCK_TIMEOUT_S = 60.0  # how long a request waits for another one's transaction


class BudgetStore:
    """Remaining tokens per key, starting at `initial` for a key not seen before."""

    def __init__(self, directory: str | Path, initial: int) -> None:
        self.path = Path(directory) / FILE_NAME
        self.initial = initial
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # persistent: set once per file
        finally:
            db.close()
        with self._transaction() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS budget (key TEXT PRIMARY KEY, remaining INTEGER NOT NULL)"
            )

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # A connection per transaction: cheap, and safe across threads and forks.
        db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def _remaining(self, db: sqlite3.Connection, key: str) -> int:
        key = key_id(key)  # the file keeps the key's hash, never the key
        row = db.execute("SELECT remaining FROM budget WHERE key = ?", (key,)).fetchone()
        if row is None:
            db.execute("INSERT INTO budget (key, remaining) VALUES (?, ?)", (key, self.initial))
            return self.initial
        return int(row[0])

    def remaining(self, key: str) -> int:
        with self._transaction() as db:
            return self._remaining(db, key)

    def reserve(self, key: str, req: CompletionRequest) -> Hold:
        """The Hold for `req`, taken from the key's Budget (maybe clamped), or 429."""
        with self._transaction() as db:
            held = hold(req.prompt_token_counts, req.n, req.max_tokens, self._remaining(db, key))
            db.execute(
                "UPDATE budget SET remaining = remaining - ? WHERE key = ?",
                (held.amount, key_id(key)),
            )
        return held

    def settle(self, key: str, held: Hold, used: int) -> None:
        """Give back what the Hold reserved beyond the tokens actually used."""
        with self._transaction() as db:
            db.execute(
                "UPDATE budget SET remaining = remaining + ? WHERE key = ?",
                (held.amount - used, key_id(key)),
            )


class Unlimited:
    """The default: no Budget, never clamped."""

    def reserve(self, key: str, req: CompletionRequest) -> Hold:
        return hold(req.prompt_token_counts, req.n, req.max_tokens, None)

    def settle(self, key: str, held: Hold, used: int) -> None:
        pass
