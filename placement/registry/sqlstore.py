"""The SQL behind both backends: schema migrations, state rows, reservations with holds, leases, and events.

One dialect-neutral implementation of `Store`; sqlite.py and postgres.py supply connections, transactions and
the cluster write lock. Holds have (cluster, device) as primary key: the database refuses a device held twice.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from placement.registry.model import (
    ClusterRecord,
    Conflict,
    DeviceRow,
    Event,
    NotFound,
    Refused,
    Reservation,
    ReservationStatus,
    Snapshot,
    StaleGeneration,
)
from placement.registry.store import Store

__all__ = ["MIGRATIONS", "SqlStore", "Tx", "migration_files"]

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_CHUNK = 500  # bound parameters per IN (...) list
RowChange = Callable[[Mapping[str, DeviceRow]], Mapping[str, DeviceRow | None]]
"""Given the current rows of the touched devices (read under the write lock), their new rows (None: no row)."""
_DEV_COLS = ("cluster_id", "device", "job", "failed", "slowdown")
_DEV_TYPES = ("text", "text", "text", "bigint", "float8")
_RES_COLS = (
    "id, cluster_id, job, status, devices, idem_key, request_hash, created_at, expires_at, ended_at, "
    "generation, cluster_version, payload"
)


def migration_files(dialect: str) -> list[tuple[int, Path]]:
    """(version, file) of every ``NNNN_name.sql`` of a dialect, in order."""
    out = []
    for p in sorted((MIGRATIONS / dialect).glob("*.sql")):
        out.append((int(p.name.split("_", 1)[0]), p))
    return out


def _statements(sql: str) -> list[str]:
    lines = [ln for ln in sql.splitlines() if not ln.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


class Tx:
    """One open transaction: `q` returns rows, `x` runs a statement (returns the row count), `many` a batch."""

    def __init__(self, cursor: Any, postgres: bool) -> None:
        self._cur = cursor
        self._pg = postgres

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self._pg else sql

    def q(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self._cur.execute(self._sql(sql), tuple(params))
        return list(self._cur.fetchall())

    def x(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._cur.execute(self._sql(sql), tuple(params))
        return int(self._cur.rowcount)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self._cur.executemany(self._sql(sql), [tuple(r) for r in rows])

    def devices_in(self, devices: Sequence[str]) -> Iterator[tuple[str, tuple[Any, ...]]]:
        """(`device IN (...)` condition, its parameters) per chunk; PostgreSQL: one `device = ANY(array)`."""
        if self._pg:
            if devices:
                yield "device = ANY(?)", (list(devices),)
            return
        for part in _chunks(devices):
            yield f"device IN ({','.join('?' * len(part))})", tuple(part)

    def insert_rows(
        self,
        table: str,
        cols: Sequence[str],
        pg_types: Sequence[str],
        rows: Sequence[Sequence[Any]],
        conflict: str = "",
    ) -> None:
        """Insert many rows in one statement on PostgreSQL (unnest of one array per column), else executemany."""
        if not rows:
            return
        if self._pg:
            arrays = [list(col) for col in zip(*rows, strict=True)]
            unnest = ", ".join(f"?::{t}[]" for t in pg_types)
            self.x(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT * FROM unnest({unnest}) {conflict}", arrays
            )
        else:
            marks = ", ".join("?" * len(cols))
            self.many(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks}) {conflict}", rows)


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _CHUNK):
        yield items[i : i + _CHUNK]


def _reservation(row: Sequence[Any]) -> Reservation:
    return Reservation(
        id=row[0],
        cluster_id=row[1],
        job=row[2],
        status=ReservationStatus(row[3]),
        devices=tuple(json.loads(row[4])),
        idempotency_key=row[5],
        request_hash=row[6],
        created_at=float(row[7]),
        expires_at=float(row[8]),
        ended_at=None if row[9] is None else float(row[9]),
        generation=int(row[10]),
        cluster_version=int(row[11]),
        payload=bytes(row[12]),
    )


def reservation_event(res: Reservation) -> dict[str, Any]:
    """The payload of a reservation event (everything but the stored answer)."""
    return {
        "id": res.id,
        "job": res.job,
        "status": res.status.value,
        "devices": list(res.devices),
        "idempotency_key": res.idempotency_key,
        "created_at": res.created_at,
        "expires_at": res.expires_at,
        "ended_at": res.ended_at,
        "generation": res.generation,
        "cluster_version": res.cluster_version,
    }


class SqlStore(Store):
    """`Store` over a DB-API connection; subclasses open transactions (`_tx`) and name their dialect."""

    dialect: str = ""
    postgres: bool = False

    @abc.abstractmethod
    def _tx(self, write: bool, lock: str | None = None) -> AbstractContextManager[Tx]:
        """A transaction; `write` takes the database's write lock, `lock` also locks that cluster's row."""

    @abc.abstractmethod
    def _unique_violation(self, exc: BaseException) -> bool: ...

    def _one(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read statement (atomic by itself: no explicit transaction needed)."""
        with self._tx(write=False) as tx:
            return tx.q(sql, params)

    # ---- migrations ------------------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Apply the migrations above the recorded version, each in the transaction that records it."""
        with self._tx(write=True) as tx:
            self._migration_lock(tx)
            tx.x(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            done = {int(r[0]) for r in tx.q("SELECT version FROM schema_version")}
            import time

            for version, path in migration_files(self.dialect):
                if version in done:
                    continue
                for stmt in _statements(path.read_text()):
                    tx.x(stmt)
                tx.x("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, time.time()))
        return self.schema_version()

    def _migration_lock(self, tx: Tx) -> None:
        """Replicas migrating at once take turns (PostgreSQL: an advisory lock; SQLite's write lock suffices)."""

    def schema_version(self) -> int:
        rows = self._one("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0] or 0)

    # ---- clusters and state --------------------------------------------------------------------------------

    def _event(
        self, tx: Tx, cluster_id: str, kind: str, generation: int, payload: dict[str, Any], now: float
    ) -> int:
        """Append the next event of the cluster; `generation` is the cluster's generation after the change."""
        seq = int(
            tx.q(
                "UPDATE clusters SET last_seq = last_seq + 1, updated_at = ?, generation = ? WHERE id = ? "
                "RETURNING last_seq",
                (now, generation, cluster_id),
            )[0][0]
        )
        tx.x(
            "INSERT INTO events (cluster_id, seq, kind, generation, payload, at) VALUES (?, ?, ?, ?, ?, ?)",
            (cluster_id, seq, kind, generation, json.dumps(payload, separators=(",", ":")), now),
        )
        return seq

    def put_cluster(self, cluster_id: str, doc: dict[str, Any], now: float) -> tuple[int, bool]:
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        for attempt in range(2):
            try:
                with self._tx(write=True, lock=cluster_id) as tx:
                    rows = tx.q("SELECT version, doc, generation FROM clusters WHERE id = ?", (cluster_id,))
                    if rows and rows[0][1] == text:
                        return int(rows[0][0]), False
                    if rows:
                        version, generation = int(rows[0][0]) + 1, int(rows[0][2])
                        tx.x(
                            "UPDATE clusters SET version = ?, doc = ? WHERE id = ?",
                            (version, text, cluster_id),
                        )
                    else:
                        version, generation = 1, 0
                        tx.x(
                            "INSERT INTO clusters (id, version, doc, generation, extras, last_seq, updated_at) "
                            "VALUES (?, 1, ?, 0, '{}', 0, ?)",
                            (cluster_id, text, now),
                        )
                    self._event(tx, cluster_id, "CLUSTER_PUT", generation, {"version": version}, now)
                    return version, True
            except Exception as e:  # two replicas created the cluster at once: the second one reads it
                if attempt == 0 and self._unique_violation(e):
                    continue
                raise
        raise AssertionError("unreachable")

    def cluster(self, cluster_id: str) -> ClusterRecord | None:
        rows = self._one(
            "SELECT version, doc, generation, last_seq FROM clusters WHERE id = ?", (cluster_id,)
        )
        if not rows:
            return None
        v, doc, g, seq = rows[0]
        return ClusterRecord(cluster_id, int(v), json.loads(doc), int(g), int(seq))

    def cluster_ids(self) -> list[str]:
        return [str(r[0]) for r in self._one("SELECT id FROM clusters ORDER BY id")]

    def last_seq(self, cluster_id: str) -> int | None:
        rows = self._one("SELECT last_seq FROM clusters WHERE id = ?", (cluster_id,))
        return int(rows[0][0]) if rows else None

    def snapshot(self, cluster_id: str, now: float) -> Snapshot | None:
        with self._tx(write=False) as tx:
            head = tx.q(
                "SELECT version, doc, generation, last_seq, extras FROM clusters WHERE id = ?", (cluster_id,)
            )
            if not head:
                return None
            dev = tx.q(
                "SELECT device, job, failed, slowdown FROM device_state WHERE cluster_id = ?", (cluster_id,)
            )
            holds = tx.q(
                "SELECT device, reservation_id, expires_at FROM holds WHERE cluster_id = ? AND expires_at > ?",
                (cluster_id, now),
            )
        v, doc, g, seq, extras = head[0]
        rows = {
            str(d): DeviceRow(job, bool(failed), None if slow is None else float(slow))
            for d, job, failed, slow in dev
        }
        return Snapshot(
            ClusterRecord(cluster_id, int(v), json.loads(doc), int(g), int(seq)),
            rows,
            {str(d): (str(r), float(e)) for d, r, e in holds},
            json.loads(extras),
        )

    def update_state(
        self,
        cluster_id: str,
        generation: int,
        change: RowChange,
        touched: Sequence[str],
        replace: bool,
        extras: dict[str, Any] | None,
        event: dict[str, Any],
        now: float,
    ) -> int:
        with self._tx(write=True, lock=cluster_id) as tx:
            head = tx.q("SELECT generation FROM clusters WHERE id = ?", (cluster_id,))
            if not head:
                raise NotFound(f"unknown cluster {cluster_id!r}; PutCluster it first")
            stored = int(head[0][0])
            if generation <= stored:
                raise StaleGeneration(cluster_id, generation, stored)
            current: dict[str, DeviceRow] = {}
            if replace:
                tx.x("DELETE FROM device_state WHERE cluster_id = ?", (cluster_id,))
            else:
                for cond, params in tx.devices_in(list(touched)):
                    for d, job, failed, slow in tx.q(
                        f"SELECT device, job, failed, slowdown FROM device_state WHERE cluster_id = ? AND {cond}",
                        (cluster_id, *params),
                    ):
                        current[str(d)] = DeviceRow(job, bool(failed), None if slow is None else float(slow))
            rows = change(current)
            gone = [d for d, r in rows.items() if r is None or r.empty]
            if gone and not replace:
                for cond, params in tx.devices_in(gone):
                    tx.x(f"DELETE FROM device_state WHERE cluster_id = ? AND {cond}", (cluster_id, *params))
            put = [
                (cluster_id, d, r.job, int(r.failed), r.slowdown)
                for d, r in rows.items()
                if r is not None and not r.empty
            ]
            tx.insert_rows(
                "device_state",
                _DEV_COLS,
                _DEV_TYPES,
                put,
                "ON CONFLICT (cluster_id, device) DO UPDATE SET job = excluded.job, failed = excluded.failed, "
                "slowdown = excluded.slowdown",
            )
            if extras is not None:
                tx.x(
                    "UPDATE clusters SET extras = ? WHERE id = ?",
                    (json.dumps(extras, sort_keys=True), cluster_id),
                )
            return self._event(
                tx, cluster_id, "STATE_REPLACED" if replace else "STATE_DIFF", generation, event, now
            )

    # ---- reservations --------------------------------------------------------------------------------------

    def _by_key(self, tx: Tx, cluster_id: str, key: str) -> Reservation | None:
        rows = tx.q(
            f"SELECT {_RES_COLS} FROM reservations WHERE cluster_id = ? AND idem_key = ?", (cluster_id, key)
        )
        return _reservation(rows[0]) if rows else None

    def by_key(self, cluster_id: str, key: str) -> Reservation | None:
        rows = self._one(
            f"SELECT {_RES_COLS} FROM reservations WHERE cluster_id = ? AND idem_key = ?", (cluster_id, key)
        )
        return _reservation(rows[0]) if rows else None

    def _busy(self, tx: Tx, cluster_id: str, devices: Sequence[str], now: float) -> list[str]:
        busy: list[str] = []
        for cond, params in tx.devices_in(list(devices)):
            busy += [
                str(r[0])
                for r in tx.q(
                    f"SELECT device FROM device_state WHERE cluster_id = ? AND {cond} AND (job IS NOT NULL OR failed <> 0)",
                    (cluster_id, *params),
                )
            ]
            busy += [
                str(r[0])
                for r in tx.q(
                    f"SELECT device FROM holds WHERE cluster_id = ? AND {cond}", (cluster_id, *params)
                )
            ]
        return busy

    def insert_reservation(
        self, res: Reservation, expected_generation: int, expected_version: int, now: float
    ) -> tuple[Reservation, bool]:
        try:
            with self._tx(write=True, lock=res.cluster_id) as tx:
                if res.idempotency_key:
                    existing = self._by_key(tx, res.cluster_id, res.idempotency_key)
                    if existing is not None:
                        return existing, False
                head = tx.q("SELECT generation, version FROM clusters WHERE id = ?", (res.cluster_id,))
                if not head:
                    raise NotFound(f"unknown cluster {res.cluster_id!r}")
                if int(head[0][0]) != expected_generation:
                    raise Conflict(
                        f"the state moved from generation {expected_generation} to {head[0][0]} during the solve"
                    )
                if int(head[0][1]) != expected_version:
                    raise Conflict(
                        f"the cluster moved from version {expected_version} to {head[0][1]} during the solve"
                    )
                self._sweep_cluster(tx, res.cluster_id, now)
                busy = self._busy(tx, res.cluster_id, res.devices, now)
                if busy:
                    raise Conflict(
                        f"{len(busy)} chosen device(s) were taken during the solve, e.g. {sorted(busy)[0]}"
                    )
                tx.x(
                    f"INSERT INTO reservations ({_RES_COLS}) VALUES ({','.join('?' * 13)})",
                    (
                        res.id,
                        res.cluster_id,
                        res.job,
                        res.status.value,
                        json.dumps(list(res.devices)),
                        res.idempotency_key,
                        res.request_hash,
                        res.created_at,
                        res.expires_at,
                        res.ended_at,
                        res.generation,
                        res.cluster_version,
                        res.payload,
                    ),
                )
                tx.insert_rows(
                    "holds",
                    ("cluster_id", "device", "reservation_id", "expires_at"),
                    ("text", "text", "text", "float8"),
                    [(res.cluster_id, d, res.id, res.expires_at) for d in res.devices],
                )
                self._event(tx, res.cluster_id, "RESERVED", expected_generation, reservation_event(res), now)
                return res, True
        except Exception as e:
            if self._unique_violation(e):  # a hold or key that the checks above cannot see (never expected)
                raise Conflict(f"the database refused a duplicate: {e}") from e
            raise

    def reservation(self, reservation_id: str) -> Reservation | None:
        rows = self._one(f"SELECT {_RES_COLS} FROM reservations WHERE id = ?", (reservation_id,))
        return _reservation(rows[0]) if rows else None

    def reservations(self, cluster_id: str | None, statuses: Sequence[str] | None) -> list[Reservation]:
        sql, params = f"SELECT {_RES_COLS} FROM reservations WHERE 1 = 1", []
        if cluster_id is not None:
            sql += " AND cluster_id = ?"
            params.append(cluster_id)
        if statuses:
            sql += f" AND status IN ({','.join('?' * len(statuses))})"
            params += list(statuses)
        return [_reservation(r) for r in self._one(sql + " ORDER BY created_at, id", params)]

    def transition(
        self, reservation_id: str, action: str, now: float, ttl_s: float | None = None
    ) -> Reservation:
        found = self.reservation(reservation_id)
        if found is None:
            raise NotFound(f"unknown reservation {reservation_id!r}")
        with self._tx(write=True, lock=found.cluster_id) as tx:
            rows = tx.q(f"SELECT {_RES_COLS} FROM reservations WHERE id = ?", (reservation_id,))
            res = _reservation(rows[0])
            status = res.effective_status(now)
            cid, rid = res.cluster_id, res.id
            gen = int(tx.q("SELECT generation FROM clusters WHERE id = ?", (cid,))[0][0])

            def refuse(kind: str, what: str) -> Refused:
                return Refused(kind, f"reservation {rid}", f"reservation {rid} is {status.value}: {what}")

            if action == "commit":
                if status is ReservationStatus.COMMITTED:
                    return res
                if status is not ReservationStatus.HELD:
                    return_kind = "expired" if status is ReservationStatus.EXPIRED else "wrong-status"
                    raise refuse(return_kind, "only a held reservation can be committed; reserve again")
                tx.x("DELETE FROM holds WHERE reservation_id = ?", (rid,))
                tx.insert_rows(
                    "device_state",
                    _DEV_COLS,
                    _DEV_TYPES,
                    [(cid, d, res.job, 0, None) for d in res.devices],
                    "ON CONFLICT (cluster_id, device) DO UPDATE SET job = excluded.job",
                )
                tx.x("UPDATE reservations SET status = 'COMMITTED' WHERE id = ?", (rid,))
                new_status, kind = ReservationStatus.COMMITTED, "COMMITTED"
                after = _replace(res, status=new_status)
            elif action == "release":
                if status in (ReservationStatus.RELEASED, ReservationStatus.EXPIRED):
                    return res
                tx.x("DELETE FROM holds WHERE reservation_id = ?", (rid,))
                if status is ReservationStatus.COMMITTED:
                    for cond, params in tx.devices_in(list(res.devices)):
                        tx.x(
                            f"UPDATE device_state SET job = NULL WHERE cluster_id = ? AND job = ? AND {cond}",
                            (cid, res.job, *params),
                        )
                    tx.x(
                        "DELETE FROM device_state WHERE cluster_id = ? AND job IS NULL AND failed = 0 AND "
                        "(slowdown IS NULL OR slowdown <= 1)",
                        (cid,),
                    )
                tx.x("UPDATE reservations SET status = 'RELEASED', ended_at = ? WHERE id = ?", (now, rid))
                kind = "RELEASED"
                after = _replace(res, status=ReservationStatus.RELEASED, ended_at=now)
            elif action == "renew":
                if status is ReservationStatus.COMMITTED:
                    return res
                if status is not ReservationStatus.HELD:
                    raise refuse(
                        "expired" if status is ReservationStatus.EXPIRED else "wrong-status",
                        "only a held reservation can be renewed; reserve again",
                    )
                assert ttl_s is not None
                expires = now + ttl_s
                tx.x("UPDATE reservations SET expires_at = ? WHERE id = ?", (expires, rid))
                tx.x("UPDATE holds SET expires_at = ? WHERE reservation_id = ?", (expires, rid))
                kind = "RENEWED"
                after = _replace(res, expires_at=expires)
            else:
                raise ValueError(f"unknown action {action!r}")
            self._event(tx, cid, kind, gen, reservation_event(after), now)
            return after

    def _sweep_cluster(self, tx: Tx, cluster_id: str, now: float) -> list[Reservation]:
        rows = tx.q(
            f"SELECT {_RES_COLS} FROM reservations WHERE cluster_id = ? AND status = 'HELD' AND expires_at <= ?",
            (cluster_id, now),
        )
        out = []
        gen = int(tx.q("SELECT generation FROM clusters WHERE id = ?", (cluster_id,))[0][0])
        for row in rows:
            res = _replace(_reservation(row), status=ReservationStatus.EXPIRED)
            res = _replace(res, ended_at=res.expires_at)
            tx.x(
                "UPDATE reservations SET status = 'EXPIRED', ended_at = ? WHERE id = ?",
                (res.expires_at, res.id),
            )
            tx.x("DELETE FROM holds WHERE reservation_id = ?", (res.id,))
            self._event(tx, cluster_id, "EXPIRED", gen, reservation_event(res), now)
            out.append(res)
        return out

    def sweep(self, now: float) -> list[Reservation]:
        ids = [
            str(r[0])
            for r in self._one(
                "SELECT DISTINCT cluster_id FROM reservations WHERE status = 'HELD' AND expires_at <= ?",
                (now,),
            )
        ]
        out: list[Reservation] = []
        for cid in ids:
            with self._tx(write=True, lock=cid) as tx:
                out += self._sweep_cluster(tx, cid, now)
        return out

    # ---- events ------------------------------------------------------------------------------------------

    def events(self, cluster_id: str, after_seq: int, limit: int = 1000) -> list[Event]:
        rows = self._one(
            "SELECT seq, kind, generation, payload, at FROM events WHERE cluster_id = ? AND seq > ? "
            "ORDER BY seq LIMIT ?",
            (cluster_id, after_seq, limit),
        )
        return [Event(cluster_id, int(s), str(k), int(g), json.loads(p), float(a)) for s, k, g, p, a in rows]


def _replace(res: Reservation, **changes: Any) -> Reservation:
    import dataclasses

    return dataclasses.replace(res, **changes)
