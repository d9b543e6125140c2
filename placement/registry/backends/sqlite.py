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
    """One writing connection, used by one thread at a time (a lock): SQLite serializes writers anyway, and no
    transaction is open during a solve, so the lock is held for milliseconds. Reads use a connection per thread
    (WAL readers see the last commit and never wait for a writer's fsync)."""

    dialect = "sqlite"
    postgres = False

    def __init__(self, path: str | Path, lock_timeout_s: float = LOCK_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.url = f"sqlite://{self.path}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = lock_timeout_s
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._closed = False
        self._conn = self._connect()
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(
            "PRAGMA synchronous = FULL"
        )  # a committed reservation survives a crash of the machine
        self.migrate()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            str(self.path), isolation_level=None, check_same_thread=False, timeout=self._timeout
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    def _reader(self) -> sqlite3.Connection:
        """This thread's reading connection (made on first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise Busy(f"the registry database {self.path} is closed")
            conn = self._connect()
            conn.execute("PRAGMA query_only = ON")
            self._local.conn = conn
            with self._lock:
                self._readers.append(conn)
        return conn

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
        if not write:
            with self._read() as tx:
                yield tx
            return
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

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        """A read transaction on this thread's connection: one consistent snapshot of the last commit."""
        cur = self._reader().cursor()
        try:
            cur.execute("BEGIN")
            try:
                yield Tx(cur, postgres=False)
            finally:
                cur.execute("ROLLBACK")
        except sqlite3.OperationalError as e:
            if _locked(e):
                raise self._busy("the file was locked for reading") from e
            raise
        finally:
            cur.close()

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:  # autocommit mode: the statement is its own transaction
            return list(self._reader().execute(sql, tuple(params)).fetchall())
        except sqlite3.OperationalError as e:
            if _locked(e):
                raise self._busy("the file was locked for reading") from e
            raise

    def _unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()
            for conn in self._readers:
                conn.close()
            self._readers.clear()
