"""The embedded backend: one SQLite file in WAL mode, synchronous=FULL; writes take BEGIN IMMEDIATE.

Several processes may share the file (SQLite's file lock serializes their writes; busy_timeout waits for it).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from placement.registry.sql.store import SqlStore
from placement.registry.sql.tx import Tx

__all__ = ["SqliteStore"]

_BUSY_TIMEOUT_MS = 30_000


class SqliteStore(SqlStore):
    """One connection per store, used by one thread at a time (a lock): SQLite serializes writers anyway."""

    dialect = "sqlite"
    postgres = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.url = f"sqlite://{self.path}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            str(self.path), isolation_level=None, check_same_thread=False, timeout=_BUSY_TIMEOUT_MS / 1000
        )
        self._conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(
            "PRAGMA synchronous = FULL"
        )  # a committed reservation survives a crash of the machine
        self._conn.execute("PRAGMA foreign_keys = ON")
        self.migrate()

    @contextmanager
    def _tx(self, write: bool, lock: str | None = None) -> Iterator[Tx]:
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield Tx(cur, postgres=False)
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")
            finally:
                cur.close()

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:  # autocommit mode: the statement is its own transaction
            return list(self._conn.execute(sql, tuple(params)).fetchall())

    def _unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
