"""The input of the multilevel mapping: the traffic hypergraph (vertices, merged label groups, terms priced
per level) and the tree of candidate domains with their room and whole-vertex slots per level.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from placement.cost.surrogate import collective_seconds, p2p_seconds
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.bound import level_paths

__all__ = ["Term", "Tree", "Vertices", "coarsen", "hyperedges", "label_groups"]


@dataclass(frozen=True)
class Term:
    """Traffic among a set of vertices (>= 2), with its surrogate cost when their lowest common level is each level."""

    verts: tuple[int, ...]
    cost: tuple[float, ...]


@dataclass(frozen=True)
class Vertices:
    """The hypergraph's vertices: given units, some merged into the groups of the label that saves most by
    staying on one host (``whole``: needs a host with `slot` free devices; `slot` is 0 when none merged)."""

    units: list[tuple[int, ...]]  # given-unit indices per vertex
    size: list[int]
    whole: list[bool]
    slot: int


def hyperedges(
    topology: Topology, state: ClusterState, traffic: Traffic, vertex_of: dict[int, int]
) -> list[Term]:
    """Groups and edges priced per level (v1 surrogate on the level paths), merged per vertex set."""
    paths = level_paths(topology, state)
    acc: dict[tuple[int, ...], list[float]] = {}
    priced: list[tuple[Sequence[int], list[float]]] = [
        (
            g.members,
            [collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, p) for p in paths],
        )
        for g in traffic.groups
    ]
    priced += [
        ((e.src, e.dst), [p2p_seconds(e.bytes, e.count, e.exposed, p) for p in paths]) for e in traffic.edges
    ]
    for ranks, costs in priced:
        vs = tuple(sorted({vertex_of[r] for r in ranks}))
        if len(vs) > 1:
            acc[vs] = [a + c for a, c in zip(acc.get(vs, [0.0] * len(paths)), costs, strict=True)]
    return [Term(k, tuple(v)) for k, v in sorted(acc.items())]


def label_groups(
    topology: Topology, state: ClusterState, traffic: Traffic, units: Sequence[tuple[int, ...]], host_max: int
) -> list[tuple[int, ...]]:
    """The groups of the label that saves the most per rank by staying on a host (TP in Megatron jobs; for
    explicit jobs, the components of a label's p2p edges), when they are disjoint, equal, unions of given
    units, larger than any of them and no larger than `host_max`; [] when no label qualifies."""
    paths = level_paths(topology, state)
    if len(paths) < 2:
        return []
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    by_label: dict[str, list[tuple[int, ...]]] = defaultdict(list)
    saving: dict[str, float] = defaultdict(float)
    for g in traffic.groups:
        by_label[g.label].append(tuple(sorted(g.members)))
        saving[g.label] += collective_seconds(
            g.kind, len(g.members), g.bytes, g.count, g.exposed, paths[1]
        ) - collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, paths[0])
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(x: tuple[str, int]) -> tuple[str, int]:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    edge_labels = {e.label for e in traffic.edges} - set(by_label)
    for e in traffic.edges:
        if e.label in edge_labels:
            a, b = find((e.label, e.src)), find((e.label, e.dst))
            parent[max(a, b)] = min(a, b)
            saving[e.label] += p2p_seconds(e.bytes, e.count, e.exposed, paths[1]) - p2p_seconds(
                e.bytes, e.count, e.exposed, paths[0]
            )
    comps: dict[tuple[str, int], list[int]] = defaultdict(list)
    for x in list(parent):
        comps[find(x)].append(x[1])
    for (label, _), ranks in sorted(comps.items()):
        if len(ranks) > 1:
            by_label[label].append(tuple(sorted(ranks)))
    best: tuple[float, str] | None = None
    biggest = max(len(u) for u in units)
    for label, groups in by_label.items():
        ranks = [r for g in groups for r in g]
        size = len(groups[0])
        if (
            len(set(ranks)) != len(ranks)
            or any(len(g) != size for g in groups)
            or not biggest < size <= host_max
        ):
            continue
        if any(sum(len(units[u]) for u in {unit_of[r] for r in g}) != size for g in groups):
            continue  # a group that cuts through a given unit
        per_rank = saving[label] / len(ranks)
        if per_rank > 0 and (best is None or per_rank > best[0]):
            best = (per_rank, label)
    return sorted(set(by_label[best[1]])) if best is not None else []


def coarsen(
    units: Sequence[tuple[int, ...]], chosen: list[tuple[int, ...]], slots_of: dict[int, int]
) -> Vertices:
    """Merge given units into the `chosen` groups, as many as hosts can hold whole (`slots_of`: free devices
    per host), in order; the rest stay as given. Units are never split."""
    sizes = [len(u) for u in units]  # mixed sizes: the largest units need a host slot like merged groups
    biggest, mixed = max(sizes), len(set(sizes)) > 1
    if not chosen:
        return Vertices(
            [(i,) for i in range(len(units))], sizes, [mixed and z == biggest for z in sizes], biggest * mixed
        )
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    size = len(chosen[0])
    whole = [
        tuple(sorted({unit_of[r] for r in g})) for g in chosen[: sum(f // size for f in slots_of.values())]
    ]
    merged = {u for us in whole for u in us}
    rest = [i for i in range(len(units)) if i not in merged]
    return Vertices(
        whole + [(i,) for i in rest],
        [size] * len(whole) + [sizes[i] for i in rest],
        [True] * len(whole) + [False] * len(rest),
        size,
    )


@dataclass
class Tree:
    """Candidate hosts and their domains: devices (`room`) and whole-vertex slots per domain of each level."""

    topology: Topology
    room: list[dict[int, int]]  # room[l][domain] > 0 only
    slots: list[dict[int, int]]
    kids: list[dict[int, list[int]]]  # kids[l][domain] -> child domains (level l-1) with room, sorted

    @staticmethod
    def of(topology: Topology, free: dict[int, int], slot: int) -> Tree:
        n_levels = len(topology.levels)
        room: list[dict[int, int]] = [defaultdict(int) for _ in range(n_levels)]
        slots: list[dict[int, int]] = [defaultdict(int) for _ in range(n_levels)]
        kids: list[dict[int, set[int]]] = [defaultdict(set) for _ in range(n_levels)]
        for h, r in free.items():
            if r <= 0:
                continue
            k = h
            for li in range(n_levels):
                if li > 0:
                    par = topology.parent[li - 1][k]
                    kids[li][par].add(k)
                    k = par
                room[li][k] += r
                slots[li][k] += r // slot if slot else 0
        return Tree(
            topology,
            [dict(r) for r in room],
            [dict(s) for s in slots],
            [{d: sorted(v) for d, v in ks.items()} for ks in kids],
        )

    def below(self, level: int, k: int, target: int) -> list[int]:
        """Domains of level `target` < `level` under domain k that have room."""
        cur = [k]
        for li in range(level, target, -1):
            cur = [c for d in cur for c in self.kids[li].get(d, ())]
        return cur

    def meet(self, level: int, a: int, b: int) -> int:
        """The level at which two domains of `level` share a domain."""
        while a != b:
            a, b, level = self.topology.parent[level][a], self.topology.parent[level][b], level + 1
        return level
