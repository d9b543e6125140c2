"""The SQL behind both backends: schema migrations, clusters, state rows and the event log; reservations with
holds and leases come from `ReservationSql` (sqlreservations.py).

One dialect-neutral implementation of `Store`; sqlite.py and postgres.py supply connections, transactions and
the cluster write lock. Holds have (cluster, device) as primary key: the database refuses a device held twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from placement.registry.model import (
    ClusterRecord,
    DeviceRow,
    Event,
    NotFound,
    Snapshot,
    StaleGeneration,
)
from placement.registry.sql.events import append_event, read_events
from placement.registry.sql.reservations import ReservationSql
from placement.registry.sql.schema import apply_migrations
from placement.registry.sql.tx import DEV_COLS, DEV_TYPES, Tx

__all__ = ["SqlStore"]

RowChange = Callable[[Mapping[str, DeviceRow]], Mapping[str, DeviceRow | None]]
"""Given the current rows of the touched devices (read under the write lock), their new rows (None: no row)."""


class SqlStore(ReservationSql):
    """`Store` over a DB-API connection; subclasses open transactions (`_tx`) and name their dialect."""

    # ---- migrations ------------------------------------------------------------------------------------------

    def migrate(self) -> int:
        """Apply the migrations above the recorded version, each in the transaction that records it."""
        with self._tx(write=True) as tx:
            self._migration_lock(tx)
            apply_migrations(tx, self.dialect)
        return self.schema_version()

    def _migration_lock(self, tx: Tx) -> None:
        """Replicas migrating at once take turns (PostgreSQL: an advisory lock; SQLite's write lock suffices)."""

    def schema_version(self) -> int:
        rows = self._one("SELECT MAX(version) FROM schema_version")
        return int(rows[0][0] or 0)

    # ---- clusters and state --------------------------------------------------------------------------------

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
                    append_event(tx, cluster_id, "CLUSTER_PUT", generation, {"version": version}, now)
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
                DEV_COLS,
                DEV_TYPES,
                put,
                "ON CONFLICT (cluster_id, device) DO UPDATE SET job = excluded.job, failed = excluded.failed, "
                "slowdown = excluded.slowdown",
            )
            if extras is not None:
                tx.x(
                    "UPDATE clusters SET extras = ? WHERE id = ?",
                    (json.dumps(extras, sort_keys=True), cluster_id),
                )
            return append_event(
                tx, cluster_id, "STATE_REPLACED" if replace else "STATE_DIFF", generation, event, now
            )

    # ---- events ------------------------------------------------------------------------------------------

    def events(self, cluster_id: str, after_seq: int, limit: int = 1000) -> list[Event]:
        with self._tx(write=False) as tx:
            return read_events(tx, cluster_id, after_seq, limit)
