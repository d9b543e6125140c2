"""Candidate devices and rank units: the filtered, coarsened view every strategy starts from.

Candidates are usable devices of the right kind that no exclusion names. Units are rank sets that a required
level forces into one domain (``tp: node`` makes each TP group a unit at the node level), nested when several
labels are required at different levels.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.model.job import Job
from placement.model.slices import segment_ranks
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.model.validate import excluded_devices

__all__ = ["Unit", "candidate_devices", "required_units"]


def candidate_devices(topology: Topology, state: ClusterState, job: Job) -> list[int]:
    """Devices a rank of `job` may use, in cluster order (pinned devices included when usable)."""
    excl, _ = excluded_devices(topology, job)
    # `ClusterState.usable` for every device, as sets: the devices others occupy, the failed, the excluded
    blocked = {d for d, j in state.occupied.items() if j != job.name}
    blocked |= state.failed
    blocked |= excl
    kind = job.device_kind
    if kind is None:
        return [d for d in range(len(topology.devices)) if d not in blocked]
    return [d.index for d in topology.devices if d.kind == kind and d.index not in blocked]


@dataclass(frozen=True)
class Unit:
    """Ranks that must share one domain of `level` (0 = a host); `ranks` sorted."""

    level: int
    ranks: tuple[int, ...]


class _DSU:
    def __init__(self, n: int) -> None:
        self.p = list(range(n))

    def find(self, x: int) -> int:
        while self.p[x] != x:
            self.p[x] = self.p[self.p[x]]
            x = self.p[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.p[max(ra, rb)] = min(ra, rb)


def required_units(topology: Topology, job: Job, traffic: Traffic) -> dict[int, list[Unit]]:
    """Per level (only levels some label requires): the rank units forced into one domain of that level.

    A unit at level l also includes every unit at levels below l that it touches (requirements nest). A segment
    rule (`placement.model.job.SegmentRule`) makes each block of `segment_ranks` consecutive ranks a unit at its
    level.
    """
    req: dict[int, list[str]] = {}
    for label, lname in job.constraints.require.items():
        try:
            req.setdefault(topology.level_index(lname), []).append(label)
        except KeyError:
            continue  # reported by validate and the pre-checks
    seg, seg_size = job.constraints.segment, segment_ranks(topology, job)
    seg_level = -1
    if seg is not None and seg_size and job.ranks % seg_size == 0 and seg.level in topology.level_names:
        seg_level = topology.level_index(seg.level)
        req.setdefault(seg_level, [])
    out: dict[int, list[Unit]] = {}
    dsu = _DSU(job.ranks)
    for level in sorted(req):  # lower levels first: their unions carry upward
        labels = set(req[level])
        for g in traffic.groups:
            if g.label in labels:
                for m in g.members[1:]:
                    dsu.union(g.members[0], m)
        for e in traffic.edges:
            if e.label in labels:
                dsu.union(e.src, e.dst)
        if level == seg_level and seg_size:
            for first in range(0, job.ranks, seg_size):
                for r in range(first + 1, first + seg_size):
                    dsu.union(first, r)
        comp: dict[int, list[int]] = {}
        for r in range(job.ranks):
            comp.setdefault(dsu.find(r), []).append(r)
        out[level] = [Unit(level, tuple(v)) for _, v in sorted(comp.items()) if len(v) > 1 or True]
    return out
