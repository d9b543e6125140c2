"""The replicated backend: PostgreSQL through psycopg 3, for several server replicas behind one address.

Writes to a cluster lock its row (SELECT ... FOR UPDATE) first, so the database serializes every reservation,
commit and state update of that cluster across replicas; reads use REPEATABLE READ snapshots.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from placement.registry.sql.store import SqlStore
from placement.registry.sql.tx import Tx

__all__ = ["PostgresStore"]

_MIGRATION_LOCK = 0x706C6163  # pg_advisory_xact_lock key: replicas migrate one at a time
_POOL = 16


class PostgresStore(SqlStore):
    """A small pool of autocommit connections; each transaction is explicit (conn.transaction())."""

    dialect = "postgres"
    postgres = True

    def __init__(self, url: str, pool_size: int = _POOL) -> None:
        import psycopg

        self._psycopg = psycopg
        self.url = url
        self._pool: queue.LifoQueue[Any] = queue.LifoQueue()
        self._size = pool_size
        self._made = 0
        self._lock = threading.Lock()
        self._closed = False
        self.migrate()

    def _connect(self) -> Any:
        return self._psycopg.connect(self.url, autocommit=True)

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        try:
            conn = self._pool.get_nowait()
        except queue.Empty:
            with self._lock:
                make = self._made < self._size
                if make:
                    self._made += 1
            if make:
                try:
                    conn = self._connect()
                except BaseException:
                    with self._lock:
                        self._made -= 1
                    raise
            else:
                conn = self._pool.get()
        broken = False
        try:
            yield conn
        except self._psycopg.OperationalError:
            broken = True
            raise
        finally:
            if broken or conn.closed or self._closed:
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
            elif lock is not None:
                cur.execute("SELECT 1 FROM clusters WHERE id = %s FOR UPDATE", (lock,))
            yield Tx(cur, postgres=True)

    @contextmanager
    def solve_turn(self, cluster_id: str) -> Iterator[None]:
        with self._conn() as conn:
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"solve:{cluster_id}",))
            try:
                yield
            finally:
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (f"solve:{cluster_id}",))

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._conn() as conn, conn.cursor() as cur:  # autocommit: one round trip
            cur.execute(sql.replace("?", "%s"), tuple(params))
            return list(cur.fetchall())

    def _migration_lock(self, tx: Tx) -> None:
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
