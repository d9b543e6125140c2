"""The replicated backend: PostgreSQL through psycopg 3, for several server replicas behind one address.

Writes to a cluster lock its row (SELECT ... FOR UPDATE) first, so the database serializes every reservation,
commit and state update of that cluster across replicas, then read the database's clock; reads use REPEATABLE
READ snapshots. A transaction takes one pooled connection and never a second one. Every session is bounded at
connect: lock_timeout, statement_timeout and idle_in_transaction_session_timeout (a replica paused inside a
transaction loses its locks within seconds), and a lease the transaction acts on is fenced at COMMIT by a
deferred trigger on the database's clock (schema 3).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from placement.registry.model import Busy, Fenced, InDoubt, StoreFull
from placement.registry.sql.store import SqlStore
from placement.registry.sql.tx import Tx

__all__ = ["POOL_SIZE", "PostgresStore", "split_options"]

_MIGRATION_LOCK = 0x706C6163  # pg_advisory_xact_lock key: replicas migrate one at a time
POOL_SIZE = 16
"""Connections per replica (URL option pool_size)."""
POOL_TIMEOUT_S = 5.0
"""Longest wait for a free connection (URL option pool_timeout_s)."""
LOCK_TIMEOUT_S = 2.0
"""Longest wait for a cluster's row lock (URL option lock_timeout_s); migrations wait up to 60 s."""
STATEMENT_TIMEOUT_S = 5.0
"""Longest statement (URL option statement_timeout_s)."""
IDLE_IN_TX_TIMEOUT_S = 3.0
"""A session idle inside a transaction this long (its replica paused, or cut off) is ended by PostgreSQL, and its
locks with it (URL option idle_in_transaction_timeout_s). No transaction waits on a solve, so a live replica is
never idle inside one for more than milliseconds."""
_CONNECT_TIMEOUT_S = 3
_OPTIONS = {
    "pool_size": int,
    "pool_timeout_s": float,
    "lock_timeout_s": float,
    "statement_timeout_s": float,
    "idle_in_transaction_timeout_s": float,
}


