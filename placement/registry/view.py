"""`StateView`: one cluster as of its change counter (topology, claims, slowdowns, extras), the states it hands
out (the stored state for GetState, what Place by cluster_id runs on, what a Reserve solves on), and `advance`:
the same view moved along by the events since its seq, instead of a new read of the whole cluster.

Both carry the traffic of the running jobs whose shape the registry knows (`background`): committed reservations
that were reserved with their job, and outside jobs whose occupied entries gave a shape.

A Reserve's state labels every live claim by its owner (`reservation:<id>`, `external:<job>`), never by a bare
job name, so that the solver, which treats devices occupied by the job's own name as its own (ClusterState's
`usable`), never takes another reservation's or another job's devices for free.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.errors import InputError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry.model import Claim, ClaimKind, ClusterRecord, DeviceRow, Event
from placement.registry.statedoc import (
    RUNNING,
    Shaped,
    build_state,
    extras_of,
    running_under,
    shape_job,
    state_document,
)
from placement.registry.update import stored_rows

__all__ = ["StateView", "owner_label"]


def owner_label(claim: Claim) -> str:
    """The occupant a solve sees for a claimed device: the reservation id, or the outside job, prefixed."""
    if claim.reservation_id is not None:
        return f"reservation:{claim.reservation_id}"
    return f"external:{claim.job}"


def _distinct(label: str, name: str) -> str:
    """`label`, changed if it happens to equal the job name being placed (a job named like a label)."""
    return label if label != name else label + "#"


@dataclass
class StateView:
    """One cluster as of its change counter `record.last_seq`. Claims include leases and heartbeats that ran
    out since the read; every method takes `now` and leaves those out."""

    record: ClusterRecord
    topology: Topology
    base: ClusterState | None
    claims: dict[str, Claim]
    slowdowns: dict[str, float]
    extras: dict[str, Any]
    shapes: dict[str, tuple[str, tuple[str, ...], dict[str, Any]]] = field(default_factory=dict)
    """Committed reservations reserved with their job: id -> (job name, device of each rank, shape)."""
    _cache: dict[str, tuple[ClusterState, float]] = field(default_factory=dict, repr=False)
    _lab: _Labels | None = field(default=None, repr=False)
    _jobs: dict[int, tuple[Mapping[str, Any], Job | None]] = field(default_factory=dict, repr=False)

    @property
    def generation(self) -> int:
        return self.record.generation

    def live(self, now: float) -> dict[str, Claim]:
        return {d: c for d, c in self.claims.items() if c.live(now)}

    def _until(self, now: float) -> float:
        """When the next live claim runs out (a cached state is good until then)."""
        ends = [c.expires_at for c in self.claims.values() if c.expires_at is not None and c.expires_at > now]
        return min(ends, default=float("inf"))

    def rows(self, now: float) -> dict[str, DeviceRow]:
        """The stored state's rows: outside and committed occupancy by job name, failures, slowdowns."""
        return stored_rows(self.live(now), self.slowdowns)

    def holds(self, now: float) -> dict[str, tuple[str, float]]:
        """device -> (reservation id, lease end) of the live held reservations."""
        out = {}
        for d, c in self.claims.items():
            if c.kind is ClaimKind.HELD and c.live(now) and c.reservation_id is not None:
                out[d] = (c.reservation_id, c.expires_at if c.expires_at is not None else float("inf"))
        return out

    def document(self, now: float) -> dict[str, Any]:
        """The stored state as a native state document (holds not included); the running jobs with a known shape
        have occupied entries of their own with `shape` and `ranks`."""
        return state_document(self.rows(now), self.extras, self.committed_shapes(now))

    def _holds_all(self, devices: Any, now: float, owns: Any) -> bool:
        """Every device of `devices` has a live claim that `owns` accepts (read per device, not the whole view)."""
        for d in devices:
            c = self.claims.get(d)
            if c is None or not c.live(now) or not owns(c):
                return False
        return True

    def committed_shapes(self, now: float) -> list[Shaped]:
        """(job, shape, device of each rank) of the committed reservations that hold all their devices now."""
        out: list[Shaped] = []
        for rid, (job, devices, shape) in sorted(self.shapes.items()):
            if self._holds_all(
                devices, now, lambda c, rid=rid: c.reservation_id == rid and c.kind is ClaimKind.COMMITTED
            ):
                out.append((job, shape, devices))
        return out

    def _outside_shapes(self, now: float) -> list[Shaped]:
        """The outside jobs' shapes of the last full state whose job still holds every device of its ranks."""
        out: list[Shaped] = []
        for e in self.extras.get(RUNNING, []):
            job = e["job"]
            if self._holds_all(
                e["ranks"], now, lambda c, job=job: c.kind is ClaimKind.EXTERNAL and c.job == job
            ):
                out.append((job, e["shape"], tuple(e["ranks"])))
        return out

    def background(self, now: float) -> list[tuple[tuple[int, ...], Job]]:
        """The running jobs whose traffic the registry knows: (device index of each rank, job). A shape that no
        longer reads (or names devices the cluster lost) is left out. Each shape is read once (by the identity
        of its stored document, which views moved along by events share)."""
        if not self.shapes and not self.extras.get(RUNNING):
            return []  # no shape known: nothing to read (a Reserve's hot path)
        out: list[tuple[tuple[int, ...], Job]] = []
        jobs: dict[int, tuple[Mapping[str, Any], Job | None]] = {}
        for name, shape, ranks in [*self.committed_shapes(now), *self._outside_shapes(now)]:
            idx = [self.topology.device_index(d) for d in ranks]
            hit = self._jobs.get(id(shape))
            if hit is None or hit[0] is not shape:
                hit = (shape, _read_shape(name, shape, len(ranks)))
            jobs[id(shape)] = hit
            job = hit[1]
            if job is not None and None not in idx and job.ranks == len(idx):
                out.append((tuple(i for i in idx if i is not None), job))
        self._jobs = jobs
        return out

    def _cached(self, key: str, now: float, build: Any) -> ClusterState:
        hit = self._cache.get(key)
        if hit is not None and now < hit[1]:
            return hit[0]
        state: ClusterState = build()
        self._cache[key] = (state, self._until(now))
        return state

    def state(self, now: float) -> ClusterState:
        """What Place and Compare by cluster_id run on: the stored state, held devices occupied by
        ``reservation:<id>`` (committed ones by their job name, so Evaluate and Repair of a running job work)."""
        return self._cached(
            "place",
            now,
            lambda: build_state(
                self.topology,
                self.base,
                self.rows(now),
                self.extras,
                {d: f"reservation:{rid}" for d, (rid, _) in self.holds(now).items()},
                self.background(now),
            ),
        )

    def solve_state(self, now: float, job_name: str, inflight: Mapping[str, str]) -> ClusterState:
        """What a Reserve of `job_name` solves on: every live claim occupied by its owner's label (none equal to
        the job name), and the devices of this process's Reserves in flight (`inflight`: device -> label)."""
        lab = self._labels()
        occupied: Mapping[int, str] = lab.occupied
        expired = [i for i, end in lab.ends.items() if end <= now]
        if expired or inflight or job_name in lab.names:
            occ = dict(occupied)
            for i in expired:
                del occ[i]
            for d, label in inflight.items():
                j = self.topology.device_index(d)
                if j is not None:
                    occ[j] = label
            if job_name in lab.names or job_name in inflight.values():
                occ = {i: _distinct(label, job_name) for i, label in occ.items()}
            occupied = occ
        st = self.static_state()
        return ClusterState(
            occupied,
            lab.failed,
            lab.slow,
            st.failed_pairs,
            st.pair_slowdown,
            st.failed_uplinks,
            st.uplink_slowdown,
            st.fault_domains,
            running_under(occupied, self.background(now)),  # each under its owner's label
            st.link_load,
        )

    def _labels(self) -> _Labels:
        """Every claim by device index, labelled by its owner (built once per view, or patched by `advance`)."""
        if self._lab is None:
            self._lab = _Labels.build(self.topology, self.claims, self.slowdowns)
        return self._lab

    def static_state(self) -> ClusterState:
        """The cluster's links and fault domains without any claim: what a job's references are checked on."""
        return self._cached(
            "static", float("-inf"), lambda: build_state(self.topology, self.base, {}, self.extras)
        )

    def advance(self, events: list[Event]) -> StateView | None:
        """This view after `events` (the next ones, in order), or None when they cannot be applied (a gap, a new
        cluster version): the caller reads a snapshot then. Event payloads carry every change as stored."""
        if not events or events[0].seq != self.record.last_seq + 1:
            return None
        claims, slow, extras = dict(self.claims), dict(self.slowdowns), self.extras
        shapes = dict(self.shapes)
        touched: set[str] | None = set()
        for ev in events:
            p = ev.payload
            if ev.kind == "CLUSTER_PUT":
                return None
            if ev.kind in ("RESERVED", "COMMITTED", "RENEWED"):
                committed = ev.kind == "COMMITTED" or p["status"] == "COMMITTED"
                kind = ClaimKind.COMMITTED if committed else ClaimKind.HELD
                end = None if committed and p.get("heartbeat_s") is None else float(p["expires_at"])
                for d in p["devices"]:
                    claims[d] = Claim(kind, p["id"], p["job"], end)
                if isinstance(p.get("shape"), dict):
                    shapes[p["id"]] = (p["job"], tuple(p["devices"]), p["shape"])
                if touched is not None:
                    touched.update(p["devices"])
            elif ev.kind in ("RELEASED", "EXPIRED", "REVOKED"):
                for d in p["devices"]:
                    if claims.get(d, Claim(ClaimKind.FAILED)).reservation_id == p["id"]:
                        del claims[d]
                shapes.pop(p["id"], None)
                if touched is not None:
                    touched.update(p["devices"])
            elif ev.kind == "STATE_DIFF":
                changed = _apply_diff(claims, slow, p["diff"])
                if touched is not None:
                    touched.update(changed)
            elif ev.kind == "STATE_REPLACED":
                touched = None
                st = p["state"]
                claims = {d: c for d, c in claims.items() if c.registry_owned}
                for occ in st.get("occupied", []):
                    for d in occ["devices"]:
                        claims.setdefault(d, Claim(ClaimKind.EXTERNAL, job=occ["job"]))
                for d in st.get("failed", []):
                    claims[d] = Claim(ClaimKind.FAILED)
                slow = {g["device"]: float(g["slowdown"]) for g in st.get("degraded", [])}
                extras = extras_of(st)
            else:
                return None
        last = events[-1]
        record = dataclasses.replace(self.record, generation=last.generation, last_seq=last.seq)
        view = StateView(record, self.topology, self.base, claims, slow, extras, shapes)
        view._jobs = self._jobs
        if extras is self.extras and "static" in self._cache:
            view._cache["static"] = self._cache["static"]
        if touched is not None and self._lab is not None:
            view._lab = self._lab.patched(self.topology, touched, claims, slow)
        return view


