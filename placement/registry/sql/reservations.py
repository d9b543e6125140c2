"""Reservations in SQL: inserting one with its holds (the database refuses a device held twice), commit, release,
renew, lease expiry (`sweep`), and the rows and event payloads of reservations; `SqlStore` inherits these.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from placement.registry.model import Conflict, NotFound, Refused, Reservation, ReservationStatus
from placement.registry.sql.events import append_event
from placement.registry.sql.tx import DEV_COLS, DEV_TYPES, SqlBase, Tx

__all__ = ["ReservationSql", "reservation_event"]

_RES_COLS = (
    "id, cluster_id, job, status, devices, idem_key, request_hash, created_at, expires_at, ended_at, "
    "generation, cluster_version, payload"
)


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


class ReservationSql(SqlBase):
    """The reservation half of `Store` over SQL: holds have (cluster, device) as primary key."""

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
                append_event(tx, res.cluster_id, "RESERVED", expected_generation, reservation_event(res), now)
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
                    DEV_COLS,
                    DEV_TYPES,
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
            append_event(tx, cid, kind, gen, reservation_event(after), now)
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
            append_event(tx, cluster_id, "EXPIRED", gen, reservation_event(res), now)
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


def _replace(res: Reservation, **changes: Any) -> Reservation:
    import dataclasses

    return dataclasses.replace(res, **changes)
