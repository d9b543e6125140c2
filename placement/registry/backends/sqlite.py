"""The embedded backend: one SQLite file in WAL mode, synchronous=FULL; writes take BEGIN IMMEDIATE.

Several processes may share the file (SQLite's file lock serializes their writes; busy_timeout bounds the wait).
Waiting longer than the timeouts for this process's connection or another process's write lock raises `Busy`.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from placement.registry.model import Busy
from placement.registry.sql.store import SqlStore
from placement.registry.sql.tx import Tx

__all__ = ["SqliteStore"]

LOCK_TIMEOUT_S = 10.0
"""Longest wait for this process's connection, and for another process's write lock (busy_timeout)."""


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


class SqliteStore(SqlStore):
    """One connection per store, used by one thread at a time (a lock): SQLite serializes writers anyway, and no
    transaction is open during a solve, so the lock is held for milliseconds."""

    dialect = "sqlite"
    postgres = False

    def __init__(self, path: str | Path, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.url = f"sqlite://{self.path}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = lock_timeout_s
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            str(self.path), isolation_level=None, check_same_thread=False, timeout=lock_timeout_s
        )
        self._conn.execute(f"PRAGMA busy_timeout = {int(lock_timeout_s * 1000)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(
            "PRAGMA synchronous = FULL"
        )  # a committed reservation survives a crash of the machine
        self._conn.execute("PRAGMA foreign_keys = ON")
        self.migrate()

    def _busy(self, what: str) -> Busy:
        return Busy(
            f"the registry database {self.path} was busy for {self._timeout:g} s ({what}); nothing was "
            "written; retry in a moment"
        )

    @contextmanager
    def _held(self) -> Iterator[None]:
        if not self._lock.acquire(timeout=self._timeout):
            raise self._busy("this process's connection was in use")
        try:
            yield
        finally:
            self._lock.release()

    @contextmanager
    def _tx(self, write: bool, lock: str | None = None) -> Iterator[Tx]:
        with self._held():
            cur = self._conn.cursor()
            try:
                try:
                    cur.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                except sqlite3.OperationalError as e:
                    if _locked(e):
                        raise self._busy("another process held the write lock") from e
                    raise
                try:
                    yield Tx(cur, postgres=False)
                except BaseException as e:
                    cur.execute("ROLLBACK")
                    if _locked(e):
                        raise self._busy("another process held the write lock") from e
                    raise
                else:
                    cur.execute("COMMIT")
            finally:
                cur.close()

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._held():  # autocommit mode: the statement is its own transaction
            try:
                return list(self._conn.execute(sql, tuple(params)).fetchall())
            except sqlite3.OperationalError as e:
                if _locked(e):
                    raise self._busy("another process held the write lock") from e
                raise

    def _unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