def _read_shape(name: str, shape: Mapping[str, Any], ranks: int) -> Job | None:
    try:
        return shape_job(name, shape, ranks, f"shape of {name}")
    except InputError:
        return None  # stored by an older reader: the job runs, its traffic is not priced


def _apply_diff(claims: dict[str, Claim], slow: dict[str, float], diff: Mapping[str, Any]) -> set[str]:
    """An event's diff (the change as stored: outside claims and slowdowns only), in its order; returns the
    devices it touched."""
    for d in diff.get("free", []):
        if d in claims and claims[d].kind is ClaimKind.EXTERNAL:
            del claims[d]
    for d in diff.get("recover", []):
        if d in claims and claims[d].kind is ClaimKind.FAILED:
            del claims[d]
        slow.pop(d, None)
    for occ in diff.get("occupy", []):
        for d in occ["devices"]:
            claims[d] = Claim(ClaimKind.EXTERNAL, job=occ["job"])
    for d in diff.get("fail", []):
        claims[d] = Claim(ClaimKind.FAILED)
    for g in diff.get("degrade", []):
        slow[g["device"]] = float(g["slowdown"])
    touched = {*diff.get("free", []), *diff.get("recover", []), *diff.get("fail", [])}
    touched.update(d for occ in diff.get("occupy", []) for d in occ["devices"])
    touched.update(g["device"] for g in diff.get("degrade", []))
    return touched


