"""`StateView`: one cluster as of its change counter (topology, claims, slowdowns, extras), and the states it
hands out: the stored state (GetState), what Place by cluster_id runs on, and what a Reserve solves on.

A Reserve's state labels every live claim by its owner (`reservation:<id>`, `external:<job>`), never by a bare
job name, so that the solver, which treats devices occupied by the job's own name as its own (ClusterState's
`usable`), never takes another reservation's or another job's devices for free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.registry.model import Claim, ClaimKind, ClusterRecord, DeviceRow
from placement.registry.statedoc import build_state, state_document
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
    _cache: dict[str, tuple[ClusterState, float]] = field(default_factory=dict, repr=False)

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
            if c.kind is ClaimKind.HELD and c.live(now):
                assert c.reservation_id is not None and c.expires_at is not None
                out[d] = (c.reservation_id, c.expires_at)
        return out

    def document(self, now: float) -> dict[str, Any]:
        """The stored state as a native state document (holds not included)."""
        return state_document(self.rows(now), self.extras)

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
            ),
        )

    def solve_state(self, now: float, job_name: str, inflight: Mapping[str, str]) -> ClusterState:
        """What a Reserve of `job_name` solves on: every live claim occupied by its owner's label (none equal to
        the job name), and the devices of this process's Reserves in flight (`inflight`: device -> label)."""
        live = self.live(now)
        labels = {d: owner_label(c) for d, c in live.items() if c.kind is not ClaimKind.FAILED}
        if job_name in labels.values():
            labels = {d: _distinct(lab, job_name) for d, lab in labels.items()}
            state = self._build(now, labels)
        else:
            state = self._cached("reserve", now, lambda: self._build(now, labels))
        if not inflight:
            return state
        occupied = dict(state.occupied)
        for d, label in inflight.items():
            i = self.topology.device_index(d)
            if i is not None:
                occupied[i] = _distinct(label, job_name)
        return dataclasses.replace(state, occupied=occupied)

    def _build(self, now: float, labels: Mapping[str, str]) -> ClusterState:
        rows = {d: DeviceRow(slowdown=s) for d, s in self.slowdowns.items()}
        for d, c in self.live(now).items():
            if c.kind is ClaimKind.FAILED:
                rows[d] = DeviceRow(None, True, self.slowdowns.get(d))
        return build_state(self.topology, self.base, rows, self.extras, labels)
