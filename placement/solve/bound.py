"""A valid lower bound on the seconds per step of any mapping, from per-label capacity relaxations.

Groups of one label are disjoint rank sets, so at most ``sum_k floor(free_k / n)`` of them fit inside single
domains of a level; each label is bounded alone (interactions between labels are relaxed away).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from placement.cost.paths import Path
from placement.cost.surrogate import collective_seconds, p2p_seconds
from placement.model.links import intra_node_tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic

__all__ = ["BoundReport", "level_paths", "lower_bound", "lower_bounds"]


@dataclass(frozen=True)
class BoundReport:
    """A valid lower bound on the surrogate and the name of the argument that gives it."""

    value: float
    source: str


def lower_bounds(
    topology: Topology, state: ClusterState, traffic: Traffic, candidates: Sequence[int]
) -> BoundReport:
    """The best analytic bound: the capacity relaxation (`lower_bound`), with the host-filling unit argument."""
    return BoundReport(lower_bound(topology, state, traffic, candidates), "capacity")


def level_paths(topology: Topology, state: ClusterState | None = None) -> list[Path]:
    """A path at least as fast as any a group whose lowest common domain is at each level can get (for bounds).

    Bandwidth and latency are bounded separately: level 0 takes the highest bandwidth and the lowest latency of
    the host tier and every intra-node code; a device graph (pair paths) takes them over all device pairs.
    """
    if topology.pair_paths is not None:
        pairs = [t for i, row in enumerate(topology.pair_paths) for j, t in enumerate(row) if i != j]
        bw = max((t.bandwidth_gbps for t in pairs), default=1.0)
        lat = min((t.latency_us for t in pairs), default=0.0)
        return [Path(bw, lat, lv.name, li) for li, lv in enumerate(topology.levels)]
    out: list[Path] = []
    for li, lv in enumerate(topology.levels):
        bw, lat = lv.tier.bandwidth_gbps, lv.tier.latency_us
        if li == 0:
            for nt in topology.host_types:
                if nt.matrix is None:
                    continue
                for a in range(nt.devices):
                    for b in range(nt.devices):
                        if a != b:
                            c = intra_node_tier(nt.matrix[a][b], topology.intra_node_tiers)
                            bw, lat = max(bw, c.bandwidth_gbps), min(lat, c.latency_us)
        out.append(Path(bw, lat, lv.name, li))
    return out


@dataclass
class _Population:
    """Items of one label bounded together: their costs per level, the capacity per level, the ranks of each item,
    and how many of them could sit inside one host given R ranks (`node_room`)."""

    label: str
    costs: list[list[float]]
    caps: list[int]
    ranks: list[tuple[int, ...]]
    size: int  # group size (0 for edges)
    disjoint: bool = True
    forest: bool = True

    def node_room(self, r: int) -> int:
        if self.size:
            return r // self.size if self.disjoint else len(self.costs)
        return max(r - 1, 0) if self.forest else r * (r - 1) // 2


def lower_bound(
    topology: Topology, state: ClusterState, traffic: Traffic, candidates: Sequence[int]
) -> float:
    """Seconds per step no valid mapping onto `candidates` can beat (degradation and rails only add cost).

    The larger of two relaxations: every label alone (`_populations`), and the same with the host-filling
    unit argument (`_joint_bound`).
    """
    paths = level_paths(topology, state)
    n_levels = len(topology.levels)
    free: list[list[int]] = []
    for li in range(n_levels):
        col = topology.domain_column(li)
        cnt: dict[int, int] = defaultdict(int)
        for d in candidates:
            cnt[col[d]] += 1
        free.append(sorted(cnt.values(), reverse=True))
    pops = _populations(traffic, paths, free, n_levels)
    plain = sum(_assign(p.costs, p.caps) for p in pops)
    return max(plain, _joint_bound(pops, free))


def _populations(
    traffic: Traffic, paths: list[Path], free: list[list[int]], n_levels: int
) -> list[_Population]:
    out: list[_Population] = []
    by_label: dict[tuple[str, int], list[tuple[list[float], tuple[int, ...]]]] = defaultdict(list)
    for g in traffic.groups:
        n = len(g.members)
        by_label[(g.label, n)].append(
            (
                [
                    collective_seconds(g.kind, n, g.bytes, g.count, g.exposed, paths[li])
                    for li in range(n_levels)
                ],
                tuple(g.members),
            )
        )
    disjoint: dict[tuple[str, int], bool] = {}
    seen: dict[tuple[str, int], set[int]] = defaultdict(set)
    for g in traffic.groups:
        key = (g.label, len(g.members))
        s = seen[key]
        disjoint[key] = disjoint.get(key, True) and not any(m in s for m in g.members)
        s.update(g.members)
    for key, items in by_label.items():
        n = key[1]
        # capacity: how many disjoint n-sets fit inside single domains at each level (unbounded if overlapping)
        caps = [sum(f // n for f in free[li]) if disjoint[key] else len(items) for li in range(n_levels)]
        caps[-1] = len(items)
        out.append(_Population(key[0], [c for c, _ in items], caps, [m for _, m in items], n, disjoint[key]))
    # parallel edges (a->b twice, or a->b and b->a) share one rank pair: merge them before counting pairs
    pair_costs: dict[tuple[str, int, int], list[float]] = {}
    for e in traffic.edges:
        pair_key = (e.label, min(e.src, e.dst), max(e.src, e.dst))
        c = [p2p_seconds(e.bytes, e.count, e.exposed, paths[li]) for li in range(n_levels)]
        cur = pair_costs.setdefault(pair_key, [0.0] * n_levels)
        for li in range(n_levels):
            cur[li] += c[li]
    by_edge_label: dict[str, list[tuple[list[float], tuple[int, ...]]]] = defaultdict(list)
    forest: dict[str, bool] = {}
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (label, a, b), c in sorted(pair_costs.items()):
        by_edge_label[label].append((c, (a, b)))
        if label not in forest:
            parent.clear()
            forest[label] = True
        ra, rb = find(a), find(b)
        if ra == rb:
            forest[label] = False
        parent[ra] = rb
    for label, items in by_edge_label.items():
        # edges of one label inside a domain of f ranks: at most f-1 when the label's graph is a forest (PP
        # chains), else at most f(f-1)/2.
        chain = forest[label]
        caps = [sum(max(f - 1, 0) if chain else f * (f - 1) // 2 for f in free[li]) for li in range(n_levels)]
        caps[-1] = len(items)
        out.append(_Population(label, [c for c, _ in items], caps, [m for _, m in items], 0, True, chain))
    return out


MAX_JOINT_UNITS = 512


def _joint_bound(pops: list[_Population], free: list[list[int]]) -> float:
    """The host-filling unit argument. Take a label A of disjoint groups of t ranks where no host has more than t
    usable devices (TP8 on 8-GPU hosts). A group of A that stays whole fills its host, so a host holding ranks of
    two A-groups holds only ranks of split ones, and an item of another label whose ranks span two A-groups can
    sit inside one host only if all its ranks are in split A-groups. With s split groups (at least the groups the
    whole hosts cannot take), A pays s groups above the host level and the spanning items of every other label
    get host room for only t*s ranks. The minimum over s is a valid bound; 0 when no label qualifies."""
    if not free[0]:
        return 0.0
    max_free = free[0][0]
    anchors = [
        p
        for p in pops
        if p.size >= 2 and p.disjoint and p.size >= max_free and len(p.costs) <= MAX_JOINT_UNITS
    ]
    best = 0.0
    for a in anchors:
        t, n_a = a.size, len(a.costs)
        group_of = {r: i for i, members in enumerate(a.ranks) for r in members}
        whole_hosts = sum(f // t for f in free[0])
        s_min = max(0, n_a - whole_hosts)
        fixed = 0.0
        spanning: list[tuple[_Population, _Fast]] = []
        for p in pops:
            if p is a:
                continue
            span = [
                i
                for i, rs in enumerate(p.ranks)
                if all(r in group_of for r in rs) and len({group_of[r] for r in rs}) > 1
            ]
            span_set = set(span)
            rest = [c for i, c in enumerate(p.costs) if i not in span_set]
            if rest:
                fixed += _assign(rest, p.caps)
            if span:
                spanning.append((p, _Fast([p.costs[i] for i in span])))
        anchor = _Fast(a.costs)
        low = math.inf
        for s in range(s_min, n_a + 1):
            r = t * s
            val = anchor.value([min(a.caps[0], n_a - s), *a.caps[1:]])
            for p, fast in spanning:
                val += fast.value([min(p.caps[0], p.node_room(r)), *p.caps[1:]])
            low = min(low, val)
        best = max(best, fixed + low)
    return best


class _Fast:
    """`_assign` for one set of items under many capacity vectors: savings sorted and summed once."""

    def __init__(self, costs: list[list[float]]) -> None:
        n_levels = len(costs[0]) if costs else 1
        self.n = len(costs)
        self.top = sum(c[-1] for c in costs)
        self.floor = sum(min(c) for c in costs)
        self.prefix: list[list[float]] = []
        for li in range(n_levels - 1):
            savings = sorted((c[li + 1] - c[li] for c in costs), reverse=True)
            acc = [0.0]
            for x in savings:
                acc.append(acc[-1] + max(x, 0.0))
            self.prefix.append(acc)

    def value(self, caps: list[int]) -> float:
        total = self.top
        for li, acc in enumerate(self.prefix):
            total -= acc[min(max(caps[li], 0), self.n)]
        return max(total, self.floor)


def _assign(costs: list[list[float]], caps: list[int]) -> float:
    """Min total cost giving each item a level, at most caps[l] items at levels <= l (greedy is exact when the
    items' cost differences are ordered alike, and a valid bound otherwise since we take the best savings)."""
    n_levels = len(caps)
    # the cheapest is to give the biggest savings the lowest levels; bound by independent per-level counting:
    # sum over items of cost at top, minus for each level l the largest `caps[l]` savings (cost[l+1]-cost[l]).
    total = sum(c[-1] for c in costs)
    for li in range(n_levels - 1):
        savings = sorted((c[li + 1] - c[li] for c in costs), reverse=True)
        k = min(caps[li], len(savings))
        total -= sum(s for s in savings[:k] if s > 0)
    # each item costs at least its cheapest level: a second valid bound, tighter when tiers are not monotone
    return max(total, sum(min(c) for c in costs))
