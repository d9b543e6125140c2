"""The registry's records and errors: clusters, claims, device rows, reservations, events, update plans, and the
refusals they raise. Plain data shared by the storage backends and the reserve logic; nothing here touches a
database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from placement.errors import PlacementError

__all__ = [
    "ENDED",
    "Aborted",
    "Busy",
    "Claim",
    "ClaimConflict",
    "ClaimKind",
    "ClusterRecord",
    "Conflict",
    "DeviceRow",
    "Event",
    "Fenced",
    "InDoubt",
    "NotFound",
    "Refused",
    "Reservation",
    "ReservationStatus",
    "Snapshot",
    "StaleGeneration",
    "StoreFull",
    "reservation_conflict",
]


class ReservationStatus(Enum):
    """HELD: devices held until `expires_at`; COMMITTED: the job started, its devices are its occupancy (until
    `expires_at` when it has a heartbeat); RELEASED: given back by the caller; EXPIRED: the lease or heartbeat ran
    out; REVOKED: an UpdateState with revoke took its devices."""

    HELD = "HELD"
    COMMITTED = "COMMITTED"
    RELEASED = "RELEASED"
    EXPIRED = "EXPIRED"
    REVOKED = "REVOKED"


ENDED = (ReservationStatus.RELEASED, ReservationStatus.EXPIRED, ReservationStatus.REVOKED)


class ClaimKind(Enum):
    """What holds a device (one live claim per device, enforced by the database): a held or committed
    reservation, occupancy reported from outside (UpdateState), or a failure (a failed device holds no claim)."""

    HELD = "held"
    COMMITTED = "committed"
    EXTERNAL = "external"
    FAILED = "failed"


@dataclass(frozen=True)
class Claim:
    """The one live claim of a device. `job`: the reservation's job or the outside job (None when failed);
    `expires_at`: the lease (held) or heartbeat (committed) end, None when it never expires."""

    kind: ClaimKind
    reservation_id: str | None = None
    job: str | None = None
    expires_at: float | None = None

    @property
    def registry_owned(self) -> bool:
        return self.kind in (ClaimKind.HELD, ClaimKind.COMMITTED)

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


@dataclass(frozen=True)
class DeviceRow:
    """What the stored state says of one device (the native state document's view): the job on it (outside
    occupancy or a committed reservation), failed, slowdown. Devices without a row are free and healthy."""

    job: str | None = None
    failed: bool = False
    slowdown: float | None = None

    @property
    def empty(self) -> bool:
        return self.job is None and not self.failed and (self.slowdown is None or self.slowdown <= 1.0)


@dataclass(frozen=True)
class ClusterRecord:
    cluster_id: str
    version: int
    doc: dict[str, Any]
    generation: int
    last_seq: int
    pruned_seq: int = 0  # events with seq <= pruned_seq were pruned


@dataclass(frozen=True)
class Reservation:
    """Devices (rank order, device ids) held for one job. `payload` is the caller's rendering of the placement
    answer (the server stores the serialized PlacementResult), returned unchanged to a retry. `heartbeat_s`: a
    committed reservation with a heartbeat expires at `expires_at` unless renewed. `shape`: the job as the Reserve
    request gave it (its native document), kept so that the registry prices the traffic of the committed job
    (`devices` is its mapping, rank r on `devices[r]`); None when the caller gave none."""

    id: str
    cluster_id: str
    job: str
    status: ReservationStatus
    devices: tuple[str, ...]
    idempotency_key: str | None
    request_hash: str
    created_at: float
    expires_at: float
    ended_at: float | None
    generation: int
    cluster_version: int
    payload: bytes = b""
    reason: str = ""
    heartbeat_s: float | None = None
    shape: dict[str, Any] | None = None

    def runs_out(self) -> bool:
        """Its claim has an end: held (the lease), or committed with a heartbeat."""
        return self.status is ReservationStatus.HELD or (
            self.status is ReservationStatus.COMMITTED and self.heartbeat_s is not None
        )

    def live(self, now: float) -> bool:
        """Holds its devices now: held or committed, and its lease or heartbeat has not run out."""
        return self.status in (ReservationStatus.HELD, ReservationStatus.COMMITTED) and (
            not self.runs_out() or self.expires_at > now
        )

    def effective_status(self, now: float) -> ReservationStatus:
        """A lease or heartbeat past its end reads as EXPIRED even before the sweeper wrote it."""
        if self.runs_out() and self.expires_at <= now:
            return ReservationStatus.EXPIRED
        return self.status


@dataclass(frozen=True)
class Event:
    """One change of a cluster, in commit order: `seq` counts per cluster from 1."""

    cluster_id: str
    seq: int
    kind: str
    generation: int
    payload: dict[str, Any]
    at: float


@dataclass(frozen=True)
class Snapshot:
    """A consistent read of one cluster: its record, the live claims (one per device), the slowdowns, the
    extras (links, fault domains, description and shapes of the last full state) and the shapes of the
    committed reservations (id -> (job, device of each rank, shape))."""

    cluster: ClusterRecord
    claims: dict[str, Claim]
    slowdowns: dict[str, float]
    extras: dict[str, Any] = field(default_factory=dict)
    shapes: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = field(default_factory=dict)


class Refused(PlacementError):
    """The registry refuses a call on purpose (a rule of the registry, not a bug): FAILED_PRECONDITION.

    `kind` names the rule (stale-generation, expired, wrong-status, revoked, idempotency-key, cluster-version,
    claimed-device, claims-lost).
    """

    def __init__(self, kind: str, subject: str, message: str) -> None:
        self.kind = kind
        self.subject = subject
        super().__init__(message)


class StaleGeneration(Refused):
    """An UpdateState whose generation is not above the stored one."""

    def __init__(self, cluster_id: str, given: int, current: int) -> None:
        super().__init__(
            "stale-generation",
            "generation",
            f"cluster {cluster_id!r}: generation {given} is not above the stored generation {current}; "
            "the update is stale",
        )
        self.given = given
        self.current = current


class ClaimConflict(Refused):
    """An UpdateState occupies (by another job) or fails devices of live reservations and did not ask to revoke
    them. `conflicts`: reservation id -> (its job, its status, [(device, what the update does to it)])."""

    def __init__(self, cluster_id: str, conflicts: dict[str, tuple[str, str, list[tuple[str, str]]]]) -> None:
        self.conflicts = conflicts
        self.lines = [reservation_conflict(rid, *c) for rid, c in sorted(conflicts.items())]
        n = sum(len(c[2]) for c in conflicts.values())
        super().__init__(
            "claimed-device",
            f"reservation {min(conflicts)}",
            f"cluster {cluster_id!r}: the update occupies or fails {n} device(s) of {len(conflicts)} live "
            f"reservation(s): {'; '.join(self.lines[:3])}{' ...' if len(self.lines) > 3 else ''}; "
            "release them first, or send the update with revoke",
        )


def reservation_conflict(rid: str, job: str, status: str, devices: list[tuple[str, str]]) -> str:
    """One line naming a reservation and what the update does to its devices (the first 4 named)."""
    shown = ", ".join(f"{d} ({what})" for d, what in devices[:4])
    more = f" and {len(devices) - 4} more" if len(devices) > 4 else ""
    return f"reservation {rid} (job {job!r}, {status}) holds {shown}{more}"


class NotFound(PlacementError):
    """An unknown cluster or reservation: NOT_FOUND."""


class Aborted(PlacementError):
    """Reserve could not commit after its attempts (the state changed under every solve): ABORTED; retry."""


class Busy(Aborted):
    """A database connection or lock was not free within its timeout, or the database did not answer before the
    commit: ABORTED with the advice to retry after a short pause (nothing was written)."""


class InDoubt(PlacementError):
    """The connection to the database broke while it committed: the write may or may not be stored. UNAVAILABLE
    with the advice to retry (a Reserve with its idempotency key gets what was written, if anything)."""


class StoreFull(PlacementError):
    """The store's disk is full (SQLite "database or disk is full", PostgreSQL SQLSTATE 53100): nothing was
    written. RESOURCE_EXHAUSTED naming the store; reads still answer, writes resume once space is freed."""

    def __init__(self, store: str, detail: str) -> None:
        self.store = store
        super().__init__(
            f"the registry store {store} is out of disk space ({detail}); nothing was written; "
            "retry once space is freed"
        )


class Fenced(Exception):
    """Inside the store: at COMMIT, by the database's clock, a reservation the transaction commits, renews,
    releases or revokes had already run out (a writer paused inside its transaction); rolled back, run again."""


class Conflict(Exception):
    """Inside the store: the commit of a reservation found the state changed since its snapshot."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
