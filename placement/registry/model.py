"""The registry's records and errors: clusters, device rows, reservations, events, and the refusals they raise.

Plain data shared by the storage backends and the reserve logic; nothing here touches a database.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from placement.errors import PlacementError

__all__ = [
    "Aborted",
    "ClusterRecord",
    "DeviceRow",
    "Event",
    "NotFound",
    "Refused",
    "Reservation",
    "ReservationStatus",
    "Snapshot",
    "StaleGeneration",
]


class ReservationStatus(Enum):
    """HELD: devices held until `expires_at`; COMMITTED: the job started, its devices are occupancy now;
    RELEASED: given back by the caller; EXPIRED: the lease ran out before a commit or renewal."""

    HELD = "HELD"
    COMMITTED = "COMMITTED"
    RELEASED = "RELEASED"
    EXPIRED = "EXPIRED"


@dataclass(frozen=True)
class DeviceRow:
    """What the state says of one device; devices without a row are free and healthy."""

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


@dataclass(frozen=True)
class Reservation:
    """Devices (rank order, device ids) held for one job. `payload` is the caller's rendering of the placement
    answer (the server stores the serialized PlacementResult), returned unchanged to a retry."""

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

    def live(self, now: float) -> bool:
        """Holds its devices now: committed, or held with a lease that has not run out."""
        return self.status is ReservationStatus.COMMITTED or (
            self.status is ReservationStatus.HELD and self.expires_at > now
        )

    def effective_status(self, now: float) -> ReservationStatus:
        """HELD past its expiry reads as EXPIRED even before the sweeper wrote it."""
        if self.status is ReservationStatus.HELD and self.expires_at <= now:
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
    """A consistent read of one cluster: its record, every device row, the live holds and the extras (links,
    fault domains, description of the last full state)."""

    cluster: ClusterRecord
    rows: dict[str, DeviceRow]
    holds: dict[str, tuple[str, float]]  # device id -> (reservation id, expires_at)
    extras: dict[str, Any] = field(default_factory=dict)


class Refused(PlacementError):
    """The registry refuses a call on purpose (a rule of the registry, not a bug): FAILED_PRECONDITION.

    `kind` names the rule (stale-generation, expired, wrong-status, idempotency-key, cluster-version).
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


class NotFound(PlacementError):
    """An unknown cluster or reservation: NOT_FOUND."""


class Aborted(PlacementError):
    """Reserve could not commit after its attempts (the state changed under every solve): ABORTED; retry."""


class Conflict(Exception):
    """Inside the store: the commit of a reservation found the state changed since its snapshot."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
