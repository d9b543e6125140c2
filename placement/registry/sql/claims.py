"""Claims and slowdowns in SQL: reading the live claims of a cluster (with their lease or heartbeat end),
writing outside claims, and the slowdowns of degraded devices. One row per claimed device: the unique index on
(cluster_id, device) refuses a second claim inside the database."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from placement.registry.model import Claim, ClaimKind
from placement.registry.sql.tx import Tx

__all__ = [
    "CLAIM_COLS",
    "CLAIM_TYPES",
    "delete_outside_claims",
    "insert_claims",
    "read_claims",
    "read_slowdowns",
    "write_slowdowns",
]

CLAIM_COLS = ("cluster_id", "device", "kind", "reservation_id", "job")
CLAIM_TYPES = ("text", "text", "text", "text", "text")

_READ = (
    "SELECT c.device, c.kind, c.reservation_id, c.job, r.expires_at, r.heartbeat_s FROM claims c "
    "LEFT JOIN reservations r ON r.id = c.reservation_id WHERE c.cluster_id = ?"
)


def _claim(kind: str, rid: str | None, job: str | None, expires: float | None, beat: float | None) -> Claim:
    k = ClaimKind(kind)
    end = None
    if k is ClaimKind.HELD or (k is ClaimKind.COMMITTED and beat is not None):
        end = None if expires is None else float(expires)
    return Claim(k, rid, job, end)


def read_claims(tx: Tx, cluster_id: str, devices: Sequence[str] | None = None) -> dict[str, Claim]:
    """device -> its claim, of the whole cluster or of `devices`; ran-out leases included (`Claim.live`)."""
    if devices is None:
        rows = tx.q(_READ, (cluster_id,))
    else:
        rows = []
        for cond, params in tx.devices_in(list(devices), "c.device"):
            rows += tx.q(f"{_READ} AND {cond}", (cluster_id, *params))
    return {str(d): _claim(k, rid, job, exp, beat) for d, k, rid, job, exp, beat in rows}


def insert_claims(tx: Tx, cluster_id: str, claims: Mapping[str, Claim]) -> None:
    tx.insert_rows(
        "claims",
        CLAIM_COLS,
        CLAIM_TYPES,
        [(cluster_id, d, c.kind.value, c.reservation_id, c.job) for d, c in sorted(claims.items())],
    )


def delete_outside_claims(tx: Tx, cluster_id: str, devices: Sequence[str] | None) -> None:
    """Drop the outside claims (occupancy from outside, failures) of `devices` (None: of the whole cluster)."""
    outside = "kind IN ('external', 'failed')"
    if devices is None:
        tx.x(f"DELETE FROM claims WHERE cluster_id = ? AND {outside}", (cluster_id,))
        return
    for cond, params in tx.devices_in(list(devices)):
        tx.x(f"DELETE FROM claims WHERE cluster_id = ? AND {outside} AND {cond}", (cluster_id, *params))


def read_slowdowns(tx: Tx, cluster_id: str, devices: Sequence[str] | None = None) -> dict[str, float]:
    sql = "SELECT device, slowdown FROM slowdowns WHERE cluster_id = ?"
    if devices is None:
        rows = tx.q(sql, (cluster_id,))
    else:
        rows = []
        for cond, params in tx.devices_in(list(devices)):
            rows += tx.q(f"{sql} AND {cond}", (cluster_id, *params))
    return {str(d): float(s) for d, s in rows}


def write_slowdowns(tx: Tx, cluster_id: str, slowdowns: Mapping[str, float | None], replace: bool) -> None:
    """Set the slowdown of each device (None: healthy); `replace` first clears every slowdown of the cluster."""
    if replace:
        tx.x("DELETE FROM slowdowns WHERE cluster_id = ?", (cluster_id,))
    else:
        for cond, params in tx.devices_in(sorted(slowdowns)):
            tx.x(f"DELETE FROM slowdowns WHERE cluster_id = ? AND {cond}", (cluster_id, *params))
    tx.insert_rows(
        "slowdowns",
        ("cluster_id", "device", "slowdown"),
        ("text", "text", "float8"),
        [(cluster_id, d, s) for d, s in sorted(slowdowns.items()) if s is not None],
    )
