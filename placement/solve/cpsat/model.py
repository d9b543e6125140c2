"""The coarse request the CP-SAT strategy works on: rank units to place whole, and traffic terms between them.

A term is the traffic between a set of units, priced by the linear level form of the surrogate: when the units'
lowest common domain is at level ``l`` it costs ``cost[l]``. Units come from required levels (exact), or by
choice from the job's heaviest label whose groups tile the ranks (TP groups, also in explicit jobs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.cost.paths import Path
from placement.cost.surrogate import collective_seconds, p2p_seconds
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.prepared import PreparedRequest
from placement.solve.units import required_units

__all__ = ["Term", "UnitModel", "Units", "build_model", "build_units", "level_paths_of_tiers"]


@dataclass
class Term:
    """Traffic between a set of units, with its cost when their lowest common domain is at each level."""

    units: tuple[int, ...]
    cost: list[float]
    peak: dict[str, list[float]] = field(
        default_factory=dict
    )  # per label: its costliest group's or edge's cost


@dataclass
class UnitModel:
    """The coarse request: units (rank tuples) to place on hosts, and the traffic terms between them."""

    units: list[tuple[int, ...]]
    terms: list[Term]
    constant: float
    exact: bool  # True when the linear form equals the surrogate on every mapping of whole units
    units_exact: bool  # True when units come only from required levels (no heuristic grouping)
    split_cost: float = (
        0.0  # extra cost of one unit whose ranks span hosts inside one level-1 domain (heuristic)
    )
    split_step: float = (
        0.0  # the least any split unit adds: its cheapest internal term's step from level 0 to 1
    )
    label_items: dict[str, int] = field(default_factory=dict)  # groups and edges per label that cross units


@dataclass(frozen=True)
class Units:
    """Rank units. `exact`: forced by required levels (no mapping splits them). `split`: chosen units of which not
    all fit whole in a host; the leaf model may split the rest inside one level-1 domain. `label`: the label that
    chose them, if any."""

    ranks: list[tuple[int, ...]]
    exact: bool
    split: bool = False
    label: str = ""


def level_paths_of_tiers(topology: Topology) -> list[Path]:
    """The level tiers as paths (no intra-node codes, no degradation): what the linear level form prices."""
    return [
        Path(lv.tier.bandwidth_gbps, lv.tier.latency_us, lv.name, li) for li, lv in enumerate(topology.levels)
    ]


def _label_components(request: PreparedRequest) -> dict[str, list[tuple[int, ...]]]:
    """Per label: the connected components of its groups and edges, when they tile every rank in equal sizes."""
    n = request.job.ranks
    out: dict[str, list[tuple[int, ...]]] = {}
    labels = {g.label for g in request.traffic.groups} | {e.label for e in request.traffic.edges}
    for label in sorted(labels):
        parent = list(range(n))

        def find(x: int, parent: list[int] = parent) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for g in request.traffic.groups:
            if g.label == label:
                a = find(g.members[0])
                for m in g.members[1:]:
                    b = find(m)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
                        a = min(a, b)
        for e in request.traffic.edges:
            if e.label == label:
                a, b = find(e.src), find(e.dst)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        comps: dict[int, list[int]] = {}
        for r in range(n):
            comps.setdefault(find(r), []).append(r)
        sizes = {len(c) for c in comps.values()}
        if len(sizes) == 1 and sizes.pop() > 1:
            out[label] = [tuple(c) for _, c in sorted(comps.items())]
    return out


def build_units(request: PreparedRequest) -> Units:
    """Units: required host-level groups (exact); else the components of the label that saves the most by staying
    inside a host, when they fit a host (TP groups in structured and explicit jobs alike); else single ranks."""
    topology, job, traffic, pool = request.topology, request.job, request.traffic, request.pool
    req = required_units(topology, job, traffic)
    if 0 in req:
        return Units([u.ranks for u in req[0]], True)
    singles = Units([(r,) for r in range(job.ranks)], True)
    if req or len(topology.levels) < 2 or topology.pair_paths is not None:
        return singles
    host_size = max((nt.devices for nt in topology.host_types), default=1)
    paths = level_paths_of_tiers(topology)
    best: tuple[float, str] | None = None
    comps = _label_components(request)
    for label, units in comps.items():
        size = len(units[0])
        if size > host_size:
            continue
        saving = sum(
            collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, paths[1])
            - collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, paths[0])
            for g in traffic.groups
            if g.label == label
        )
        saving += sum(
            p2p_seconds(e.bytes, e.count, e.exposed, paths[1])
            - p2p_seconds(e.bytes, e.count, e.exposed, paths[0])
            for e in traffic.edges
            if e.label == label
        )
        if saving > 0 and (best is None or saving / job.ranks > best[0]):
            best = (saving / job.ranks, label)
    if best is None:
        return singles
    units = comps[best[1]]
    size = len(units[0])
    whole = sum(len(d) // size for d in pool.devices.values())
    if whole >= len(units):
        return Units(units, False, False, best[1])
    if len(topology.levels) > 2 and not request.constrained:
        return Units(units, False, True, best[1])
    return singles


def _degradation_touches(topology: Topology, state: ClusterState, candidates: Sequence[int]) -> bool:
    """True when a degraded device, link or uplink can matter for a mapping onto `candidates`."""
    cset = set(candidates)
    if any(d in cset for d in state.device_slowdown):
        return True
    if any(a in cset and b in cset for a, b in list(state.pair_slowdown) + list(state.failed_pairs)):
        return True
    for up in list(state.uplink_slowdown) + list(state.failed_uplinks):
        col = topology.domain_column(up.level)
        if any(col[d] == up.domain for d in cset):
            return True
    return False


def build_model(
    topology: Topology,
    state: ClusterState,
    traffic: Traffic,
    units: list[tuple[int, ...]],
    units_exact: bool,
    candidates: Sequence[int] = (),
) -> UnitModel:
    """Sum the traffic into terms over units; `exact` says whether the level form equals the surrogate."""
    unit_of: dict[int, int] = {}
    for i, u in enumerate(units):
        for r in u:
            unit_of[r] = i
    paths = level_paths_of_tiers(topology)
    n_levels = len(paths)
    acc: dict[tuple[int, ...], list[float]] = {}
    constant = 0.0
    internal = [[0.0, 0.0] for _ in units]
    steps: list[float] = []
    peaks: dict[tuple[int, ...], dict[str, list[float]]] = {}
    label_items: dict[str, int] = {}
    priced: list[tuple[str, Sequence[int], list[float]]] = [
        (
            g.label,
            g.members,
            [collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, p) for p in paths],
        )
        for g in traffic.groups
    ]
    priced += [
        (e.label, (e.src, e.dst), [p2p_seconds(e.bytes, e.count, e.exposed, p) for p in paths])
        for e in traffic.edges
    ]
    for label, ranks, costs in priced:
        us = tuple(sorted({unit_of[r] for r in ranks}))
        if len(us) == 1:  # inside one unit: the same cost wherever the unit goes (whole in a host)
            constant += costs[0]
            if n_levels > 1:
                internal[us[0]][0] += costs[0]
                internal[us[0]][1] += costs[1]
                steps.append(costs[1] - costs[0])
            continue
        cur = acc.setdefault(us, [0.0] * n_levels)
        for li in range(n_levels):
            cur[li] += costs[li]
        peak = peaks.setdefault(us, {}).setdefault(label, [0.0] * n_levels)
        for li in range(n_levels):
            peak[li] = max(peak[li], costs[li])
        label_items[label] = label_items.get(label, 0) + 1
    t0 = topology.levels[0].tier
    # the linear form prices a term by its lowest common level alone: exact when going up never gets faster
    tiers = [lv.tier for lv in topology.levels]
    monotone = all(
        tiers[i + 1].bandwidth_gbps <= tiers[i].bandwidth_gbps
        and tiers[i + 1].latency_us >= tiers[i].latency_us
        for i in range(n_levels - 1)
    ) and all(tiers[i].bandwidth_gbps <= t0.bandwidth_gbps for i in range(n_levels))
    exact = (
        all(nt.matrix is None for nt in topology.host_types)
        and topology.rail_policy is None
        and monotone
        and topology.pair_paths is None  # a device graph is priced per pair, not per level
        and not _degradation_touches(topology, state, candidates)
    )
    split = (
        min((internal[u][1] - internal[u][0] for u in range(len(units))), default=0.0)
        if n_levels > 1
        else 0.0
    )
    return UnitModel(
        units,
        [Term(k, v, peaks[k]) for k, v in sorted(acc.items())],
        constant,
        exact,
        units_exact,
        max(0.0, split),
        max(0.0, min(steps, default=0.0)),
        label_items,
    )
