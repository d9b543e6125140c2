"""Reservations in SQL: inserting one with its claims (the database refuses a device claimed twice), commit
(re-checking every device under the lock), release, renew, revocation, expiry of leases and heartbeats
(`sweep`), and the rows and event payloads of reservations; `SqlStore` inherits these.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from placement.registry.model import (
    ENDED,
    Claim,
    ClaimKind,
    Conflict,
    Fenced,
    NotFound,
    Refused,
    Reservation,
    ReservationStatus,
)
from placement.registry.sql.claims import insert_claims, read_claims
from placement.registry.sql.events import append_event
from placement.registry.sql.tx import SqlBase, Tx

__all__ = ["ReservationSql", "reservation_event"]

DEFAULT_RENEW_S = 60.0
_FENCED_RUNS = (
    3  # a transaction fenced at COMMIT runs again; the next run reads a later clock and sees the end
)
"""A held reservation's new lease when Renew gives none (the server's default TTL)."""

_RES_COLS = (
    "id, cluster_id, job, status, devices, idem_key, request_hash, created_at, expires_at, ended_at, "
    "generation, cluster_version, payload, reason, heartbeat_s, shape"
)
_RUN_OUT = (
    "((status = 'HELD' AND expires_at <= ?) OR "
    "(status = 'COMMITTED' AND heartbeat_s IS NOT NULL AND expires_at <= ?))"
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
        reason=str(row[13] or ""),
        heartbeat_s=None if row[14] is None else float(row[14]),
        shape=None if row[15] is None else json.loads(row[15]),
    )


def reservation_event(res: Reservation, with_shape: bool = False) -> dict[str, Any]:
    """The payload of a reservation event (everything but the stored answer); `with_shape` (COMMITTED): the
    job's shape too, so that a view moved along by the events prices the committed job's traffic."""
    out: dict[str, Any] = {
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
        "reason": res.reason,
        "heartbeat_s": res.heartbeat_s,
    }
    if with_shape and res.shape is not None:
        out["shape"] = res.shape
    return out


def _generation(tx: Tx, cluster_id: str) -> int:
    return int(tx.q("SELECT generation FROM clusters WHERE id = ?", (cluster_id,))[0][0])


class ReservationSql(SqlBase):
    """The reservation half of `Store` over SQL: a reservation's devices are its claims while it lives."""

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

    def insert_reservation(
        self,
        res: Reservation,
        expected_generation: int,
        expected_version: int,
        now: float | None,
        before_commit: Callable[[], None] | None = None,
    ) -> tuple[Reservation, bool]:
        try:
            with self._tx(write=True, lock=res.cluster_id) as tx:
                if now is None:  # the lease starts by the database's clock, inside the claim's transaction
                    at = tx.now
                    res = dataclasses.replace(
                        res, created_at=at, expires_at=at + (res.expires_at - res.created_at)
                    )
                now = self._at(tx, now)
                if before_commit is not None:
                    tx.before_commit.append(before_commit)
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
                self._expire_cluster(tx, res.cluster_id, now)
                taken = read_claims(tx, res.cluster_id, res.devices)
                if taken:
                    first = sorted(taken)[0]
                    raise Conflict(
                        f"{len(taken)} chosen device(s) were claimed during the solve, e.g. {first} "
                        f"({_what(taken[first])})"
                    )
                tx.x(
                    f"INSERT INTO reservations ({_RES_COLS}) VALUES ({','.join('?' * 16)})",
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
                        res.reason,
                        res.heartbeat_s,
                        None if res.shape is None else json.dumps(res.shape, sort_keys=True),
                    ),
                )
                insert_claims(
                    tx, res.cluster_id, {d: Claim(ClaimKind.HELD, res.id, res.job) for d in res.devices}
                )
                append_event(tx, res.cluster_id, "RESERVED", expected_generation, reservation_event(res), now)
                return res, True
        except Exception as e:
            if self._unique_violation(e):  # a claim or key that the checks above cannot see (never expected)
                raise Conflict(f"the database refused a second claim: {e}") from e
            raise

    def _reservation_in(self, tx: Tx, reservation_id: str) -> Reservation:
        return _reservation(tx.q(f"SELECT {_RES_COLS} FROM reservations WHERE id = ?", (reservation_id,))[0])

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
        self, reservation_id: str, action: str, now: float | None, ttl_s: float | None = None
    ) -> Reservation:
        if action not in ("commit", "release", "renew"):
            raise ValueError(f"unknown action {action!r}")
        found = self.reservation(reservation_id)
        if found is None:
            raise NotFound(f"unknown reservation {reservation_id!r}")
        for attempt in range(_FENCED_RUNS):
            try:
                with self._tx(write=True, lock=found.cluster_id) as tx:
                    at = self._at(tx, now)  # after the cluster's lock: no decision by a time read before it
                    self._expire_cluster(
                        tx, found.cluster_id, at
                    )  # a ran-out lease ends before anything else
                    res = self._reservation_in(tx, reservation_id)
                    if action == "commit":
                        return self._commit(tx, res, at, ttl_s)
                    if action == "release":
                        if res.status in ENDED:
                            return res
                        return self._end(tx, res, ReservationStatus.RELEASED, at, "released by the caller")
                    return self._renew(tx, res, at, ttl_s)
            except Fenced:  # the lease ran out before COMMIT (a pause): run again, which now finds it ended
                if attempt + 1 == _FENCED_RUNS:
                    raise
        raise AssertionError("unreachable")

    def _refuse(self, res: Reservation, what: str) -> Refused:
        kind = {
            ReservationStatus.EXPIRED: "expired",
            ReservationStatus.REVOKED: "revoked",
        }.get(res.status, "wrong-status")
        why = f" ({res.reason})" if res.reason else ""
        return Refused(
            kind, f"reservation {res.id}", f"reservation {res.id} is {res.status.value}{why}: {what}"
        )

    def _commit(self, tx: Tx, res: Reservation, now: float, ttl_s: float | None) -> Reservation:
        if res.status is ReservationStatus.COMMITTED:
            return res
        if res.status is not ReservationStatus.HELD:
            raise self._refuse(res, "only a held reservation can be committed; reserve again")
        # every device again, under the lock: each must be claimed by this reservation, held, and by nothing else
        claims = read_claims(tx, res.cluster_id, res.devices)
        lost = {
            d: claims.get(d)
            for d in res.devices
            if claims.get(d) is None
            or claims[d].reservation_id != res.id
            or claims[d].kind is not ClaimKind.HELD
        }
        if lost:
            first = sorted(lost)[0]
            raise Refused(
                "claims-lost",
                f"reservation {res.id}",
                f"reservation {res.id} no longer holds {len(lost)} of its {len(res.devices)} device(s), e.g. "
                f"{first} ({_what(lost[first])}); nothing was committed; release it and reserve again",
            )
        tx.fences.append((res.id, res.expires_at))
        tx.x("UPDATE claims SET kind = 'committed' WHERE reservation_id = ?", (res.id,))
        expires = now + ttl_s if ttl_s is not None else res.expires_at
        tx.x(
            "UPDATE reservations SET status = 'COMMITTED', heartbeat_s = ?, expires_at = ? WHERE id = ?",
            (ttl_s, expires, res.id),
        )
        after = dataclasses.replace(
            res, status=ReservationStatus.COMMITTED, heartbeat_s=ttl_s, expires_at=expires
        )
        append_event(
            tx,
            res.cluster_id,
            "COMMITTED",
            _generation(tx, res.cluster_id),
            reservation_event(after, with_shape=True),
            now,
        )
        return after

    def _renew(self, tx: Tx, res: Reservation, now: float, ttl_s: float | None) -> Reservation:
        if res.status is ReservationStatus.COMMITTED and res.heartbeat_s is None:
            return res  # no lease and no heartbeat: nothing to renew
        if res.status not in (ReservationStatus.HELD, ReservationStatus.COMMITTED):
            raise self._refuse(res, "only a held or committed reservation can be renewed; reserve again")
        if ttl_s is None:  # a committed reservation here has a heartbeat (returned above otherwise)
            ttl_s = res.heartbeat_s if res.heartbeat_s is not None else DEFAULT_RENEW_S
        expires = now + ttl_s
        tx.fences.append((res.id, res.expires_at))
        tx.x("UPDATE reservations SET expires_at = ? WHERE id = ?", (expires, res.id))
        after = dataclasses.replace(res, expires_at=expires)
        append_event(
            tx, res.cluster_id, "RENEWED", _generation(tx, res.cluster_id), reservation_event(after), now
        )
        return after

    def _end(
        self,
        tx: Tx,
        res: Reservation,
        status: ReservationStatus,
        ended_at: float,
        reason: str,
        now: float | None = None,
        generation: int | None = None,
    ) -> Reservation:
        """End a live reservation: its claims go, its status and reason are written, and one event tells it."""
        if status is not ReservationStatus.EXPIRED and res.runs_out():
            tx.fences.append((res.id, res.expires_at))
        tx.x("DELETE FROM claims WHERE reservation_id = ?", (res.id,))
        tx.x(
            "UPDATE reservations SET status = ?, ended_at = ?, reason = ? WHERE id = ?",
            (status.value, ended_at, reason, res.id),
        )
        after = dataclasses.replace(res, status=status, ended_at=ended_at, reason=reason)
        gen = _generation(tx, res.cluster_id) if generation is None else generation
        append_event(
            tx,
            res.cluster_id,
            status.value,
            gen,
            reservation_event(after),
            ended_at if now is None else now,
        )
        return after

    def _revoke(
        self, tx: Tx, cluster_id: str, revoke: Mapping[str, str], generation: int, now: float
    ) -> list[Reservation]:
        """Revoke live reservations (id -> reason) inside an UpdateState: REVOKED, claims gone, an event each."""
        out = []
        for rid, reason in sorted(revoke.items()):
            res = self._reservation_in(tx, rid)
            if res.status in ENDED or res.cluster_id != cluster_id:
                raise Conflict(f"reservation {rid} ended while the update was planned")
            out.append(self._end(tx, res, ReservationStatus.REVOKED, now, reason, now, generation))
        return out

    def _expire_cluster(self, tx: Tx, cluster_id: str, now: float) -> list[Reservation]:
        rows = tx.q(
            f"SELECT {_RES_COLS} FROM reservations WHERE cluster_id = ? AND {_RUN_OUT} ORDER BY expires_at, id",
            (cluster_id, now, now),
        )
        out = []
        for row in rows:
            res = _reservation(row)
            why = "the lease ran out" if res.status is ReservationStatus.HELD else "the heartbeat ran out"
            out.append(self._end(tx, res, ReservationStatus.EXPIRED, res.expires_at, why, now))
        return out

    def sweep(self, now: float | None) -> list[Reservation]:
        seen = self.clock() if now is None else now
        ids = [
            str(r[0])
            for r in self._one(
                f"SELECT DISTINCT cluster_id FROM reservations WHERE {_RUN_OUT}",
                (seen, seen),
            )
        ]
        out: list[Reservation] = []
        for cid in ids:
            with self._tx(write=True, lock=cid) as tx:
                out += self._expire_cluster(tx, cid, self._at(tx, now))
        return out

    def compact(self, now: float | None, keep_ended_s: float) -> int:
        """Delete reservations ended more than `keep_ended_s` ago, in batches of 1,000 (short transactions)."""
        n = 0
        while True:
            with self._tx(write=True) as tx:
                cut = self._at(tx, now) - keep_ended_s
                done = tx.x(
                    "DELETE FROM reservations WHERE id IN (SELECT id FROM reservations WHERE status IN "
                    "('RELEASED', 'EXPIRED', 'REVOKED') AND ended_at < ? LIMIT 1000)",
                    (cut,),
                )
            n += max(done, 0)
            if done < 1000:
                return n


def _what(claim: Claim | None) -> str:
    if claim is None:
        return "no claim"
    if claim.kind is ClaimKind.FAILED:
        return "failed"
    if claim.kind is ClaimKind.EXTERNAL:
        return f"occupied by {claim.job!r} from outside"
    return f"{claim.kind.value} by reservation {claim.reservation_id}"
