"""The replicated backend: PostgreSQL through psycopg 3, for several server replicas behind one address.

Writes to a cluster lock its row (SELECT ... FOR UPDATE) first, so the database serializes every reservation,
commit and state update of that cluster across replicas; reads use REPEATABLE READ snapshots. A transaction
takes one pooled connection and never a second one; waits for a connection and for locks are bounded (`Busy`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from placement.registry.model import Busy
from placement.registry.sql.store import SqlStore
from placement.registry.sql.tx import Tx

__all__ = ["POOL_SIZE", "PostgresStore", "split_options"]

_MIGRATION_LOCK = 0x706C6163  # pg_advisory_xact_lock key: replicas migrate one at a time
POOL_SIZE = 16
"""Connections per replica (URL option pool_size)."""
POOL_TIMEOUT_S = 5.0
"""Longest wait for a free connection (URL option pool_timeout_s)."""
LOCK_TIMEOUT_S = 5.0
"""Longest wait for a cluster's row lock (URL option lock_timeout_s); migrations wait up to 60 s."""
_CONNECT_TIMEOUT_S = 5
_IDLE_IN_TX_MS = (
    30_000  # a replica stuck inside a transaction (never during a solve) loses its locks after this
)
_OPTIONS = {"pool_size": int, "pool_timeout_s": float, "lock_timeout_s": float}


def split_options(url: str) -> tuple[str, dict[str, float]]:
    """The URL without the store's own query options (pool_size, pool_timeout_s, lock_timeout_s), and them.
    ValueError for a bad value."""
    parts = urlsplit(url)
    keep, opts = [], {}
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if k in _OPTIONS:
            try:
                val = float(_OPTIONS[k](v))
            except ValueError:
                raise ValueError(f"registry url option {k}={v!r}: expected a number") from None
            if val <= 0:
                raise ValueError(f"registry url option {k}={v!r}: must be > 0")
            opts[k] = val
        else:
            keep.append((k, v))
    return urlunsplit(parts._replace(query=urlencode(keep))), opts


class PostgresStore(SqlStore):
    """A bounded pool of autocommit connections; each transaction is explicit (conn.transaction())."""

    dialect = "postgres"
    postgres = True

    def __init__(self, url: str, pool_size: int | None = None) -> None:
        # psycopg is imported here, not at the top: it is the PostgreSQL backend's own dependency, and a server on
        # SQLite (or with the registry off) never loads it.
        import psycopg

        self._psycopg = psycopg
        self.url = url
        self._dsn, opts = split_options(url)
        self._size = int(pool_size or opts.get("pool_size", POOL_SIZE))
        self._pool_timeout = opts.get("pool_timeout_s", POOL_TIMEOUT_S)
        self._lock_ms = int(1000 * opts.get("lock_timeout_s", LOCK_TIMEOUT_S))
        self._pool: queue.LifoQueue[Any] = queue.LifoQueue()
        self._made = 0
        self._lock = threading.Lock()
        self._closed = False
        self.migrate()

    def _connect(self) -> Any:
        try:
            return self._psycopg.connect(
                self._dsn,
                autocommit=True,
                connect_timeout=_CONNECT_TIMEOUT_S,
                options=f"-c idle_in_transaction_session_timeout={_IDLE_IN_TX_MS}",
            )
        except self._psycopg.OperationalError as e:
            raise Busy(f"the registry database did not answer ({e}); nothing was written; retry") from e

    def _take(self) -> Any:
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            make = self._made < self._size
            if make:
                self._made += 1
        if make:
            try:
                return self._connect()
            except BaseException:
                with self._lock:
                    self._made -= 1
                raise
        try:
            return self._pool.get(timeout=self._pool_timeout)
        except queue.Empty:
            raise Busy(
                f"all {self._size} database connections of this replica stayed busy for {self._pool_timeout:g} s; "
                "nothing was written; retry in a moment"
            ) from None

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        conn = self._take()
        try:
            yield conn
        except self._psycopg.OperationalError as e:
            if isinstance(e, self._psycopg.errors.LockNotAvailable):
                raise Busy(
                    f"a cluster lock stayed taken for {self._lock_ms / 1000:g} s (another writer of the same "
                    "cluster); nothing was written; retry in a moment"
                ) from e
            raise Busy(f"the registry database failed the call ({e}); nothing was written; retry") from e
        finally:
            if conn.closed or conn.broken or self._closed:
                conn.close()
                with self._lock:
                    self._made -= 1
            else:
                self._pool.put(conn)

    @contextmanager
    def _tx(self, write: bool, lock: str | None = None) -> Iterator[Tx]:
        with self._conn() as conn, conn.transaction(), conn.cursor() as cur:
            if not write:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            else:
                cur.execute(f"SET LOCAL lock_timeout = {self._lock_ms}")
                if lock is not None:
                    cur.execute("SELECT 1 FROM clusters WHERE id = %s FOR UPDATE", (lock,))
            yield Tx(cur, postgres=True)

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._conn() as conn, conn.cursor() as cur:  # autocommit: one round trip
            cur.execute(sql.replace("?", "%s"), tuple(params))
            return list(cur.fetchall())

    def _migration_lock(self, tx: Tx) -> None:
        tx.x("SET LOCAL lock_timeout = 60000")
        tx.q("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))

    def _unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.errors.UniqueViolation)

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._pool.get_nowait().close()
            except queue.Empty:
                break
