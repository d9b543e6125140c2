"""`Registry`: clusters and live state held in a `Store`, and Reserve: read a snapshot, solve with no connection
or lock held (Reserves of one cluster in parallel), then claim the devices in one short transaction that checks
nothing moved (else solve again, then `Aborted`).

No grpc here: the server renders answers (the `render` callback) and maps the errors to status codes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from placement.decide.wait import decide
from placement.errors import InfeasibleError, InputError, PlacementError, Problem
from placement.io.native import cluster_from_dict
from placement.model.job import Job
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry.model import (
    Aborted,
    ClusterRecord,
    Conflict,
    Event,
    NotFound,
    Refused,
    Reservation,
    ReservationStatus,
)
from placement.registry.statedoc import parse_diff, rows_from_snapshot
from placement.registry.store import Store
from placement.registry.update import Current, UpdatePlan, plan_diff, plan_snapshot
from placement.registry.view import StateView
from placement.solve import PlacementResult, SolveOptions, SolveStatus, place
from placement.solve.serving import place_serving

__all__ = [
    "EVENT_MAX_AGE_S",
    "EVENT_MAX_COUNT",
    "MAX_TTL_S",
    "Registry",
    "ReserveOutcome",
    "StateView",
    "UpdateOutcome",
    "Waiting",
    "request_hash",
]

MAX_TTL_S = 7 * 24 * 3600.0
EVENT_MAX_AGE_S = 7 * 24 * 3600.0
"""Events older than this are pruned (a watcher resuming before them starts over with a snapshot)."""
EVENT_MAX_COUNT = 100_000
"""Events kept per cluster at most."""
KEEP_ENDED_S = 7 * 24 * 3600.0
"""Ended reservations (released, expired, revoked) are deleted this long after they ended; an idempotency key
finds its reservation while it is kept."""
PRUNE_EVERY_S = 60.0
_ADVANCE_MAX = 256  # a cached view behind by at most this many events reads them instead of the whole cluster
_SETTLE_S = 5.0  # longest wait for this process's other Reserves in flight before calling a job infeasible
Solve = Callable[[Topology, ClusterState, Job, SolveOptions], PlacementResult]
Render = Callable[[Topology, Any], bytes]
"""The answer a reservation keeps, as bytes: a `PlacementResult` (a training job) or a `ServingResult` (a serving
deployment) rendered on the cluster's topology."""


def request_hash(*parts: bytes) -> str:
    """A fingerprint of what a Reserve asked for: a retry with the same idempotency key must ask the same."""
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()


@dataclass(frozen=True)
class ReserveOutcome:
    reservation: Reservation
    replayed: bool  # an earlier reservation with the same idempotency key
    attempts: int
    conflicts: tuple[str, ...] = ()


class Waiting(PlacementError):
    """Reserve's answer is WAIT (`placement.decide.wait.decide`: above the request's max_slowdown): nothing is
    reserved. `payload` is the rendered answer (status WAIT, its reasons and the earliest expected start)."""

    def __init__(self, payload: bytes, reasons: list[str]) -> None:
        self.payload = payload
        super().__init__("better to wait: " + "; ".join(reasons))


@dataclass(frozen=True)
class UpdateOutcome:
    """An UpdateState done (or planned, `dry_run`): the change as stored, the reservations revoked (or that
    would be), the reservations kept although the update would have freed them, its last event."""

    generation: int
    changes: dict[str, Any]
    revoked: tuple[Reservation, ...]
    kept: tuple[Reservation, ...]
    dry_run: bool
    seq: int


