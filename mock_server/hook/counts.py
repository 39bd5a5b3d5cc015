"""Counts shared by every worker of one mock: how many requests X-Mock-Fail-First has seen
for each key, so that "fail the first N, then succeed" holds whichever worker a retry lands
on (gunicorn spreads one client's retries over its workers).

One SQLite file in a directory made when the app is built (before gunicorn forks, so every
worker opens the same file); one `INSERT ... ON CONFLICT ... RETURNING` a request, atomic
across processes. Only requests that carry the header touch it. The file keeps a hash of
each key (api_server.budget.protocol.key_id), never the key. The directory goes when the process that made
it exits (not when a worker does: they run the same atexit hooks).
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from api_server.budget.protocol import key_id
from api_server.children import remove_at_exit

LOCK_TIMEOUT_S = 60.0


class SeenCounts:
    """Requests seen per key, counted across the processes forked after this was built."""

    def __init__(self) -> None:
        directory = tempfile.mkdtemp(prefix="acs-mock-counts-")
        remove_at_exit(directory)
        self.path = Path(directory) / "seen.sqlite3"
        db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE seen (key TEXT PRIMARY KEY, n INTEGER NOT NULL)")
        finally:
            db.close()

    def next(self, key: str) -> int:
        """This request's number among those of `key`: 1 for the first."""
        # A connection a request: safe across threads and forks, and only fault tests pay it.
        db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        try:
            row = db.execute(
                "INSERT INTO seen (key, n) VALUES (?, 1) ON CONFLICT (key) DO UPDATE SET n = n + 1 "
                "RETURNING n",
                (key_id(key),),
            ).fetchone()
        finally:
            db.close()
        return int(row[0])

    def reset(self) -> None:
        """Every key's count starts anew (the mock's DELETE of x-mock-faults.reset_path)."""
        db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        try:
            db.execute("DELETE FROM seen")
        finally:
            db.close()