@dataclass
class _Labels:
    """A view's claims by device index: owner labels of the occupying claims (ran-out ones included), their
    ends, the label counts, failed devices and slowdowns; what `solve_state` assembles a state from."""

    occupied: dict[int, str]
    ends: dict[int, float]
    names: Counter[str]
    failed: frozenset[int]
    slow: dict[int, float]

    @staticmethod
    def build(topo: Topology, claims: Mapping[str, Claim], slow: Mapping[str, float]) -> _Labels:
        lab = _Labels({}, {}, Counter(), frozenset(), {})
        return lab.patched(topo, set(claims) | set(slow), claims, slow)

    def patched(
        self, topo: Topology, devices: set[str], claims: Mapping[str, Claim], slow: Mapping[str, float]
    ) -> _Labels:
        """A copy with the entries of `devices` taken from `claims` and `slow` again."""
        occ, ends, names = dict(self.occupied), dict(self.ends), Counter(self.names)
        failed, sl = set(self.failed), dict(self.slow)
        index = topo.device_index
        for d in devices:
            i = index(d)
            if i is None:
                continue  # a device of an older cluster version
            old = occ.pop(i, None)
            if old is not None:
                names[old] -= 1
                if names[old] <= 0:
                    del names[old]
            ends.pop(i, None)
            failed.discard(i)
            sl.pop(i, None)
            c = claims.get(d)
            if c is not None and c.kind is ClaimKind.FAILED:
                failed.add(i)
            elif c is not None:
                label = owner_label(c)
                occ[i] = label
                names[label] += 1
                if c.expires_at is not None:
                    ends[i] = c.expires_at
            if d in slow and slow[d] > 1.0:
                sl[i] = slow[d]
        return _Labels(occ, ends, names, frozenset(failed), sl)
