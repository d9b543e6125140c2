"""One open transaction over a DB-API cursor (`Tx`: placeholders, device IN-lists, bulk inserts) and `SqlBase`,
the abstract `Store` that opens them; the SQL modules of the registry (claims, events, reservations, store) build
on both and import only downward.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from placement.registry.store import Store

__all__ = ["SqlBase", "Tx"]

_CHUNK = 500  # bound parameters per IN (...) list


class Tx:
    """One open transaction: `q` returns rows, `x` runs a statement (returns the row count), `many` a batch.

    `now` is the database's clock read once inside the transaction, after its locks (unix seconds);
    `before_commit` holds checks run just before COMMIT (one that raises rolls everything back); `fences` the
    (reservation id, lease end) pairs the transaction acts on while they live: by the clock at COMMIT each must
    still live, or the transaction is rolled back (`Fenced`)."""

    def __init__(self, cursor: Any, postgres: bool, now: float = 0.0) -> None:
        self._cur = cursor
        self._pg = postgres
        self.now = now
        self.before_commit: list[Callable[[], None]] = []
        self.fences: list[tuple[str, float]] = []
        self.given_now: float | None = None  # a test's clock, which the fence then uses too

    @property
    def postgres(self) -> bool:
        return self._pg

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._pg else sql

    def _params(self, params: Sequence[Any]) -> tuple[Any, ...] | None:
        # psycopg reads `%` as a placeholder only when given parameters (a PL/pgSQL RAISE has its own `%`)
        return None if self._pg and not params else tuple(params)

    def q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._cur.execute(self._sql(sql), self._params(params))
        return list(self._cur.fetchall())

    def x(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._cur.execute(self._sql(sql), self._params(params))
        return int(self._cur.rowcount)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cur.executemany(self._sql(sql), [tuple(r) for r in rows])

    def devices_in(
        self, devices: Sequence[str], column: str = "device"
    ) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """(`column IN (...)` condition, its parameters) per chunk; PostgreSQL: one `column = ANY(array)`."""
        if self._pg:
            if devices:
                yield f"{column} = ANY(?)", (list(devices),)
            return
        for part in _chunks(devices):
            yield f"{column} IN ({','.join('?' * len(part))})", tuple(part)

    def insert_rows(
        self,
        table: str,
        cols: Sequence[str],
        pg_types: Sequence[str],
        rows: Sequence[Sequence[Any]],
    ) -> None:
        """Insert many rows in one statement on PostgreSQL (unnest of one array per column), else executemany."""
        if not rows:
            return
        if self._pg:
            arrays = [list(col) for col in zip(*rows, strict=True)]
            unnest = ", ".join(f"?::{t}[]" for t in pg_types)
            self.x(f"INSERT INTO {table} ({', '.join(cols)}) SELECT * FROM unnest({unnest})", arrays)
        else:
            marks = ", ".join("?" * len(cols))
            self.many(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", rows)


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


class SqlBase(Store):
    """`Store` over a DB-API connection; subclasses open transactions (`_tx`) and name their dialect."""

    dialect: str = ""
    postgres: bool = False

    @abc.abstractmethod
    def _tx(self, write: bool, lock: str | None = None) -> AbstractContextManager[Tx]:
        """A transaction; `write` takes the database's write lock, `lock` also locks that cluster's row. Waiting
        for a connection or a lock longer than the backend's timeout raises `Busy` (nothing written)."""

    @abc.abstractmethod
    def _unique_violation(self, exc: BaseException) -> bool: ...

    def _at(self, tx: Tx, now: float | None) -> float:
        """The time a write decides by: the database's clock read inside `tx` (None), or the caller's `now` (a
        test's clock; the PostgreSQL lease fence then uses it too)."""
        if now is None:
            return tx.now
        tx.given_now = now
        return now

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read statement (atomic by itself: no explicit transaction needed)."""
        with self._tx(write=False) as tx:
            return tx.q(sql, params)
