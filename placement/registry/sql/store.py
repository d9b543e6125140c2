"""The SQL behind both backends: schema migrations, clusters, snapshots of claims and slowdowns, UpdateState
against the live claims, and the event log; reservations come from `ReservationSql` (reservations.py).

One dialect-neutral implementation of `Store`; backends/sqlite.py and backends/postgres.py supply connections,
transactions, timeouts and the cluster write lock.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from placement.registry.model import (
    ClusterRecord,
    Event,
    Fenced,
    NotFound,
    Reservation,
    Snapshot,
    StaleGeneration,
)
from placement.registry.sql.claims import (
    delete_outside_claims,
    insert_claims,
    read_claims,
    read_slowdowns,
    write_slowdowns,
)
from placement.registry.sql.events import append_event, prune_events, read_events
from placement.registry.sql.reservations import ReservationSql
from placement.registry.sql.schema import apply_migrations
from placement.registry.sql.tx import Tx
from placement.registry.store import Planner, UpdateResult
from placement.registry.update import Current

__all__ = ["SqlStore"]


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

    def put_cluster(self, cluster_id: str, doc: dict[str, Any], now: float | None) -> tuple[int, bool]:
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        for attempt in range(2):
            try:
                with self._tx(write=True, lock=cluster_id) as tx:
                    at = self._at(tx, now)
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
                            (cluster_id, text, at),
                        )
                    append_event(tx, cluster_id, "CLUSTER_PUT", generation, {"version": version}, at)
                    return version, True
            except Exception as e:  # two replicas created the cluster at once: the second one reads it
                if attempt == 0 and self._unique_violation(e):
                    continue
                raise
        raise AssertionError("unreachable")

    def cluster(self, cluster_id: str) -> ClusterRecord | None:
        rows = self._one(
            "SELECT version, doc, generation, last_seq, pruned_seq FROM clusters WHERE id = ?", (cluster_id,)
        )
        if not rows:
            return None
        v, doc, g, seq, pruned = rows[0]
        return ClusterRecord(cluster_id, int(v), json.loads(doc), int(g), int(seq), int(pruned))

    def head(self, cluster_id: str) -> tuple[int, int, int] | None:
        rows = self._one("SELECT version, generation, last_seq FROM clusters WHERE id = ?", (cluster_id,))
        return (int(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if rows else None

    def cluster_ids(self) -> list[str]:
        return [str(r[0]) for r in self._one("SELECT id FROM clusters ORDER BY id")]

    def last_seq(self, cluster_id: str) -> int | None:
        rows = self._one("SELECT last_seq FROM clusters WHERE id = ?", (cluster_id,))
        return int(rows[0][0]) if rows else None

    def snapshot(self, cluster_id: str) -> Snapshot | None:
        with self._tx(write=False) as tx:
            return self._snapshot(tx, cluster_id)

    def _snapshot(self, tx: Tx, cluster_id: str) -> Snapshot | None:
        head = tx.q(
            "SELECT version, doc, generation, last_seq, pruned_seq, extras FROM clusters WHERE id = ?",
            (cluster_id,),
        )
        if not head:
            return None
        v, doc, g, seq, pruned, extras = head[0]
        return Snapshot(
            ClusterRecord(cluster_id, int(v), json.loads(doc), int(g), int(seq), int(pruned)),
            read_claims(tx, cluster_id),
            read_slowdowns(tx, cluster_id),
            json.loads(extras),
            {
                str(rid): (str(job), tuple(json.loads(devs)), json.loads(shape))
                for rid, job, devs, shape in tx.q(
                    "SELECT id, job, devices, shape FROM reservations "
                    "WHERE cluster_id = ? AND status = 'COMMITTED' AND shape IS NOT NULL",
                    (cluster_id,),
                )
            },
        )

    def update_state(
        self,
        cluster_id: str,
        generation: int,
        plan: Planner,
        scope: Sequence[str] | None,
        extras: dict[str, Any] | None,
        event_kind: str,
        now: float | None,
        dry_run: bool = False,
    ) -> UpdateResult:
        for attempt in range(3):
            try:
                return self._update_state(
                    cluster_id, generation, plan, scope, extras, event_kind, now, dry_run
                )
            except Fenced:  # a revoked reservation's lease ran out before COMMIT: run again (it then expires)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _update_state(
        self,
        cluster_id: str,
        generation: int,
        plan: Planner,
        scope: Sequence[str] | None,
        extras: dict[str, Any] | None,
        event_kind: str,
        now: float | None,
        dry_run: bool,
    ) -> UpdateResult:
        with self._tx(write=not dry_run, lock=None if dry_run else cluster_id) as tx:
            now = self._at(tx, now)
            head = tx.q("SELECT generation FROM clusters WHERE id = ?", (cluster_id,))
            if not head:
                raise NotFound(f"unknown cluster {cluster_id!r}; PutCluster it first")
            stored = int(head[0][0])
            if generation <= stored:
                raise StaleGeneration(cluster_id, generation, stored)
            if not dry_run:
                self._expire_cluster(tx, cluster_id, now)
            current = Current(read_claims(tx, cluster_id, scope), read_slowdowns(tx, cluster_id, scope))
            todo = plan(current, now)  # ClaimConflict here rolls everything back
            kept = self._listed(tx, todo.kept)
            if dry_run:
                return UpdateResult(todo, self._listed(tx, sorted(todo.revoke)), kept)
            revoked = self._revoke(tx, cluster_id, todo.revoke, generation, now)
            delete_outside_claims(tx, cluster_id, None if todo.replace else sorted(todo.claims))
            insert_claims(tx, cluster_id, {d: c for d, c in todo.claims.items() if c is not None})
            write_slowdowns(tx, cluster_id, todo.slowdowns, todo.replace)
            if extras is not None:
                tx.x(
                    "UPDATE clusters SET extras = ? WHERE id = ?",
                    (json.dumps(extras, sort_keys=True), cluster_id),
                )
            payload: dict[str, Any] = {"state": todo.state} if todo.replace else {"diff": todo.changes}
            if revoked:
                payload["revoked"] = [r.id for r in revoked]
            seq = append_event(tx, cluster_id, event_kind, generation, payload, now)
            return UpdateResult(todo, revoked, kept, seq, seq - len(revoked))

    def _listed(self, tx: Tx, ids: Sequence[str]) -> list[Reservation]:
        return [self._reservation_in(tx, rid) for rid in ids]

    def stats(self) -> dict[str, int]:
        out = {"size_bytes": self.size_bytes()}
        for status in ("HELD", "COMMITTED", "RELEASED", "EXPIRED", "REVOKED"):
            out[f"reservations_{status.lower()}"] = 0
        for status, n in self._one("SELECT status, COUNT(*) FROM reservations GROUP BY status"):
            out[f"reservations_{str(status).lower()}"] = int(n)
        out["events"] = int(self._one("SELECT COUNT(*) FROM events")[0][0])
        out["clusters"] = int(self._one("SELECT COUNT(*) FROM clusters")[0][0])
        return out

    # ---- events ------------------------------------------------------------------------------------------

    def events(self, cluster_id: str, after_seq: int, limit: int = 1000) -> list[Event]:
        with self._tx(write=False) as tx:
            return read_events(tx, cluster_id, after_seq, limit)

    def prune_events(self, now: float | None, max_age_s: float | None, max_count: int | None) -> int:
        n = 0
        for cid in self.cluster_ids():
            with self._tx(write=True, lock=cid) as tx:
                n += prune_events(tx, cid, self._at(tx, now), max_age_s, max_count)
        return n
