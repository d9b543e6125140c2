"""A valid lower bound on the seconds per step of any mapping, from per-label capacity relaxations.

Groups of one label are disjoint rank sets, so at most ``sum_k floor(free_k / n)`` of them fit inside single
domains of a level; each label is bounded alone (interactions between labels are relaxed away).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from placement.cost import Path, collective_seconds, p2p_seconds
from placement.state import ClusterState
from placement.topology import Topology, intra_node_tier
from placement.traffic import Traffic

__all__ = ["BoundReport", "level_paths", "lower_bound", "lower_bounds"]


@dataclass(frozen=True)
class BoundReport:
    """A valid lower bound on the surrogate and the name of the argument that gives it."""

    value: float
    source: str


def lower_bounds(topology: Topology, state: ClusterState, traffic: Traffic, candidates: Sequence[int]) -> BoundReport:
    """The best analytic bound: the capacity relaxation (`lower_bound`)."""
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


def lower_bound(topology: Topology, state: ClusterState, traffic: Traffic, candidates: Sequence[int]) -> float:
    """Seconds per step no valid mapping onto `candidates` can beat (degradation and rails only add cost)."""
    paths = level_paths(topology, state)
    n_levels = len(topology.levels)
    free: list[list[int]] = []
    for li in range(n_levels):
        col = topology.domain_column(li)
        cnt: dict[int, int] = defaultdict(int)
        for d in candidates:
            cnt[col[d]] += 1
        free.append(sorted(cnt.values(), reverse=True))
    total = 0.0
    by_label: dict[tuple[str, int], list[list[float]]] = defaultdict(list)
    for g in traffic.groups:
        n = len(g.members)
        by_label[(g.label, n)].append([collective_seconds(g.kind, n, g.bytes, g.count, g.exposed, paths[li]) for li in range(n_levels)])
    disjoint: dict[tuple[str, int], bool] = {}
    seen: dict[tuple[str, int], set[int]] = defaultdict(set)
    for g in traffic.groups:
        key = (g.label, len(g.members))
        s = seen[key]
        disjoint[key] = disjoint.get(key, True) and not any(m in s for m in g.members)
        s.update(g.members)
    for key, costs in by_label.items():
        n = key[1]
        # capacity: how many disjoint n-sets fit inside single domains at each level (unbounded if overlapping)
        caps = [sum(f // n for f in free[li]) if disjoint[key] else len(costs) for li in range(n_levels)]
        caps[-1] = len(costs)
        total += _assign(costs, caps)
    # parallel edges (a->b twice, or a->b and b->a) share one rank pair: merge them before counting pairs
    pair_costs: dict[tuple[str, int, int], list[float]] = {}
    for e in traffic.edges:
        pair_key = (e.label, min(e.src, e.dst), max(e.src, e.dst))
        c = [p2p_seconds(e.bytes, e.count, e.exposed, paths[li]) for li in range(n_levels)]
        cur = pair_costs.setdefault(pair_key, [0.0] * n_levels)
        for li in range(n_levels):
            cur[li] += c[li]
    by_edge_label: dict[str, list[list[float]]] = defaultdict(list)
    forest: dict[str, bool] = {}
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (label, a, b), c in sorted(pair_costs.items()):
        by_edge_label[label].append(c)
        if label not in forest:
            parent.clear()
            forest[label] = True
        ra, rb = find(a), find(b)
        if ra == rb:
            forest[label] = False
        parent[ra] = rb
    for label, costs in by_edge_label.items():
        # edges of one label inside a domain of f ranks: at most f-1 when the label's graph is a forest (PP
        # chains), else at most f(f-1)/2.
        chain = forest[label]
        caps = [sum(max(f - 1, 0) if chain else f * (f - 1) // 2 for f in free[li]) for li in range(n_levels)]
        caps[-1] = len(costs)
        total += _assign(costs, caps)
    return total


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