def split_options(url: str) -> tuple[str, dict[str, float]]:
    """The URL without the store's own query options (pool_size, pool_timeout_s, lock_timeout_s,
    statement_timeout_s, idle_in_transaction_timeout_s), and them. ValueError for a bad value."""
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
        self._statement_ms = int(1000 * opts.get("statement_timeout_s", STATEMENT_TIMEOUT_S))
        self._idle_ms = int(1000 * opts.get("idle_in_transaction_timeout_s", IDLE_IN_TX_TIMEOUT_S))
        self._pool: queue.LifoQueue[Any] = queue.LifoQueue()
        self._probe: Any = None
        self.full = None
        self._made = 0
        self._lock = threading.Lock()
        self._closed = False
        self.migrate()

    def session_settings(self) -> dict[str, int]:
        """The bounds every session of this store gets at connect (milliseconds)."""
        return {
            "lock_timeout": self._lock_ms,
            "statement_timeout": self._statement_ms,
            "idle_in_transaction_session_timeout": self._idle_ms,
        }

    def _connect(self, connect_timeout_s: int = _CONNECT_TIMEOUT_S) -> Any:
        options = " ".join(f"-c {k}={v}" for k, v in self.session_settings().items())
        try:
            return self._psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=connect_timeout_s, options=options
            )
        except self._psycopg.Error as e:
            raise Busy(
                f"the registry database did not answer ({_first_line(e)}); nothing was written; retry"
            ) from e

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

    def _failed(self, e: BaseException) -> Exception:
        """The registry's error for a database error raised before COMMIT (nothing was written)."""
        errors = self._psycopg.errors
        if isinstance(e, errors.DiskFull):
            self.full = _first_line(e)
            return StoreFull(_redacted(self._dsn), f"SQLSTATE 53100: {_first_line(e)}")
        if isinstance(e, errors.LockNotAvailable):
            return Busy(
                f"a cluster lock stayed taken for {self._lock_ms / 1000:g} s (another writer of the same "
                "cluster); nothing was written; retry in a moment"
            )
        if isinstance(e, errors.QueryCanceled):
            return Busy(
                f"a statement ran longer than {self._statement_ms / 1000:g} s (the database is overloaded or "
                "stopped); nothing was written; retry in a moment"
            )
        return Busy(f"the registry database failed the call ({_first_line(e)}); nothing was written; retry")

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        conn = self._take()
        psycopg = self._psycopg
        try:
            yield conn
        except (psycopg.OperationalError, psycopg.InternalError, psycopg.InterfaceError) as e:
            raise self._failed(e) from e
        finally:
            if conn.closed or conn.broken or self._closed:
                conn.close()
                with self._lock:
                    self._made -= 1
            else:
                self._pool.put(conn)

    @contextmanager
    def _tx(self, write: bool, lock: str | None = None) -> Iterator[Tx]:
        with self._conn() as conn, conn.cursor() as cur:
            cur.execute("BEGIN" if write else "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                if write and lock is not None:
                    cur.execute("SELECT 1 FROM clusters WHERE id = %s FOR UPDATE", (lock,))
                tx = Tx(cur, postgres=True)
                if write:  # the clock, after the lock
                    tx.now = float(tx.q("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0])
                yield tx
                for check in tx.before_commit:
                    check()
            except BaseException:
                if not (conn.closed or conn.broken):
                    try:
                        cur.execute("ROLLBACK")
                    except self._psycopg.Error:
                        conn.close()
                raise
            try:
                cur.execute("COMMIT")  # deferred triggers (the lease fence) run here, on the database's clock
            except self._psycopg.errors.RaiseException as e:
                if "lease-fence" in str(e):
                    raise Fenced(str(e)) from e
                raise
            except self._psycopg.Error as e:
                if conn.closed or conn.broken:
                    raise InDoubt(
                        f"the connection to the registry database broke during COMMIT ({_first_line(e)}); the "
                        "write may or may not be stored; retry (a Reserve with the same idempotency key gets "
                        "what was written)"
                    ) from e
                raise self._failed(e) from e
            if write:
                self.full = None

    def _at(self, tx: Tx, now: float | None) -> float:
        if now is None:
            return tx.now
        if tx.given_now is None:
            tx.q("SELECT set_config('placement.now', ?, true)", (repr(float(now)),))  # the fence's clock too
        tx.given_now = now
        return now

    def clock(self) -> float:
        return float(self._one("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0])

    def ping(self, timeout_s: float) -> None:
        """SELECT 1 on a connection of its own (the pool may be busy with work), reconnected after a failure;
        while `full`, a one-row write too (it succeeds once space is freed)."""
        try:
            if self._probe is None or self._probe.closed or self._probe.broken:
                self._probe = self._connect(max(1, round(timeout_s)))
            with self._probe.cursor() as cur:
                cur.execute(f"SET statement_timeout = {max(1, int(timeout_s * 1000))}")
                cur.execute("SELECT 1")
                if self.full is not None:
                    cur.execute(
                        "INSERT INTO probe (id, at) VALUES (1, extract(epoch FROM clock_timestamp())) "
                        "ON CONFLICT (id) DO UPDATE SET at = excluded.at"
                    )
                    self.full = None
        except self._psycopg.Error as e:
            if self._probe is not None:
                self._probe.close()
                self._probe = None
            raise self._failed(e) from e

    def size_bytes(self) -> int:
        return int(self._one("SELECT pg_database_size(current_database())")[0][0])

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._conn() as conn, conn.cursor() as cur:  # autocommit: one round trip
            cur.execute(sql.replace("?", "%s"), tuple(params))
            return list(cur.fetchall())

    def _migration_lock(self, tx: Tx) -> None:
        tx.x("SET LOCAL lock_timeout = 60000")
        tx.x("SET LOCAL statement_timeout = 60000")
        tx.q("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))

    def _unique_violation(self, exc: BaseException) -> bool:
        return isinstance(exc, self._psycopg.errors.UniqueViolation)

    def close(self) -> None:
        self._closed = True
        if self._probe is not None:
            self._probe.close()
        while True:
            try:
                self._pool.get_nowait().close()
            except queue.Empty:
                break


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _redacted(dsn: str) -> str:
    """A connection URL without its password: what an error may name."""
    parts = urlsplit(dsn)
    if parts.password is None:
        return urlunsplit(parts._replace(query=""))
    host = parts.hostname or ""
    netloc = f"{parts.username}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc, query=""))
