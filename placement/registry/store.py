"""The storage interface of the registry (`Store`); the backends live in placement.registry.backends, which also
opens one by URL (`open_store`).

Every write is one short transaction that first takes the cluster's write lock (SQLite BEGIN IMMEDIATE,
PostgreSQL SELECT ... FOR UPDATE of the cluster row), so writes to one cluster are serialized by the database
itself; the claims table lets no device be in two live claims whatever the caller does. Each write then reads the
database's clock once, and decides every lease by it (`now=None`, the default of the server).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement.registry.model import ClusterRecord, Event, Reservation, Snapshot
from placement.registry.update import Current, UpdatePlan

__all__ = ["Planner", "Store", "UpdateResult"]

Planner = Callable[[Current, float], UpdatePlan]
"""Given the claims and slowdowns read under the write lock, and the transaction's time, what an UpdateState
writes (or ClaimConflict)."""


@dataclass(frozen=True)
class UpdateResult:
    """An UpdateState done (or, dry run, planned): the plan, the reservations it revoked, its last event."""

    plan: UpdatePlan
    revoked: list[Reservation] = field(default_factory=list)
    kept: list[Reservation] = field(default_factory=list)
    seq: int = 0
    first_seq: int = 0  # the first event it wrote (revocations come before the state event)


class Store(abc.ABC):
    """What the registry needs from a database. `now` (unix seconds) is None for the database's own clock, read
    inside the transaction after its locks (what servers use: replicas then never decide a lease by their own
    clock or by a time read before a pause), or a test's clock. No method holds a connection after it returns,
    and none waits for a connection or lock longer than its timeout (then `Busy`). A full disk raises
    `StoreFull` and sets `full` until a write succeeds again."""

    url: str
    full: str | None = None
    """Why the last write failed for want of disk space; None once a write succeeded."""

    @abc.abstractmethod
    def clock(self) -> float:
        """The database's clock now (unix seconds): PostgreSQL's clock_timestamp(), SQLite's host clock."""

    @abc.abstractmethod
    def ping(self, timeout_s: float) -> None:
        """Raise unless the database answers a trivial query (and, while `full`, a tiny write) within about
        `timeout_s`; for the health probe."""

    @abc.abstractmethod
    def size_bytes(self) -> int:
        """What the store takes on disk now (SQLite: the file and its WAL; PostgreSQL: the database)."""

    @abc.abstractmethod
    def stats(self) -> dict[str, int]:
        """What the store holds: size_bytes, reservations per status (reservations_held, ...), events, clusters."""

    @abc.abstractmethod
    def compact(self, now: float | None, keep_ended_s: float) -> int:
        """Delete reservations that ended more than `keep_ended_s` ago (their idempotency keys go with them);
        returns how many."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def schema_version(self) -> int: ...

    # ---- clusters and state --------------------------------------------------------------------------------

    @abc.abstractmethod
    def put_cluster(self, cluster_id: str, doc: dict[str, Any], now: float | None) -> tuple[int, bool]:
        """Store the cluster document; a changed document gets version + 1. Returns (version, changed)."""

    @abc.abstractmethod
    def cluster(self, cluster_id: str) -> ClusterRecord | None: ...

    @abc.abstractmethod
    def head(self, cluster_id: str) -> tuple[int, int, int] | None:
        """(version, generation, last_seq) of a cluster, cheap (no document)."""

    @abc.abstractmethod
    def cluster_ids(self) -> list[str]: ...

    @abc.abstractmethod
    def last_seq(self, cluster_id: str) -> int | None:
        """The cluster's change counter (its last event), cheap: a cached snapshot is fresh while it holds."""

    @abc.abstractmethod
    def snapshot(self, cluster_id: str) -> Snapshot | None:
        """Cluster, claims (with their ends), slowdowns and extras, read in one transaction."""

    @abc.abstractmethod
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
        """If `generation` is above the stored one (else StaleGeneration): expire ran-out leases, read the claims
        and slowdowns of `scope` (None: the whole cluster) under the write lock, and write `plan(current)`:
        revocations (a REVOKED event each), outside claims, slowdowns, extras, then one `event_kind` event.
        `dry_run`: plan on a read snapshot and write nothing."""

    # ---- reservations --------------------------------------------------------------------------------------

    @abc.abstractmethod
    def insert_reservation(
        self,
        res: Reservation,
        expected_generation: int,
        expected_version: int,
        now: float | None,
        before_commit: Callable[[], None] | None = None,
    ) -> tuple[Reservation, bool]:
        """Claim `res.devices` if the state is still at `expected_generation` and none of them is claimed (else
        Conflict). A reservation with the same idempotency key wins: (it, False). With `now` None the lease
        starts at the database's clock (`res` keeps its length). `before_commit` runs just before COMMIT; if it
        raises, nothing is written (a caller who left)."""

    @abc.abstractmethod
    def by_key(self, cluster_id: str, key: str) -> Reservation | None: ...

    @abc.abstractmethod
    def reservation(self, reservation_id: str) -> Reservation | None: ...

    @abc.abstractmethod
    def reservations(self, cluster_id: str | None, statuses: Sequence[str] | None) -> list[Reservation]: ...

    @abc.abstractmethod
    def transition(
        self, reservation_id: str, action: str, now: float | None, ttl_s: float | None = None
    ) -> Reservation:
        """commit (ttl_s: a heartbeat), release or renew one reservation, by id (rules in
        placement.registry.sql.reservations); returns it after."""

    @abc.abstractmethod
    def sweep(self, now: float | None) -> list[Reservation]:
        """Mark every reservation whose lease or heartbeat ran out EXPIRED and free its devices; returns them."""

    # ---- events ------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def events(self, cluster_id: str, after_seq: int, limit: int = 1000) -> list[Event]: ...

    @abc.abstractmethod
    def prune_events(self, now: float | None, max_age_s: float | None, max_count: int | None) -> int:
        """Delete each cluster's events older than `max_age_s` and beyond the newest `max_count` (the last event
        always stays); record the horizon (ClusterRecord.pruned_seq). Returns the number deleted."""