class Registry:
    """The registry's rules over a store. Thread-safe; several registries (replicas) may share one database."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], float] | None = None,
        solve: Solve | None = None,
        max_attempts: int = 16,
        event_max_age_s: float | None = EVENT_MAX_AGE_S,
        event_max_count: int | None = EVENT_MAX_COUNT,
        keep_ended_s: float | None = KEEP_ENDED_S,
        compact_every_s: float = PRUNE_EVERY_S,
    ) -> None:
        """`clock` None: the database's clock (reads take it before their data; every write reads it inside its
        transaction, after its locks); a test passes its own. Ended reservations older than `keep_ended_s` and
        events older than `event_max_age_s` or beyond `event_max_count` per cluster are deleted by `sweep`,
        every `compact_every_s` (None: kept)."""
        self.store = store
        self.clock: Callable[[], float] = store.clock if clock is None else clock
        self._given_clock = clock is not None
        self._solve: Solve = place if solve is None else solve
        self.max_attempts = max_attempts
        self.event_max_age_s = event_max_age_s
        self.event_max_count = event_max_count
        self.keep_ended_s = keep_ended_s
        self.compact_every_s = compact_every_s
        self._pruned_at = float("-inf")
        self._lock = threading.Lock()
        self._views: dict[str, StateView] = {}
        self._topologies: dict[tuple[str, int], tuple[Topology, ClusterState | None]] = {}
        # devices chosen by this process's Reserves that are not committed yet: cluster -> device -> label
        self._inflight: dict[str, dict[str, str]] = {}
        self._settled = threading.Condition(self._lock)
        self.changed = threading.Condition()  # notified after every local write (WatchState wakes at once)

    def close(self) -> None:
        self.store.close()

    def _write_now(self) -> float | None:
        """What a write is told the time is: None (the database's clock, read inside its transaction), or the
        test's clock."""
        return self.clock() if self._given_clock else None

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

    def _current_topology(self, cluster_id: str) -> Topology:
        """The cluster's topology now, from the cache when its version is current (no snapshot read)."""
        head = self.store.head(cluster_id)
        if head is None:
            raise NotFound(f"unknown cluster {cluster_id!r}; PutCluster it first")
        with self._lock:
            hit = self._topologies.get((cluster_id, head[0]))
        if hit is not None:
            return hit[0]
        record = self.store.cluster(cluster_id)
        if record is None:
            raise NotFound(f"unknown cluster {cluster_id!r}; PutCluster it first")
        return self._topology(cluster_id, record)[0]

    def put_cluster(self, cluster_id: str, doc: dict[str, Any]) -> tuple[int, bool]:
        """Store a cluster (validated by the native reader first); returns (version, changed). A new version
        must still hold every device the live state or a live reservation names."""
        _check_id(cluster_id, "cluster_id")
        topo, _ = cluster_from_dict(doc, "cluster")
        if self.store.last_seq(cluster_id) is not None:
            view = self.view(cluster_id)
            named = set(view.live(self.clock())) | set(view.slowdowns)
            missing = sorted(d for d in named if topo.device_index(d) is None)
            if missing:
                raise Refused(
                    "cluster-version",
                    "cluster",
                    f"the new cluster lacks {len(missing)} device(s) that the state or a reservation "
                    f"names, e.g. {missing[0]}; update the state first",
                )
        out = self.store.put_cluster(cluster_id, doc, self._write_now())
        self._notify()
        return out

    def view(self, cluster_id: str) -> StateView:
        """The cluster now: cached while its change counter holds, moved along by the events since (a few rows)
        when it moved a little, read whole otherwise."""
        seq = self.store.last_seq(cluster_id)
        if seq is None:
            raise NotFound(f"unknown cluster {cluster_id!r}; PutCluster it first")
        with self._lock:
            cached = self._views.get(cluster_id)
        if cached is not None and cached.record.last_seq == seq:
            return cached
        view = None
        if cached is not None and 0 < seq - cached.record.last_seq <= _ADVANCE_MAX:
            view = cached.advance(self.store.events(cluster_id, cached.record.last_seq, _ADVANCE_MAX))
        if view is None:
            snap = self.store.snapshot(cluster_id)
            if snap is None:
                raise NotFound(f"unknown cluster {cluster_id!r}")
            topo, base = self._topology(cluster_id, snap.cluster)
            view = StateView(snap.cluster, topo, base, snap.claims, snap.slowdowns, snap.extras, snap.shapes)
        with self._lock:
            old = self._views.get(cluster_id)
            if old is None or old.record.last_seq <= view.record.last_seq:
                self._views[cluster_id] = view
        return view

    def references(self, cluster_id: str) -> tuple[Topology, ClusterState]:
        """The topology and its links and fault domains, no claims: what a job's names are checked against."""
        view = self.view(cluster_id)
        return view.topology, view.static_state()

    def expected_ends(self, cluster_id: str) -> list[tuple[float, list[int]]]:
        """(expected end, device indices) of the cluster's live claims that run out: a held lease ends at its
        expiry, a committed reservation with a heartbeat at its heartbeat's expiry (unless renewed); claims that
        never expire (committed without heartbeat, outside jobs, failures) are left out. Earliest first."""
        view = self.view(cluster_id)
        now = self.clock()
        by_end: dict[float, list[int]] = {}
        for dev_id, claim in view.live(now).items():
            idx = view.topology.device_index(dev_id)
            if claim.expires_at is not None and idx is not None:
                by_end.setdefault(claim.expires_at, []).append(idx)
        return sorted(by_end.items())

    def resolve(self, cluster_id: str) -> tuple[Topology, ClusterState]:
        """What Place and Compare with a `cluster_id` run on: the topology and the state with live holds."""
        now = self.clock()  # before the data: a lease left out had ended before it was read
        view = self.view(cluster_id)
        return view.topology, view.state(now)

    def update_state(
        self,
        cluster_id: str,
        generation: int,
        *,
        snapshot: Any = None,
        diff: Any = None,
        revoke: bool = False,
        dry_run: bool = False,
        reason: str = "",
    ) -> UpdateOutcome:
        """Apply a full outside state document or a diff (exactly one) as `generation`: StaleGeneration unless
        it is above the stored one; ClaimConflict when it occupies (by another job) or fails a device of a live
        reservation, unless `revoke` (those reservations are REVOKED with `reason`). Devices of live
        reservations are never freed by an update. `dry_run`: the same answer, nothing written."""
        if (snapshot is None) == (diff is None):
            raise InputError("request", [Problem("state", "give exactly one of a full state or a diff")])
        if generation < 1:
            raise InputError("request", [Problem("generation", f"must be >= 1, got {generation}")])
        if len(reason) > 1000:
            raise InputError("request", [Problem("reason", f"at most 1000 characters, got {len(reason)}")])
        topo = self._current_topology(cluster_id)
        now = self._write_now()
        planner: Callable[[Current, float], UpdatePlan]
        if snapshot is not None:
            rows, extras = rows_from_snapshot(snapshot, topo, "state")

            def planner(cur: Current, now: float) -> UpdatePlan:
                return plan_snapshot(
                    rows, extras, cur, now, revoke=revoke, reason=reason, cluster_id=cluster_id
                )

            out = self.store.update_state(
                cluster_id, generation, planner, None, extras, "STATE_REPLACED", now, dry_run
            )
        else:
            change = parse_diff(diff, topo, "diff")

            def planner(cur: Current, now: float) -> UpdatePlan:
                return plan_diff(change, cur, now, revoke=revoke, reason=reason, cluster_id=cluster_id)

            out = self.store.update_state(
                cluster_id, generation, planner, change.touched, None, "STATE_DIFF", now, dry_run
            )
        if not dry_run:
            self._notify()
        return UpdateOutcome(
            generation, out.plan.changes, tuple(out.revoked), tuple(out.kept), dry_run, out.seq
        )

    # ---- reservations --------------------------------------------------------------------------------------

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
        max_slowdown: float | None = None,
        shape: dict[str, Any] | None = None,
        serving: ServingJob | None = None,
    ) -> ReserveOutcome:
        """Place `job` on the current state and hold its devices for `ttl_s`. A key already used returns that
        reservation (Refused if it was for another request). InfeasibleError when the job does not fit; Aborted
        when the state moved under every attempt, or when `gone()` says the caller left: it is asked once more
        inside the claim's transaction, just before COMMIT, and a yes rolls the claim back.
        `max_slowdown`: place or wait (`decide`); a WAIT answer raises `Waiting` and reserves nothing.
        `shape`: the job as the request gave it (a native job document), stored with the reservation: once
        committed, its traffic is priced for every later Place and Reserve of the cluster.
        `serving`: a serving deployment, placed by the serving objective (`placement.solve.serving.place_serving`;
        `job` is its explicit job, `max_slowdown` must be None) and rendered as its `ServingResult`.

        No connection or lock is held during a solve; Reserves of one cluster solve in parallel, each on a
        snapshot with the devices of this process's other Reserves in flight occupied, and the claim
        transaction refuses devices claimed meanwhile (by another replica, or an update)."""
        if not (0 < ttl_s <= MAX_TTL_S):
            raise InputError(
                "request", [Problem("ttl_s", f"must be in (0, {MAX_TTL_S:g}] seconds, got {ttl_s}")]
            )
        if serving is not None and max_slowdown is not None:
            raise InputError(
                "request",
                [
                    Problem(
                        "max_slowdown",
                        f"{max_slowdown:g} with a serving deployment: place or wait is for training jobs; a "
                        "serving job is placed now (its load.tpot_bound_ms bounds its time per output token)",
                    )
                ],
            )
        if key:
            _check_id(key, "idempotency_key")
            earlier = self.store.by_key(cluster_id, key)
            if earlier is not None:
                return ReserveOutcome(self._same(earlier, fingerprint), True, 0)
        conflicts: list[str] = []
        solves = lost = 0  # solves run; claim transactions that found a device taken or the state moved
        while True:
            # in flight first, then the view: a Reserve of this process that finishes between is in one of them
            with self._lock:
                inflight = dict(self._inflight.get(cluster_id, {}))
            view = self.view(cluster_id)
            state = view.solve_state(self.clock(), job.name, inflight)
            solves += 1
            try:
                result: Any = (
                    place_serving(view.topology, state, serving, options)
                    if serving is not None
                    else decide(  # place or wait, with `_solve` (place, or a test's stand-in) placing
                        view.topology,
                        state,
                        job,
                        options,
                        max_slowdown=max_slowdown,
                        ends=lambda: self.expected_ends(cluster_id),
                        solve=self._solve,
                    )
                )
            except InfeasibleError:
                # devices of other Reserves in flight were left out: wait until they are claimed or given back
                if inflight and solves < 4 * self.max_attempts and self._settle(cluster_id, inflight):
                    continue
                raise
            if serving is None and result.status is SolveStatus.WAIT:
                raise Waiting(render(view.topology, result), result.verdict.reasons if result.verdict else [])
            if result.mapping is None:
                raise Aborted("the solve returned no mapping; retry the call")
            devices = tuple(view.topology.devices[i].id for i in result.mapping)
            if gone is not None and gone():
                raise Aborted("the caller went away before the devices were held; nothing is reserved")

            def still_wanted() -> (
                None
            ):  # just before COMMIT: a reservation nobody will hear of is not written
                if gone is not None and gone():
                    raise Aborted(
                        "the caller went away (cancelled, or its deadline passed) before the reservation "
                        "committed; it was rolled back and nothing is reserved"
                    )

            label = f"in-flight:{uuid.uuid4().hex}"
            with self._lock:
                mine = self._inflight.setdefault(cluster_id, {})
                clash = [d for d in devices if d in mine]
                if not clash:
                    mine.update(dict.fromkeys(devices, label))
            if clash:  # another Reserve of this process took them while we solved: solve again, no database
                conflicts.append(f"{len(clash)} device(s) went to another Reserve in flight, e.g. {clash[0]}")
                if solves >= 4 * self.max_attempts:
                    break
                continue
            try:
                res = self._reservation(cluster_id, job, view, devices, ttl_s, key, fingerprint)
                res = dataclasses.replace(res, payload=render(view.topology, result), shape=shape)
                stored, new = self.store.insert_reservation(
                    res, view.generation, view.record.version, self._write_now(), still_wanted
                )
            except Conflict as c:
                conflicts.append(c.reason)
                lost += 1
                if lost >= self.max_attempts:
                    break
                time.sleep(random.uniform(0, 0.005 * lost))  # replicas that collided drift apart
                continue
            finally:
                with self._settled:
                    for d in devices:
                        if mine.get(d) == label:
                            del mine[d]
                    self._settled.notify_all()
            self._notify()
            if not new:
                return ReserveOutcome(self._same(stored, fingerprint), True, solves, tuple(conflicts))
            return ReserveOutcome(stored, False, solves, tuple(conflicts))
        raise Aborted(
            f"the state of cluster {cluster_id!r} changed during each of {solves} solves "
            f"({'; '.join(conflicts[-2:])}); retry the call"
        )

    def _reservation(
        self,
        cluster_id: str,
        job: Job,
        view: StateView,
        devices: tuple[str, ...],
        ttl_s: float,
        key: str | None,
        fingerprint: str,
    ) -> Reservation:
        now = self.clock()
        return Reservation(
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
        )

    def _settle(self, cluster_id: str, inflight: dict[str, str]) -> bool:
        """Wait until none of `inflight` is still in flight (claimed or given back); False after _SETTLE_S."""
        deadline = time.monotonic() + _SETTLE_S
        with self._settled:
            while True:
                now_in = self._inflight.get(cluster_id, {})
                if not any(now_in.get(d) == lab for d, lab in inflight.items()):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._settled.wait(left)

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

    def commit(self, reservation_id: str, ttl_s: float | None = None) -> Reservation:
        """The job started: its held devices become its occupancy, every device checked again under the lock.
        `ttl_s`: a heartbeat (the committed reservation expires unless renewed within it); None: no expiry."""
        if ttl_s is not None:
            _check_ttl(ttl_s)
        return self._transition(reservation_id, "commit", ttl_s)

    def release(self, reservation_id: str) -> Reservation:
        return self._transition(reservation_id, "release")

    def renew(self, reservation_id: str, ttl_s: float | None = None) -> Reservation:
        """Move a held reservation's lease (default 60 s), or a committed one's heartbeat (default: its own
        heartbeat), to now + ttl_s."""
        if ttl_s is not None:
            _check_ttl(ttl_s)
        return self._transition(reservation_id, "renew", ttl_s)

    def _transition(self, reservation_id: str, action: str, ttl_s: float | None = None) -> Reservation:
        out = self.store.transition(reservation_id, action, self._write_now(), ttl_s)
        self._notify()
        return out

    def reservations(self, cluster_id: str | None = None, *, live_only: bool = False) -> list[Reservation]:
        """Reservations (of one cluster), oldest first; one past its lease or heartbeat reads EXPIRED."""
        if cluster_id is not None and self.store.last_seq(cluster_id) is None:
            raise NotFound(f"unknown cluster {cluster_id!r}")
        now = self.clock()  # before the rows: a lease read as ended had ended before they were read
        rows = self.store.reservations(cluster_id, ["HELD", "COMMITTED"] if live_only else None)
        out = [_effective(r, now) for r in rows]
        return [r for r in out if r.live(now)] if live_only else out

    def sweep(self) -> list[Reservation]:
        """Expire every lease and heartbeat that ran out (the server calls this periodically; every write to a
        cluster also does it first), and every `compact_every_s` compact (`compact`)."""
        out = self.store.sweep(self._write_now())
        now = self.clock()
        if now - self._pruned_at >= self.compact_every_s:
            self._pruned_at = now
            self.compact()
        if out:
            self._notify()
        return out

    def compact(self) -> tuple[int, int]:
        """Delete the ended reservations and the events past their retention; returns (reservations, events)."""
        now = self._write_now()
        ended = 0 if self.keep_ended_s is None else self.store.compact(now, self.keep_ended_s)
        events = 0
        if self.event_max_age_s is not None or self.event_max_count is not None:
            events = self.store.prune_events(now, self.event_max_age_s, self.event_max_count)
        return ended, events

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
    return dataclasses.replace(res, status=status, ended_at=res.expires_at)


def _check_ttl(ttl_s: float) -> None:
    if not (0 < ttl_s <= MAX_TTL_S):
        raise InputError("request", [Problem("ttl_s", f"must be in (0, {MAX_TTL_S:g}] seconds, got {ttl_s}")])


def _check_id(value: str, name: str) -> None:
    if not value or len(value) > 200 or any(c.isspace() for c in value):
        raise InputError(
            "request", [Problem(name, f"must be 1-200 characters without spaces, got {value!r}")]
        )
