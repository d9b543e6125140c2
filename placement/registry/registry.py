"""`Registry`: clusters and live state held in a `Store`, and Reserve: place against the current state, then hold
the devices in one transaction that checks nothing moved during the solve (else retry, then `Aborted`).

No grpc here: the server renders answers (the `render` callback) and maps the errors to status codes.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError, Problem
from placement.io.native import cluster_from_dict
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry.model import (
    Aborted,
    ClusterRecord,
    Conflict,
    DeviceRow,
    Event,
    NotFound,
    Refused,
    Reservation,
    ReservationStatus,
)
from placement.registry.statedoc import (
    DiffChange,
    build_state,
    parse_diff,
    rows_from_snapshot,
    state_document,
)
from placement.registry.store import Store
from placement.solve import PlacementResult, SolveOptions

__all__ = ["MAX_TTL_S", "Registry", "ReserveOutcome", "StateView", "request_hash"]

MAX_TTL_S = 7 * 24 * 3600.0
Solve = Callable[[Topology, ClusterState, Job, SolveOptions], PlacementResult]
Render = Callable[[Topology, PlacementResult], bytes]


def request_hash(*parts: bytes) -> str:
    """A fingerprint of what a Reserve asked for: a retry with the same idempotency key must ask the same."""
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()


@dataclass
class StateView:
    """One cluster as of its change counter `last_seq`: topology, device rows, holds and extras."""

    record: ClusterRecord
    topology: Topology
    base: ClusterState | None
    rows: dict[str, DeviceRow]
    holds: dict[str, tuple[str, float]]
    extras: dict[str, Any]
    _state: ClusterState | None = field(default=None, repr=False)
    _state_at: float = 0.0

    @property
    def generation(self) -> int:
        return self.record.generation

    def state(self, now: float) -> ClusterState:
        """The state a solve sees: held devices with a live lease are occupied."""
        live = {d: rid for d, (rid, exp) in self.holds.items() if exp > now}
        expired = any(exp <= now for _, exp in self.holds.values())
        if self._state is None or expired:
            self._state = build_state(self.topology, self.base, self.rows, self.extras, live)
        return self._state

    def document(self) -> dict[str, Any]:
        """The stored state as a native state document (holds not included)."""
        return state_document(self.rows, self.extras)


@dataclass(frozen=True)
class ReserveOutcome:
    reservation: Reservation
    replayed: bool  # an earlier reservation with the same idempotency key
    attempts: int
    conflicts: tuple[str, ...] = ()


class Registry:
    """The registry's rules over a store. Thread-safe; several registries (replicas) may share one database."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        solve: Solve | None = None,
        max_attempts: int = 4,
    ) -> None:
        self.store = store
        self.clock = clock
        if solve is None:
            from placement.solve import place

            solve = place
        self._solve = solve
        self.max_attempts = max_attempts
        self._lock = threading.Lock()
        self._views: dict[str, StateView] = {}
        self._topologies: dict[tuple[str, int], tuple[Topology, ClusterState | None]] = {}
        self._cluster_locks: dict[str, threading.Lock] = {}
        self.changed = threading.Condition()  # notified after every local write (WatchState wakes at once)

    def close(self) -> None:
        self.store.close()

    # ---- clusters and state --------------------------------------------------------------------------------

    def _topology(self, cluster_id: str, record: ClusterRecord) -> tuple[Topology, ClusterState | None]:
        key = (cluster_id, record.version)
        with self._lock:
            hit = self._topologies.get(key)
        if hit is None:
            hit = cluster_from_dict(record.doc, "cluster")
            with self._lock:
                self._topologies = {k: v for k, v in self._topologies.items() if k[0] != cluster_id}
                self._topologies[key] = hit
        return hit

    def put_cluster(self, cluster_id: str, doc: dict[str, Any]) -> tuple[int, bool]:
        """Store a cluster (validated by the native reader first); returns (version, changed). A new version
        must still hold every device the live state or a live reservation names."""
        _check_id(cluster_id, "cluster_id")
        topo, _ = cluster_from_dict(doc, "cluster")
        if self.store.last_seq(cluster_id) is not None:
            view = self.view(cluster_id)
            now = self.clock()
            named = set(view.rows) | {d for d, (_, exp) in view.holds.items() if exp > now}
            missing = sorted(d for d in named if topo.device_index(d) is None)
            if missing:
                raise Refused(
                    "cluster-version",
                    "cluster",
                    f"the new cluster lacks {len(missing)} device(s) that the state or a reservation "
                    f"names, e.g. {missing[0]}; update the state first",
                )
        out = self.store.put_cluster(cluster_id, doc, self.clock())
        self._notify()
        return out

    def view(self, cluster_id: str) -> StateView:
        """The cluster now (cached while its change counter holds)."""
        seq = self.store.last_seq(cluster_id)
        if seq is None:
            raise NotFound(f"unknown cluster {cluster_id!r}; PutCluster it first")
        with self._lock:
            cached = self._views.get(cluster_id)
        if cached is not None and cached.record.last_seq == seq:
            return cached
        snap = self.store.snapshot(cluster_id, self.clock())
        if snap is None:
            raise NotFound(f"unknown cluster {cluster_id!r}")
        topo, base = self._topology(cluster_id, snap.cluster)
        view = StateView(snap.cluster, topo, base, snap.rows, snap.holds, snap.extras)
        self._keep(cluster_id, view)
        return view

    def _keep(self, cluster_id: str, view: StateView) -> None:
        with self._lock:
            old = self._views.get(cluster_id)
            if old is None or old.record.last_seq <= view.record.last_seq:
                self._views[cluster_id] = view

    def resolve(self, cluster_id: str) -> tuple[Topology, ClusterState]:
        """What Place and Compare with a `cluster_id` run on: the topology and the state with live holds."""
        view = self.view(cluster_id)
        return view.topology, view.state(self.clock())

    def update_state(
        self, cluster_id: str, generation: int, *, snapshot: Any = None, diff: Any = None
    ) -> int:
        """Apply a full state document or a diff (exactly one) as `generation`; StaleGeneration unless it is above
        the stored one. Returns the generation."""
        if (snapshot is None) == (diff is None):
            raise InputError("request", [Problem("state", "give exactly one of a full state or a diff")])
        if generation < 1:
            raise InputError("request", [Problem("generation", f"must be >= 1, got {generation}")])
        view = self.view(cluster_id)
        topo = view.topology
        if snapshot is not None:
            rows, extras = rows_from_snapshot(snapshot, topo, "state")
            fixed = dict(rows)
            seq = self.store.update_state(
                cluster_id,
                generation,
                lambda _cur: fixed,
                [],
                True,
                extras,
                {"state": state_document(rows, extras)},
                self.clock(),
            )
            new_rows: dict[str, DeviceRow] = rows
            new_extras = extras
        else:
            change: DiffChange = parse_diff(diff, topo, "diff")
            applied: dict[str, DeviceRow | None] = {}

            def apply(current: Mapping[str, DeviceRow]) -> Mapping[str, DeviceRow | None]:
                applied.update(change.apply(current))
                return applied

            seq = self.store.update_state(
                cluster_id,
                generation,
                apply,
                change.touched,
                False,
                None,
                {"diff": change.document()},
                self.clock(),
            )
            new_rows = dict(view.rows)
            for d, row in applied.items():
                if row is None:
                    new_rows.pop(d, None)
                else:
                    new_rows[d] = row
            new_extras = view.extras
        if view.record.last_seq == seq - 1:  # nobody else wrote in between: the cache moves along
            rec = ClusterRecord(cluster_id, view.record.version, view.record.doc, generation, seq)
            self._keep(cluster_id, StateView(rec, topo, view.base, new_rows, dict(view.holds), new_extras))
        self._notify()
        return generation

    # ---- reservations --------------------------------------------------------------------------------------

    @contextmanager
    def _serial(self, cluster_id: str) -> Iterator[None]:
        """Solves of one cluster take turns (they would pick the same devices): in this process, then across the
        replicas sharing the database (Store.solve_turn). State updates never wait for a solve: the commit's
        generation check catches them."""
        with self._lock:
            lock = self._cluster_locks.setdefault(cluster_id, threading.Lock())
        with lock, self.store.solve_turn(cluster_id):
            yield

    def reserve(
        self,
        cluster_id: str,
        job: Job,
        options: SolveOptions,
        *,
        ttl_s: float,
        key: str | None,
        fingerprint: str,
        render: Render,
        gone: Callable[[], bool] | None = None,
    ) -> ReserveOutcome:
        """Place `job` on the current state and hold its devices for `ttl_s`. A key already used returns that
        reservation (Refused if it was for another request). InfeasibleError when the job does not fit; Aborted
        when the state moved under every attempt, or when `gone()` says the caller left before the commit."""
        if not (0 < ttl_s <= MAX_TTL_S):
            raise InputError(
                "request", [Problem("ttl_s", f"must be in (0, {MAX_TTL_S:g}] seconds, got {ttl_s}")]
            )
        if key:
            _check_id(key, "idempotency_key")
            earlier = self.store.by_key(cluster_id, key)
            if earlier is not None:
                return ReserveOutcome(self._same(earlier, fingerprint), True, 0)
        conflicts: list[str] = []
        with self._serial(cluster_id):
            for attempt in range(1, self.max_attempts + 1):
                view = self.view(cluster_id)
                state = view.state(self.clock())
                result = self._solve(view.topology, state, job, options)
                assert result.mapping is not None
                devices = tuple(view.topology.devices[i].id for i in result.mapping)
                if gone is not None and gone():
                    raise Aborted("the caller went away before the devices were held; nothing is reserved")
                now = self.clock()
                res = Reservation(
                    id=uuid.uuid4().hex,
                    cluster_id=cluster_id,
                    job=job.name,
                    status=ReservationStatus.HELD,
                    devices=devices,
                    idempotency_key=key or None,
                    request_hash=fingerprint,
                    created_at=now,
                    expires_at=now + ttl_s,
                    ended_at=None,
                    generation=view.generation,
                    cluster_version=view.record.version,
                    payload=render(view.topology, result),
                )
                try:
                    stored, new = self.store.insert_reservation(
                        res, view.generation, view.record.version, now
                    )
                except Conflict as c:
                    conflicts.append(c.reason)
                    continue
                self._notify()
                if not new:
                    return ReserveOutcome(self._same(stored, fingerprint), True, attempt, tuple(conflicts))
                return ReserveOutcome(stored, False, attempt, tuple(conflicts))
        raise Aborted(
            f"the state of cluster {cluster_id!r} changed during each of {self.max_attempts} solves "
            f"({'; '.join(conflicts[-2:])}); retry the call"
        )

    def _same(self, earlier: Reservation, fingerprint: str) -> Reservation:
        if earlier.request_hash != fingerprint:
            raise Refused(
                "idempotency-key",
                "idempotency_key",
                f"idempotency key {earlier.idempotency_key!r} was used for another request "
                f"(reservation {earlier.id} of job {earlier.job!r}); use a new key",
            )
        return earlier

    def get(self, reservation_id: str) -> Reservation:
        res = self.store.reservation(reservation_id)
        if res is None:
            raise NotFound(f"unknown reservation {reservation_id!r}")
        return res

    def commit(self, reservation_id: str) -> Reservation:
        return self._transition(reservation_id, "commit")

    def release(self, reservation_id: str) -> Reservation:
        return self._transition(reservation_id, "release")

    def renew(self, reservation_id: str, ttl_s: float) -> Reservation:
        if not (0 < ttl_s <= MAX_TTL_S):
            raise InputError(
                "request", [Problem("ttl_s", f"must be in (0, {MAX_TTL_S:g}] seconds, got {ttl_s}")]
            )
        return self._transition(reservation_id, "renew", ttl_s)

    def _transition(self, reservation_id: str, action: str, ttl_s: float | None = None) -> Reservation:
        out = self.store.transition(reservation_id, action, self.clock(), ttl_s)
        self._notify()
        return out

    def reservations(self, cluster_id: str | None = None, *, live_only: bool = False) -> list[Reservation]:
        """Reservations (of one cluster), oldest first; a held one past its lease reads EXPIRED."""
        if cluster_id is not None and self.store.last_seq(cluster_id) is None:
            raise NotFound(f"unknown cluster {cluster_id!r}")
        now = self.clock()
        rows = self.store.reservations(cluster_id, ["HELD", "COMMITTED"] if live_only else None)
        out = [_effective(r, now) for r in rows]
        return [r for r in out if r.live(now)] if live_only else out

    def sweep(self) -> list[Reservation]:
        """Expire every lease that ran out (the server calls this periodically; Reserve also does it)."""
        out = self.store.sweep(self.clock())
        if out:
            self._notify()
        return out

    # ---- events ------------------------------------------------------------------------------------------

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def events(self, cluster_id: str, after_seq: int, wait_s: float = 0.0) -> list[Event]:
        """Events after `after_seq`; waits up to `wait_s` for one (local writes wake it at once, other
        replicas' writes within the poll)."""
        out = self.store.events(cluster_id, after_seq)
        if out or wait_s <= 0:
            return out
        with self.changed:
            self.changed.wait(wait_s)
        return self.store.events(cluster_id, after_seq)


def _effective(res: Reservation, now: float) -> Reservation:
    status = res.effective_status(now)
    if status is res.status:
        return res
    import dataclasses

    return dataclasses.replace(res, status=status, ended_at=res.expires_at)


def _check_id(value: str, name: str) -> None:
    if not value or len(value) > 200 or any(c.isspace() for c in value):
        raise InputError(
            "request", [Problem(name, f"must be 1-200 characters without spaces, got {value!r}")]
        )
