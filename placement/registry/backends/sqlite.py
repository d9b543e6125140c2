"""The embedded backend: one SQLite file in WAL mode, synchronous=FULL; writes take BEGIN IMMEDIATE.

Several processes may share the file (SQLite's file lock serializes their writes; busy_timeout bounds the wait).
Waiting longer than the timeouts for this process's connection or another process's write lock raises `Busy`; a
full disk raises `StoreFull` and rolls back. A write reads the clock once, after BEGIN IMMEDIATE (it holds the
file's only write lock from then on), and checks the leases it acts on again just before COMMIT.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from placement.registry.model import Busy, Fenced, StoreFull
from placement.registry.sql.store import SqlStore
from placement.registry.sql.tx import Tx

__all__ = ["SqliteStore"]

LOCK_TIMEOUT_S = 10.0
"""Longest wait for this process's connection, and for another process's write lock (busy_timeout)."""


WAL_CHECKPOINT_PAGES = 256
"""The write-ahead log is checkpointed into the file once it holds this many pages (1 MiB of 4 KiB pages), and
then reused from its start: with compaction, the file and its log stay bounded under steady load."""
WAL_LIMIT_BYTES = 1024 * 1024
"""The write-ahead log is cut back to this after a checkpoint (PRAGMA journal_size_limit)."""


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))


def _disk_full(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)


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
        self.full = None
        self._conn = self._connect()
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
        self._conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
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

    def _failed(self, e: sqlite3.Error, what: str) -> Exception:
        """The registry's error for an SQLite error (nothing was written): full disk, busy, or a failed call."""
        if _disk_full(e):
            self.full = str(e)
            return StoreFull(str(self.path), f"sqlite: {e}")
        if _locked(e):
            return self._busy(what)
        return Busy(f"the registry database {self.path} failed the call ({e}); nothing was written; retry")

    def _rollback(self, cur: sqlite3.Cursor) -> None:
        if self._conn.in_transaction:  # SQLite may have rolled back itself (a full disk)
            with suppress(sqlite3.Error):
                cur.execute("ROLLBACK")

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
                    cur.execute("BEGIN IMMEDIATE")
                except sqlite3.OperationalError as e:
                    raise self._failed(e, "another process held the write lock") from e
                tx = Tx(cur, postgres=False, now=time.time())  # the clock, once the write lock is ours
                try:
                    yield tx
                    for check in tx.before_commit:
                        check()
                    at = time.time() if tx.given_now is None else tx.given_now
                    ran_out = [(rid, end) for rid, end in tx.fences if end <= at]
                    if ran_out:  # a pause since the decision: the lease ended before this COMMIT
                        raise Fenced(f"reservation {ran_out[0][0]} ran out at {ran_out[0][1]} before COMMIT")
                    cur.execute("COMMIT")
                except sqlite3.OperationalError as e:
                    self._rollback(cur)
                    raise self._failed(e, "another process held the write lock") from e
                except BaseException:
                    self._rollback(cur)
                    raise
                self.full = None
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
            raise self._failed(e, "the file was locked for reading") from e
        finally:
            cur.close()

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:  # autocommit mode: the statement is its own transaction
            return list(self._reader().execute(sql, tuple(params)).fetchall())
        except sqlite3.OperationalError as e:
            raise self._failed(e, "the file was locked for reading") from e

    def clock(self) -> float:
        return time.time()

    def ping(self, timeout_s: float) -> None:
        """A read of the file; while `full`, a one-row write too (it succeeds once space is freed)."""
        self._one("SELECT COUNT(*) FROM schema_version")
        if self.full is not None:
            with self._tx(write=True) as tx:
                tx.x("INSERT OR REPLACE INTO probe (id, at) VALUES (1, ?)", (tx.now,))

    def size_bytes(self) -> int:
        total = 0
        for suffix in ("", "-wal", "-shm"):
            with suppress(FileNotFoundError):
                total += (self.path.parent / (self.path.name + suffix)).stat().st_size
        return total

    def _unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.IntegrityError) and "UNIQUE" in str(exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._conn.close()
            for conn in self._readers:
                conn.close()
            self._readers.clear()
