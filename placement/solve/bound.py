"""Valid lower bounds: `comm_bound` on the evaluator's exposed communication (what `place` reports, its gap and
OPTIMAL), from capacity relaxations joined across labels; `lower_bounds` on the v1 surrogate (the CP-SAT models').

Groups of one label are disjoint rank sets, so at most ``sum_k floor(free_k / n)`` of them fit inside single
domains of a level. `comm_bound` joins the labels by case analysis (crossings, whole or split TP groups, host
rooms shared by TP, PP and DP members, the stages packed into the domains together): see its docstring. Its per-group prices mirror `placement.cost.collectives` (ring, tree, NIC and tier rates, NCCL's
tree channel cap) for the Simple protocol and take the model's own `collective_floor` for LL, LL128, NVLS and
NVLSTree, so a change of the step model's algorithms must be mirrored in `_Links.group`. Sharing (max-min) only
slows a group below its time alone and never carries more than a link's capacity, which is all the bound uses.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from placement.cost.collectives import TREE_EFFICIENCY, Fabric, collective_floor
from placement.cost.compute import device_kind, gradient_bytes, step_compute, tree_channel_gbps
from placement.cost.paths import Path
from placement.cost.step import dp_exposed, straggler_seconds
from placement.cost.surrogate import collective_seconds, p2p_seconds
from placement.model.job import CollectiveKind, Job
from placement.model.links import intra_node_tier
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, rank_components

__all__ = ["BoundReport", "CommBound", "comm_bound", "level_paths", "lower_bound", "lower_bounds"]


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
MAX_INSIDE_SUBSETS = 4096
"""`_Links` prices a group inside a host with a matrix exactly over at most this many device sets."""


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


# ---- the bound on what is reported: the evaluator's exposed communication (the step model, `placement.cost.step`) --------------------


@dataclass(frozen=True)
class CommBound:
    """A valid lower bound on the evaluator's exposed communication per step (`CostReport.comm_seconds`) of any
    valid mapping onto the candidates: the sum of one bound per phase, each naming the argument that gives it."""

    value: float
    by_label: dict[str, float]
    argument: dict[str, str]
    step: float = 0.0
    """A valid lower bound on the step seconds (compute on the fastest kind, its bubble, and the phases)."""

    @property
    def source(self) -> str:
        """The phase that contributes most and its argument, e.g. ``dp: capacity at spine``."""
        if not self.by_label:
            return "none"
        lab = max(self.by_label, key=lambda k: (self.by_label[k], k))
        return f"{lab}: {self.argument[lab]}"


class DpOverlap(NamedTuple):
    """What the DP reduce's exposure depends on besides its length (`placement.cost.step.dp_exposed`): the
    longest backward of one micro-batch, the gradient bytes, the distributed optimizer and the DP size."""

    backward: float
    gradient_bytes: float
    distributed: bool
    dp: int


class _Links:
    """The fastest links any mapping onto the candidates can get, per level (upper bounds on bandwidth, lower
    bounds on latency), from the cost model's own fabric."""

    def __init__(self, topology: Topology, state: ClusterState, candidates: Sequence[int]) -> None:
        fab = Fabric(topology, state)
        self.fabric = fab
        self.graph = topology.pair_paths is not None
        self.paths = level_paths(topology, state)
        hosts = sorted({topology.devices[d].host_index for d in candidates})
        # hosts with an intra-node matrix, each free device set once: a group inside one is priced exactly
        by_host: dict[int, list[int]] = defaultdict(list)
        for d in candidates:
            by_host[topology.devices[d].host_index].append(d)
        self.matrix_hosts: dict[tuple[int, tuple[int, ...]], list[int]] | None = None
        if hosts and all(topology.host_types[h].matrix is not None for h in hosts):
            self.matrix_hosts = {}
            slow = state.device_slowdown
            slow_pairs = {
                topology.devices[a].host_index for a, _ in [*state.pair_slowdown, *state.failed_pairs]
            }
            for h, ds in by_host.items():
                ds = sorted(ds)
                alike = h not in slow_pairs and not any(d in slow for d in ds)
                key = (
                    (id(topology.host_types[h]), tuple(fab.local_of[d] for d in ds)) if alike else (-1, (h,))
                )
                self.matrix_hosts.setdefault(key, ds)
        self._inside_cache: dict[tuple[CollectiveKind, int, float], float] = {}
        per_host = Counter(topology.devices[d].host_index for d in candidates)
        self.max_free = max(per_host.values(), default=0)
        self.host_free = per_host
        # NCCL generations and NVLink SHARP of the candidate hosts: which protocols and NVLS the model may use
        self.gens = {fab.generation(h) for h in hosts}
        self.nvls = max((fab.nvls_efficiency(h) for h in hosts), default=0.0)
        # a group whose lowest common level is L: inside one NVLink domain (`nvl_inside`: over NVLink, one NCCL
        # node), across several (`nvl_across`: NCCL's nodes are the domains); up to L every level has SHARP
        self.nvl_inside = list(fab.nvl_inside)
        self.nvl_across = [x is not None for x in fab.nvl_level]
        self.sharp = [
            li >= 1 and all(lv.sharp for lv in topology.levels[1 : li + 1])
            for li in range(len(topology.levels))
        ]
        self.host_dom = [
            {h: topology.domain_column(li)[topology.devices_in_domain[0][h][0]] for h in hosts}
            for li in range(len(topology.levels))
        ]
        self._room_cache: dict[int, list[list[int]]] = {}
        lv = topology.levels
        self.lat = [x.tier.latency_us for x in lv]
        self.tier_min = list(fab.tier_min)
        self.nic = max((fab.nic_gbps[h] for h in hosts), default=0.0) if len(lv) > 1 else 0.0
        self.nics = max((fab.nics[h] for h in hosts), default=1) if len(lv) > 1 else 1
        self.dev_link = max((fab.dev_link[h] for h in hosts), default=0.0) if len(lv) > 1 else 0.0
        # the NICs every crossing must pass, unless NVLink domains span hosts (their traffic leaves the NICs alone)
        self.host_out = (
            sum(fab.caps[fab.base[0] + 2 * h] for h in hosts)
            if len(lv) > 1 and not any(x.nvlink for x in lv)
            else math.inf
        )
        # inside a host: a ring's bandwidth is at most a device's summed links (packed rings share them)
        tier0 = lv[0].tier
        ring_bw, pair_bw, lat0 = 0.0, 0.0, tier0.latency_us
        for nt in {id(topology.host_types[h]): topology.host_types[h] for h in hosts}.values():
            if nt.matrix is None:
                ring_bw, pair_bw = max(ring_bw, tier0.bandwidth_gbps), max(pair_bw, tier0.bandwidth_gbps)
                continue
            for a in range(nt.devices):
                row = [
                    intra_node_tier(nt.matrix[a][b], topology.intra_node_tiers)
                    for b in range(nt.devices)
                    if b != a
                ]
                ring_bw = max(ring_bw, sum(t.bandwidth_gbps for t in row))
                pair_bw = max(pair_bw, max((t.bandwidth_gbps for t in row), default=0.0))
                lat0 = min(lat0, min((t.latency_us for t in row), default=lat0))
        self.ring0 = ring_bw or tier0.bandwidth_gbps
        self.pair0 = pair_bw or tier0.bandwidth_gbps
        self.lat0 = lat0
        # NCCL's tree channel cap (bus GB/s per channel for 2 and for more hosts), the largest any candidate host
        # type has; None: some host type has no cap (its trees are priced by links alone)
        rows = [tree_channel_gbps(topology.host_types[h].kind, topology) for h in hosts]
        self.tree_cap: tuple[float, float] | None = (
            None
            if not rows or any(r is None for r in rows)
            else (max(r[1] for r in rows if r), max(r[2] for r in rows if r))
        )

    def _rooms(self, unit: int) -> list[list[int]]:
        """rooms[l][j]: the most hosts under one domain of level l that can each hold j members or more (a host
        with f free devices holds ``f // unit``); rooms[l][0] is unused."""
        hit = self._room_cache.get(unit)
        if hit is not None:
            return hit
        top = max((f // unit for f in self.host_free.values()), default=0)
        out: list[list[int]] = []
        for col in self.host_dom:
            per: dict[int, list[int]] = defaultdict(lambda: [0] * (top + 2))
            for h, f in self.host_free.items():
                per[col[h]][f // unit] += 1
            best = [0] * (top + 1)
            for cnt in per.values():
                acc = 0
                for j in range(top, 0, -1):
                    acc += cnt[j]
                    best[j] = max(best[j], acc)
            out.append(best)
        self._room_cache[unit] = out
        return out

    def flow(self, level: int, g: int) -> float:
        """Bytes/s at most out of a host holding `g` members of a group whose lowest common level is `level` (inside
        an NVLink domain: over the devices' NVLinks, not the NICs)."""
        if self.nvl_inside[level]:
            return min(self.dev_link, self.tier_min[level]) * g * 1e9
        return min(self.nic * min(g, self.nics), self.dev_link * g, self.tier_min[level] * g) * 1e9

    def group(
        self, kind: CollectiveKind, n: int, size: float, level: int, unit: int = 1, gmax: int | None = None
    ) -> float:
        """Seconds at least of one collective over `n` members whose lowest common level is `level`, alone, when a
        host with f free devices holds at most ``f // unit`` members (`unit` 1: any; t: whole groups of t), and
        its host with the fewest members holds at most `gmax`."""
        if n <= 1 or size <= 0:
            return 0.0
        vol, steps = _volume(kind, n, size)
        if self.graph:
            p = self.paths[level]
            lat, bw = p.latency_us * 1e-6, p.bandwidth_gbps * 1e9
            return min(
                steps * lat + vol / bw,
                self._protocols(kind, n, size, 1, lat, bw, math.inf),
                self._protocols(kind, n, size, 2, lat, bw, bw, level),
            )
        if level > 0 and (self.nvl_inside[level] or self.nvl_across[level]):
            # NCCL's nodes are NVLink domains: inside one, the one-node floor at each device's NVLink rate; across
            # several, the floor of two nodes with unbounded NICs (fewer nodes and faster links only lower it)
            a = self.lat[level] * 1e-6
            if self.nvl_inside[level]:
                return collective_floor(
                    kind, n, size, 1, a, self.flow(level, 1), math.inf, generations=self.gens, nvls=self.nvls
                )
            # the NICs between the domains: the domain with the fewest members (n // 2 at most) sends the
            # cheapest algorithm's bytes out, each member's host at most its tier's rate per member
            rate = min(self.dev_link, self.tier_min[level]) * (n // 2) * 1e9
            out = self.min_nic_bytes(kind, n, size) / rate if rate > 0 else math.inf
            return max(
                out,
                collective_floor(
                    kind, n, size, 2, a, math.inf, math.inf, generations=self.gens, nvls=self.nvls
                ),
            )
        rooms = self._rooms(unit)
        cap = len(rooms[0]) - 1  # the most members one host holds
        if level == 0:
            if n > cap or (gmax is not None and n > gmax):
                return math.inf
            exact = self._inside_host(kind, n, size)
            if exact is not None:
                return exact
            lat0, ring0 = self.lat0 * 1e-6, self.ring0 * 1e9
            # the Simple ring priced here; LL, LL128 and NVLS by the model's own floor
            return min(
                steps * lat0 + vol / ring0,
                self._protocols(kind, n, size, 1, lat0, ring0, math.inf),
            )
        a = self.lat[level] * 1e-6
        best = math.inf
        if cap < 1:
            return math.inf
        h_min = max(2, -(-n // cap))
        room = rooms[level]
        for h in range(h_min, n + 1):
            # the host with the fewest members has at most g: n // h, and h hosts of one domain must each hold g
            g = n // h if gmax is None else min(n // h, gmax)
            while g >= 1 and (g >= len(room) or room[g] < h):
                g -= 1
            if g < 1:
                break
            if n > g + (h - 1) * cap:
                continue  # the other h - 1 hosts, each at most `cap`, cannot hold the rest with one at g
            f = self.flow(level, g)
            if f <= 0:
                continue
            # some host holds two members or more when n > h: its ring (at most `ring0`) carries the ring's volume
            # and the tree's chain
            intra = self.ring0 * 1e9 if n > h else math.inf
            if kind is CollectiveKind.ALL_TO_ALL:
                bmin = min(self.nic, self.dev_link, self.tier_min[level]) * 1e9
                t = (n - 1) * a + size * (n - g) / n / bmin
            else:
                t = steps * a + max(vol / f, vol / intra)
                if kind is CollectiveKind.ALL_REDUCE:
                    tree = max(
                        (size if h == 2 else 2 * size) / TREE_EFFICIENCY / f,
                        2 * size / (intra * TREE_EFFICIENCY),
                    )
                    if self.tree_cap is not None:
                        # one channel per NIC a host uses, at most the fewest members any host has
                        channels = min(g, self.nics)
                        tree = max(tree, size / (channels * self.tree_cap[0 if h == 2 else 1] / 2 * 1e9))
                    lat = 2 * (math.ceil(math.log2(h)) * a + (-(-n // h) - 1) * self.lat0 * 1e-6)
                    t = min(t, lat + tree)
                # the Simple ring and tree priced above; LL, LL128 and NVLSTree by the model's own floor
                t = min(t, self._protocols(kind, n, size, h, a, math.inf, f, level, self.flow(level, 1)))
            best = min(best, t)
        return best

    def _inside_host(self, kind: CollectiveKind, n: int, size: float) -> float | None:
        """On hosts with an intra-node matrix (DGX-1's cube mesh, PCIe pairs), the least seconds of one collective
        of `n` members inside one host: the model's own plan (`Fabric.plan_group`, its best ring over the matrix
        and every protocol) alone, over every `n` of every candidate host's free devices. None: some host has no
        matrix, or more than `MAX_INSIDE_SUBSETS` sets to price (the ring floor is used instead)."""
        if self.matrix_hosts is None:
            return None
        key = (kind, n, size)
        if key in self._inside_cache:
            return self._inside_cache[key]
        sets = sum(math.comb(len(ds), n) for ds in self.matrix_hosts.values())
        if sets > MAX_INSIDE_SUBSETS:
            return None
        fab = self.fabric
        best = min(
            (
                fab.alone(fab.plan_group(kind, list(sub), size))
                for ds in self.matrix_hosts.values()
                for sub in itertools.combinations(ds, n)
            ),
            default=math.inf,
        )
        self._inside_cache[key] = best
        return best

    def _protocols(
        self,
        kind: CollectiveKind,
        n: int,
        size: float,
        hosts: int,
        lat: float,
        own: float,
        host: float,
        level: int = 0,
        device: float = math.inf,
    ) -> float:
        """The model's own floor (`collective_floor`) over every protocol but the Simple ring and tree, on the
        candidate hosts' generations and NVLink SHARP; across hosts at `level`, NVLS in an NVLink domain (each
        device at most `device` bytes/s) and CollNet where the levels have SHARP."""
        return collective_floor(
            kind,
            n,
            size,
            hosts,
            lat,
            own,
            host,
            generations=self.gens,
            nvls=self.nvls,
            simple=False,
            nvlink=self.nvl_inside[level],
            sharp=self.sharp[level],
            device_bytes_per_s=device,
        )

    def edge(self, size: float, level: int) -> float:
        if size <= 0:
            return 0.0
        if self.graph:
            p = self.paths[level]
            return p.latency_us * 1e-6 + size / (p.bandwidth_gbps * 1e9)
        if level == 0:
            return self.lat0 * 1e-6 + size / (self.pair0 * 1e9)
        bw = (
            min(self.dev_link, self.tier_min[level])
            if self.nvl_inside[level]
            else min(self.nic, self.dev_link, self.tier_min[level])
        )
        return self.lat[level] * 1e-6 + size / (bw * 1e9) if bw > 0 else math.inf

    def min_nic_bytes(self, kind: CollectiveKind, n: int, size: float) -> float:
        """Bytes at least out of every host of a group of `n` that spans hosts (the cheapest algorithm's)."""
        if kind is CollectiveKind.ALL_TO_ALL:
            return 0.0
        vol, _ = _volume(kind, n, size)
        if kind is CollectiveKind.ALL_REDUCE:
            return min(vol, size)  # NVLSTree on 2 hosts: S out of each
        return vol


def comm_bound(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    candidates: Sequence[int],
    incumbent: tuple[float, float] | None = None,
    deadline: float | None = None,
) -> CommBound:
    """A lower bound on the exposed communication of every valid mapping of `job` onto `candidates` (the step model,
    `placement.cost.step`).

    Phases add up, and each label is first bounded alone. A phase lasts as long as its slowest group (contention only
    slows a group), so for each population of alike groups (label, kind, size, bytes): if only c of its k disjoint
    groups fit inside single domains of level l (``sum_k floor(free_k / n)``), one group at least spans a domain
    above l: the phase takes at least that group's fastest time at the lowest level where all k fit
    (``capacity``). Each group's fastest time is the best intra-host ring (a device's summed links) or, across
    hosts, the cheapest algorithm on the fastest NIC and tier the level allows. Groups forced to span hosts load
    every host they use with at least their cheapest algorithm's bytes: the phase takes at least their total over
    every candidate host's NIC capacity (``nic-floor``). Edges (PP sends) likewise, a forest of them holding at
    most f - 1 edges inside a domain of f devices. The DP reduce's exposure is `placement.cost.step.dp_exposed`
    of its bound behind the longest backward the candidates' kinds give (it falls as the backward grows). A group across hosts uses at most as many hosts as one
    domain of its level has, and runs at the pace of its host with the fewest members.

    The labels are joined by cases, each a valid bound, the least over the cases taken:

    - *crossings* (`_crossings`): a set of labels whose components (TP x PP pipelines, TP rings of p2p sends, the
      whole job) cannot stay inside the domains of a level has an item above it; enumerated jointly
      (`_search`), and with the *every-item* branch: if no item of the set leaves a domain of level l, an item
      of another label whose components hold more ranks than a domain of level l has free spans l, and so does
      every such item (a DP group meets its stage's TP groups: a stage larger than a leaf);
    - *whole TP groups* (label A of disjoint groups): either every A-group is whole on a host, and then a host
      with f devices holds at most f // t members of a group meeting distinct A-groups, the hosts with room for G
      A-groups bound how many DP classes (a stage's TP groups) can have G members per host inside a domain
      (``host-room``), and the classes, which share hosts, level and fewest members per host, are packed
      together into the domains' rooms (`_class_packing`); or some A-group is split, sharpened per DP group by
      its fewest members on a host G: a piece of s ranks needs s * G devices on its host, so the hosts with room
      for large pieces bound how many A-groups keep them (`_split_room`).

    Inside a host with an intra-node matrix a group is priced by the model's own plan over every set of free
    devices (`_Links._inside_host`); across NVLink domains, by the NICs of the domain with the fewest members.

    `incumbent`: (exposed comm, step) of a valid mapping already found; the arguments stop once the bound meets
    it in both (it cannot exceed it), which leaves the bound returned unchanged. `deadline` (`time.perf_counter`;
    None in deterministic mode): past it, only the whole job's crossing is enumerated and the host-filling
    arguments are skipped: a weaker bound, still valid (every argument left out only raises it).
    """
    links = _Links(topology, state, candidates)
    n_levels = len(topology.levels)
    free: list[list[int]] = []
    for li in range(n_levels):
        col = topology.domain_column(li)
        free.append(sorted(Counter(col[d] for d in candidates).values(), reverse=True))
    pops = _group_pops(traffic, links, free) + _edge_pops(traffic, links, free)
    backward = _dp_overlap(topology, job, candidates)
    names = [lv.name for lv in topology.levels]
    compute = _fastest_compute(topology, job, candidates)
    late = deadline is not None and time.perf_counter() >= deadline
    crossings, alls = _crossings(job.ranks, pops, free, job.ranks, whole_job_only=late)
    base_rows = [[t if li >= p.low else math.inf for li, t in enumerate(p.times)] for p in pops]
    host_free = Counter(topology.devices[d].host_index for d in candidates)
    ctx = _Joint(
        job,
        links,
        pops,
        base_rows,
        crossings,
        alls,
        names,
        backward,
        compute,
        host_free,
        [
            {h: topology.domain_column(li)[topology.devices_in_domain[0][h][0]] for h in host_free}
            for li in range(n_levels)
        ],
    )
    launch, launch_notes = _launcher_floors(job, pops, links, n_levels)
    best = ctx.search(base_rows, crossings, launch_notes, launch or None, alls)
    if not math.isfinite(best.value):
        best = CommBound(0.0, {}, {}, 0.0)
    for ai, a in enumerate(pops):
        # a valid bound never exceeds a mapping's (exposed comm, step): once it meets the incumbent's in both, the
        # arguments below can only tie it, so they are skipped and the bound returned is the same
        reached = incumbent is not None and best.value >= incumbent[0] and best.step >= incumbent[1]
        if links.graph or reached or (deadline is not None and time.perf_counter() >= deadline):
            continue
        least = _host_filling(ctx, ai, a, best)
        if least is None or not math.isfinite(least.value):
            continue
        top = least if least.value > best.value else best
        best = CommBound(top.value, top.by_label, top.argument, max(best.step, least.step))
    return best


def _launcher_floors(
    job: Job, pops: Sequence[_Pop], links: _Links, n_levels: int
) -> tuple[dict[int, list[list[float]]], dict[int, str]]:
    """With ``launcher: torchrun`` every host's ranks are one contiguous block of at most `max_free` ranks, so a
    host holds at most W members of a group, W the most of its members any `max_free` consecutive ranks hold, and
    a send between ranks `max_free` apart or more leaves its host. Per population, a floor row for its item with
    the least W (or such a send); none without the launcher (or on a device graph)."""
    floors: dict[int, list[list[float]]] = {}
    notes: dict[int, str] = {}
    window = links.max_free
    if job.launcher != "torchrun" or links.graph or n_levels < 2 or window < 1:
        return floors, notes
    note = f" (torchrun: a host holds at most {window} consecutive ranks)"
    for pi, p in enumerate(pops):
        if p.kind is not None:
            w = min(_most_in_window(sorted(m), window) for m in p.members)
            if w >= p.size:
                continue
            row = [math.inf] + [links.group(p.kind, p.size, p.bytes, li, 1, w) for li in range(1, n_levels)]
        elif any(abs(a - b) >= window for a, b in p.members):
            row = [math.inf] + [links.edge(p.bytes, li) for li in range(1, n_levels)]
        else:
            continue
        floors[pi] = [row]
        notes[pi] = note
    return floors, notes


def _most_in_window(members: Sequence[int], window: int) -> int:
    """The most of the sorted rank `members` that `window` consecutive ranks hold."""
    best, lo = 0, 0
    for hi, r in enumerate(members):
        while r - members[lo] >= window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _group_pops(traffic: Traffic, links: _Links, free: Sequence[Sequence[int]]) -> list[_Pop]:
    """The populations of alike groups, each with its per-level fastest time, its lowest level where all fit
    (the *capacity* argument) and its NIC floor (the *nic-floor* argument)."""
    n_levels = len(free)
    pops: list[_Pop] = []
    gpops: dict[tuple[str, CollectiveKind, int, float, float, float], list[tuple[int, ...]]] = defaultdict(
        list
    )
    for g in traffic.groups:
        gpops[(g.label, g.kind, len(g.members), g.bytes, g.count, g.exposed)].append(g.members)
    for (label, kind, n, size, count, exposed), members in gpops.items():
        seen: set[int] = set()
        disjoint = True
        for m in members:
            if not seen.isdisjoint(m):
                disjoint = False
            seen.update(m)
        k = len(members)
        caps = [
            sum(f // n for f in free[li]) if disjoint else (k if free[li] and free[li][0] >= n else 0)
            for li in range(n_levels)
        ]
        low = next((li for li in range(n_levels) if caps[li] >= k), n_levels - 1)
        times = [links.group(kind, n, size, li) for li in range(n_levels)]
        spanning = k - caps[0] if disjoint else 0
        floor = 0.0
        if spanning > 0 and not links.graph and math.isfinite(links.host_out):
            floor = count * spanning * 2 * links.min_nic_bytes(kind, n, size) / (links.host_out * 1e9)
        pops.append(_Pop(label, members, n, disjoint, count, exposed, low, times, floor, kind, size))
    return pops


def _edge_pops(traffic: Traffic, links: _Links, free: Sequence[Sequence[int]]) -> list[_Pop]:
    """The populations of alike edges (PP sends): capacity (a forest holds at most f - 1 edges inside a domain of
    f devices) and NIC floor, as `_group_pops`."""
    n_levels = len(free)
    pops: list[_Pop] = []
    epops: dict[tuple[str, float, float, float], list[tuple[int, int]]] = defaultdict(list)
    for e in traffic.edges:
        if e.src != e.dst:
            epops[(e.label, e.bytes, e.count, e.exposed)].append((e.src, e.dst))
    for (label, size, count, exposed), pairs in epops.items():
        distinct = {(min(a, b), max(a, b)) for a, b in pairs}
        forest = _is_forest(distinct)
        k = len(distinct)
        caps = [
            sum(max(f - 1, 0) if forest else f * (f - 1) // 2 for f in free[li]) for li in range(n_levels)
        ]
        low = next((li for li in range(n_levels) if caps[li] >= k), n_levels - 1)
        times = [links.edge(size, li) for li in range(n_levels)]
        spanning = k - caps[0]
        floor = 0.0
        if spanning > 0 and not links.graph and math.isfinite(links.host_out):
            floor = count * spanning * size / (links.host_out * 1e9)
        pops.append(_Pop(label, sorted(distinct), 0, True, count, exposed, low, times, floor, None, size))
    return pops


def _dp_overlap(topology: Topology, job: Job, candidates: Sequence[int]) -> DpOverlap | None:
    """What bounds the DP reduce's exposure: dp_exposed falls as the backward grows, so the longest backward the
    candidates' kinds give and the job's gradient bytes bound it (None: the job's DP is exposed whole)."""
    longest = (
        _max_backward(topology, job, candidates)
        if job.model is not None and job.parallel is not None and "dp" not in job.exposure
        else None
    )
    if longest is None or job.model is None or job.parallel is None:
        return None
    return DpOverlap(
        longest, gradient_bytes(job.model, job.parallel), job.model.distributed_optimizer, job.parallel.dp
    )


@dataclass(frozen=True)
class _Joint:
    """What every case of `comm_bound` shares: the populations, their base rows, the crossing constraints and the
    terms `_search` joins them with."""

    job: Job
    links: _Links
    pops: list[_Pop]
    base_rows: list[list[float]]
    crossings: list[tuple[frozenset[int], int]]
    alls: list[tuple[frozenset[int], int, int]]
    names: list[str]
    backward: DpOverlap | None
    compute: tuple[float, float, float]
    host_free: Counter[int]
    host_dom: list[dict[int, int]]

    @property
    def n_levels(self) -> int:
        return len(self.names)

    def search(
        self,
        rows: Sequence[Sequence[float]],
        crossings: list[tuple[frozenset[int], int]],
        notes: dict[int, str],
        floors: dict[int, list[list[float]]] | None,
        alls: list[tuple[frozenset[int], int, int]],
        cutoff: tuple[float, float] = (-math.inf, -math.inf),
    ) -> CommBound:
        return _search(
            self.pops, rows, crossings, self.names, self.backward, self.compute, notes, floors, alls, cutoff
        )


def _anchor_units(job: Job, a: _Pop) -> list[tuple[int, ...]] | None:
    """The rank sets of label `a` that the host-filling argument anchors on: its disjoint groups, or the
    components of its sends when they are disjoint rank sets of one size (TP rings of p2p sends); None: none."""
    if a.kind is not None:
        if a.size < 2 or not a.disjoint:
            return None
        return [tuple(m) for m in a.members]
    comp = rank_components(job.ranks, a.members)
    by_comp: dict[int, list[int]] = defaultdict(list)
    for r, c in enumerate(comp):
        by_comp[c].append(r)
    units = [tuple(v) for v in by_comp.values() if len(v) > 1]
    if not units or len({len(u) for u in units}) != 1:
        return None
    return units


def _host_filling(ctx: _Joint, ai: int, a: _Pop, best: CommBound) -> CommBound | None:
    """The *whole TP groups* argument on label `a` (of disjoint groups of t ranks): either every A-group stays
    whole on one host, and then a host with f free devices holds at most floor(f / t) ranks of any item whose
    ranks lie in distinct A-groups (a DP group's members each come with their TP group), or some A-group spans
    hosts. Returns the least of the two cases (None: `a` anchors no such argument)."""
    units = _anchor_units(ctx.job, a)
    if units is None:
        return None
    t = len(units[0])
    n_levels = ctx.n_levels
    # per level, how many whole A-groups each domain can hold
    held: list[dict[int, int]] = []
    for li in range(n_levels):
        acc: dict[int, int] = defaultdict(int)
        for h, f in ctx.host_free.items():
            acc[ctx.host_dom[li][h]] += f // t
        held.append(acc)
    group_of = {r: i for i, m in enumerate(units) for r in m}
    held_now = (best.value, best.step)
    whole, meets = _whole_case(ctx, ai, a, t, held, group_of, held_now)
    if _below(whole, held_now):
        return (
            None  # the least of the two cases is at or below the bound held: nothing to gain from the split
        )
    split = _split_case(ctx, ai, a, t, meets, whole, held_now)
    return _least([whole, split])


def _whole_case(
    ctx: _Joint,
    ai: int,
    a: _Pop,
    t: int,
    held: list[dict[int, int]],
    group_of: dict[int, int],
    held_now: tuple[float, float],
) -> tuple[CommBound, list[int]]:
    """The case where every A-group stays whole on a host: A inside hosts, and each population whose items meet
    distinct A-groups priced on whole A-groups (with the *host-room* floors). Returns the case's bound and those
    populations."""
    pops, base_rows, n_levels = ctx.pops, ctx.base_rows, ctx.n_levels
    # when the A-groups cover every rank and all stay whole, a domain holds t ranks per whole A-group it has
    # room for: the crossings are counted on that room
    whole_cross, whole_alls = ctx.crossings, ctx.alls
    if len(group_of) == ctx.job.ranks:
        whole_cross, whole_alls = _crossings(
            ctx.job.ranks,
            pops,
            [sorted((v * t for v in held[li].values()), reverse=True) for li in range(n_levels)],
            ctx.job.ranks,
        )
    rows = [list(r) for r in base_rows]
    rows[ai] = [base_rows[ai][0]] + [math.inf] * (n_levels - 1)
    notes: dict[int, str] = {}
    floors: dict[int, list[list[float]]] = {}
    meets: list[int] = []
    per_host = ctx.links.max_free // t
    for pi, p in enumerate(pops):
        if pi == ai or not all(
            all(r in group_of for r in m) and len({group_of[r] for r in m}) == len(m) for m in p.members
        ):
            continue
        if p.kind is not None:
            rows[pi], mine = _on_whole_groups(ctx, p, t, held, group_of)
            if mine:
                floors[pi] = mine
        elif per_host <= 1:
            rows[pi] = [x if li >= 1 else math.inf for li, x in enumerate(base_rows[pi])]
        else:
            continue
        notes[pi] = f" (whole {a.label} groups on their hosts)"
        meets.append(pi)
    return ctx.search(rows, whole_cross, notes, floors, whole_alls, held_now), meets


def _on_whole_groups(
    ctx: _Joint, p: _Pop, t: int, held: list[dict[int, int]], group_of: dict[int, int]
) -> tuple[list[float], list[list[float]]]:
    """Population `p` (groups meeting distinct whole A-groups of t ranks): its row (an item inside a domain needs
    p.size whole A-groups there) and its *host-room* floors."""
    links, n_levels = ctx.links, ctx.n_levels
    k = len(p.members)
    kind = p.kind
    assert kind is not None
    # a domain holding v whole A-groups holds v * t of their ranks, and an item of p inside it
    # needs p.size of those groups
    caps = [
        sum((v * t) // p.size for v in held[li].values() if v >= p.size)
        if p.disjoint
        else (k if max(held[li].values(), default=0) >= p.size else 0)
        for li in range(n_levels)
    ]
    low = next((li for li in range(n_levels) if caps[li] >= k), n_levels)
    row = [
        links.group(kind, p.size, p.bytes, li, t) if li >= max(low, p.low) else math.inf
        for li in range(n_levels)
    ]
    # every host that one of p's items touches holds as many whole A-groups as the item's fewest
    # members on a host; if the hosts with room for G A-groups cannot take every A-group p meets, some
    # item has a host with fewer than G of its members
    per_host = links.max_free // t
    rooms = [f // t for f in ctx.host_free.values()]
    touched = len({group_of[r] for m in p.members for r in m})
    g_star = max(
        (g for g in range(1, per_host + 1) if sum(x for x in rooms if x >= g) >= touched),
        default=0,
    )
    mine: list[list[float]] = []
    if 0 < g_star < per_host:
        mine.append([links.group(kind, p.size, p.bytes, li, t, g_star) for li in range(n_levels)])
    mine += _class_floors(ctx, p, t, group_of)
    mine += _class_packing(ctx, p, t, group_of)
    return row, mine


MAX_PACKING_NODES = 20_000
"""`_class_packing` gives up (adds no floor: a weaker bound, still valid) past this many search nodes."""


def _class_packing(ctx: _Joint, p: _Pop, t: int, group_of: dict[int, int]) -> list[list[float]]:
    """The classes together (Megatron: the pipeline stages, each a set of TP groups its DP groups meet): with
    every A-group whole on a host, the items of one class meet the same A-groups, so they share their hosts, their
    lowest common level L and their fewest members on a host G, and the phase takes at least the price of the
    worst class. A class at (L, G) puts its c A-groups on hosts with room for G whole A-groups or more inside one
    domain of level L, and classes use distinct rooms: at most ``sum over domains of floor(rooms / c)`` classes
    can have L <= l and G >= g, for every level l and every g. The least price that lets every class choose an
    (L, G) within it while meeting every such count is a floor of the phase (one row, the same at every level).
    """
    links, n_levels = ctx.links, ctx.n_levels
    kind = p.kind
    assert kind is not None
    classes = {frozenset(group_of[r] for r in m) for m in p.members}
    sizes = {len(c) for c in classes}
    if len(sizes) != 1 or sum(len(c) for c in classes) != len(frozenset().union(*classes)):
        return []
    (size,) = sizes
    n_classes = len(classes)
    per_host = links.max_free // t
    if per_host < 1 or n_classes < 2:
        return []
    gs = range(1, per_host + 1)
    # cap[l][g - 1]: how many classes can lie inside single domains of level l with g rooms or more per host
    cap: list[list[int]] = []
    for li in range(n_levels):
        row: list[int] = []
        for g in gs:
            w: dict[int, int] = defaultdict(int)
            for h, f in ctx.host_free.items():
                if f // t >= g:
                    w[ctx.host_dom[li][h]] += f // t
            row.append(sum(v // size for v in w.values()))
        cap.append(row)
    # rooms[l]: per domain of level l, its hosts' rooms for whole A-groups (one entry per host)
    rooms: list[list[list[int]]] = []
    for li in range(n_levels):
        per: dict[int, list[int]] = defaultdict(list)
        for h, f in ctx.host_free.items():
            if f // t:
                per[ctx.host_dom[li][h]].append(f // t)
        rooms.append(list(per.values()))
    price = {(li, g): links.group(kind, p.size, p.bytes, li, t, g) for li in range(n_levels) for g in gs}
    for tau in sorted({v for v in price.values() if math.isfinite(v)}):
        options = [o for o, v in price.items() if v <= tau]
        # an option at a higher level and fewer per host is counted by fewer constraints: keep the others out
        options = [o for o in options if not any(q != o and q[0] >= o[0] and q[1] <= o[1] for q in options)]
        fits = _classes_fit(options, n_classes, cap, rooms, size)
        if fits is None:
            return []  # too many cases: no floor
        if fits:
            return [[tau] * n_levels] if tau > 0 else []
    return []


def _classes_fit(
    options: list[tuple[int, int]], n: int, cap: list[list[int]], rooms: list[list[list[int]]], size: int
) -> bool | None:
    """Whether `n` classes of `size` A-groups can each take one of `options` (level, per host) so that for every
    level l and g, at most ``cap[l][g - 1]`` of them have level <= l and per host >= g, and the classes with g per
    host or more find ``size`` rooms each on hosts with g rooms or more that the others leave (`_rooms_left`;
    None: more than `MAX_PACKING_NODES` tried)."""
    checks = [(li, g) for li in range(len(cap)) for g in range(1, len(cap[li]) + 1)]
    top = max((len(r) for r in cap), default=0)
    nodes = 0

    def ok(counts: list[int]) -> bool:
        chosen = [(o, c) for o, c in zip(options, counts, strict=False) if c]
        if not all(
            sum(c for (lo, go), c in chosen if lo <= li and go >= g) <= cap[li][g - 1] for li, g in checks
        ):
            return False
        for g in range(2, top + 1):
            high = sum(c for (_, go), c in chosen if go >= g)
            low = sum(c for (_, go), c in chosen if go < g)
            # the classes below g at the highest level any option below g has (the check then only tightens as
            # classes are added, so a partial choice that fails it fails whole)
            lv = max((lo for lo, go in options if go < g), default=0)
            if high and high * size > _rooms_left(rooms[lv], g, low, size, rooms[0]):
                return False
        return True

    def place(i: int, left: int, counts: list[int]) -> bool | None:
        nonlocal nodes
        nodes += 1
        if nodes > MAX_PACKING_NODES:
            return None
        if i == len(options) - 1:
            return ok([*counts, left])
        for k in range(left, -1, -1):
            if not ok([*counts, k]):
                continue
            r = place(i + 1, left - k, [*counts, k])
            if r is None or r:
                return r
        return False

    return place(0, n, []) if options else False


def _rooms_left(domains: list[list[int]], g: int, n: int, size: int, hosts: list[list[int]]) -> int:
    """Rooms at most left on hosts with `g` rooms or more (`hosts`: every host's rooms) once `n` classes of `size`
    A-groups, each inside one of `domains` (each the rooms of its hosts) with fewer than g per host, are placed: a
    host with fewer than g rooms serves them first, any room of a larger host they take is lost to the others.
    The domains are filled by least marginal loss, which gives the least total loss (each domain's loss is convex
    in its count); -1 when they do not fit at all."""
    total = sum(r for dom in hosts for r in dom if r >= g)
    if not n:
        return total
    doms = [(sum(r for r in d if r < g), sum(d)) for d in domains]
    held = [0] * len(doms)
    loss = 0
    for _ in range(n):
        best: tuple[int, int] | None = None
        for i, (small, all_rooms) in enumerate(doms):
            if (held[i] + 1) * size > all_rooms:
                continue
            extra = max(0, (held[i] + 1) * size - small) - max(0, held[i] * size - small)
            if best is None or extra < best[0]:
                best = (extra, i)
        if best is None:
            return -1
        loss += best[0]
        held[best[1]] += 1
    return total - loss


def _class_floors(ctx: _Joint, p: _Pop, t: int, group_of: dict[int, int]) -> list[list[float]]:
    """Classes: the A-group sets p's items meet (Megatron: a stage's TP groups, met by each of its DP groups). An
    item inside a domain of level l with G members or more on each host puts every A-group of its class on hosts
    of that domain with room for G; if the domains cannot take every class so (classes disjoint, of one size),
    the items of some class all lie above l or have a host with fewer than G members."""
    links, n_levels = ctx.links, ctx.n_levels
    kind = p.kind
    assert kind is not None
    per_host = links.max_free // t
    out: list[list[float]] = []
    classes = {frozenset(group_of[r] for r in m) for m in p.members}
    sizes = {len(c) for c in classes}
    if len(sizes) != 1 or sum(len(c) for c in classes) != len(frozenset().union(*classes)):
        return out
    (size,) = sizes
    for li in range(n_levels):
        for need in range(1, per_host + 1):
            w: dict[int, int] = defaultdict(int)
            for h, f in ctx.host_free.items():
                if f // t >= need:
                    w[ctx.host_dom[li][h]] += f // t
            if sum(v // size for v in w.values()) >= len(classes):
                continue
            out.append(
                [
                    links.group(kind, p.size, p.bytes, lv, t)
                    if lv > li
                    else (links.group(kind, p.size, p.bytes, lv, t, need - 1) if need > 1 else math.inf)
                    for lv in range(n_levels)
                ]
            )
    return out


def _split_case(
    ctx: _Joint, ai: int, a: _Pop, t: int, meets: list[int], whole: CommBound, held_now: tuple[float, float]
) -> CommBound:
    """The case where some A-group spans hosts, sharpened per item x of a population whose items meet distinct
    A-groups: with x's fewest members on a host G, a host of x holds G A-groups' ranks, each A-group whole (t ranks)
    or split (at least its own fewest members on a host), so if G * t exceeds a host's devices, some A-group meeting
    x there is split with at most max_free // G members on one of its hosts."""
    pops, links, n_levels = ctx.pops, ctx.links, ctx.n_levels
    split_rows = [list(r) for r in ctx.base_rows]
    split_rows[ai] = [math.inf, *split_rows[ai][1:]] if n_levels > 1 else [math.inf] * n_levels
    split_note = f" (a {a.label} group split across hosts)"
    split = ctx.search(split_rows, ctx.crossings, {ai: split_note}, None, ctx.alls, held_now)
    sharper = [split]
    # the sharper split cases only raise the split case; once it is at or above the whole case in both, the
    # least of the two is the whole case whatever they give
    sharpen = not (split.value >= whole.value and split.step >= whole.step)
    for pi in meets if a.kind is not None and sharpen else []:
        p = pops[pi]
        if p.kind is None:
            continue
        per_g: list[CommBound] = []
        covers = {r for m in a.members for r in m} <= {r for m in p.members for r in m}
        for g_x in range(1, links.max_free + 1):
            fl = {pi: [[links.group(p.kind, p.size, p.bytes, li, 1, g_x) for li in range(n_levels)]]}
            if g_x * t > links.max_free and n_levels > 1 and a.kind is not None:
                room = links.max_free // g_x
                if covers and p.disjoint:
                    room = _split_room(ctx.host_free, t, len(a.members), g_x, room)
                    if room < 1:
                        continue  # no mapping has every item of p at g_x members per host or more
                fl[ai] = [
                    [math.inf] + [links.group(a.kind, t, a.bytes, li, 1, room) for li in range(1, n_levels)]
                ]
            if not all(math.isfinite(min(v[0])) for v in fl.values()):
                continue
            notes = {ai: split_note, pi: f" ({g_x} per host at least)"}
            per_g.append(ctx.search(split_rows, ctx.crossings, notes, fl, ctx.alls, held_now))
        if per_g:
            sharper.append(_least(per_g))
    split = max(sharper, key=lambda b: b.value)
    return CommBound(split.value, split.by_label, split.argument, max(b.step for b in sharper))


def _split_room(host_free: Counter[int], t: int, n_a: int, g: int, top: int) -> int:
    """The most members (at most `top`) that every one of `n_a` split A-groups of t ranks can have on each of its
    hosts when every item of a population covering their ranks has `g` members or more on each of its hosts.

    A piece of s ranks of an A-group on a host brings, for each of its ranks, g - 1 members of that rank's item
    from other A-groups (distinct ranks: the items are disjoint and meet an A-group once), so the host holds
    s * g ranks at least: s <= f // g. An A-group with q members or more on each host lies on hosts with
    f >= q * g, in two pieces at least (split), each of q ranks or more: at most sum(f) / t such groups (ranks)
    and sum(f // q) / 2 (pieces). Its pieces of at most `top` ranks add up to t, which may force a larger least
    piece (t = 8, top = 4: q = 3 means two pieces of 4): the counts take that least piece. The largest q that lets
    all `n_a` groups have it (0: none can)."""
    for q in range(top, 0, -1):
        # the least piece s >= q of a split into two pieces or more, each of s to `top` ranks
        s = next((s for s in range(q, top + 1) if any(k * s <= t - s <= k * top for k in range(1, t))), 0)
        if not s:
            continue
        fs = [f for f in host_free.values() if f >= s * g]
        pieces = max(2, -(-t // top))
        if n_a <= min(sum(fs) // t, sum(f // s for f in fs) // pieces):
            return q
    return 0


MAX_CASES = 4096
"""Cases `_search` enumerates at most (crossing constraints beyond are dropped: fewer constraints, a weaker but
valid bound)."""
MAX_ALLS = 3
"""`_search` branches on at most this many every-item constraints (2 ** MAX_ALLS branches)."""
MAX_CROSSING_RANKS = 16_384
"""Above this many ranks only the whole job's crossing is computed (the label subsets' components cost O(ranks))."""


def _crossings(
    ranks: int, pops: Sequence[_Pop], free: Sequence[Sequence[int]], need: int, whole_job_only: bool = False
) -> tuple[list[tuple[frozenset[int], int]], list[tuple[frozenset[int], int, int]]]:
    """Crossing constraints ``(S, L)``: some item of the populations S has its lowest common level >= L.

    For a set of labels, the ranks its groups and edges connect form components. A component larger than every
    domain of level l, or more components (of two ranks or more) than the domains of level l can hold whole
    (``sum floor(free / smallest component)``), means a component spans two domains of level l, so an item of
    those labels that links them has its lowest common level above l (e.g. a TP8 x PP4 pipeline of 32 ranks on
    8-GPU hosts: a TP group or a PP send leaves its host; TP rings of p2p sends, more than the hosts hold whole:
    a send leaves its host; the whole job on more devices than a spine has: one item crosses spines).
    `whole_job_only` (or more than `MAX_CROSSING_RANKS` ranks): the whole job's crossing alone.
    """
    labels = list(dict.fromkeys(p.label for p in pops))
    subsets: list[tuple[str, ...]] = []
    if ranks <= MAX_CROSSING_RANKS and not whole_job_only:
        for k in range(1, len(labels) + 1):
            if k <= 2 or k == len(labels) or len(labels) <= 5:
                subsets += list(itertools.combinations(labels, k))
    elif labels:
        subsets.append(tuple(labels))
    out: list[tuple[frozenset[int], int]] = []
    alls: list[tuple[frozenset[int], int, int]] = []
    more: list[tuple[frozenset[int], int, int]] = []
    # the job needs domains of level `span`: no lower domain holds all its ranks
    span = next((li for li, fs in enumerate(free) if max(fs, default=0) >= need), len(free) - 1)
    for sub in subsets:
        idx = frozenset(i for i, p in enumerate(pops) if p.label in sub)
        comp = rank_components(ranks, (m for i in sorted(idx) for m in pops[i].members))
        sizes = [c for c in Counter(comp).values() if c > 1]
        # if no item of `sub` leaves a domain of level span - 1, each of its components stays in one, and the
        # job's ranks fill two of them at least: an item of another population that meets every component
        # spans two (Megatron: a DP group meets every pipeline)
        if span > 0 and len(set(comp)) > 1:
            n_comp = len(set(comp))
            for pi, p in enumerate(pops):
                if (
                    p.label not in sub
                    and p.kind is not None
                    and all(len({comp[r] for r in m}) == n_comp for m in p.members)
                ):
                    alls.append((idx, pi, span))
        # if no item of `sub` leaves a domain of level l, each component stays in one: an item of another
        # population whose components hold more ranks than any domain of level l has free devices spans l's
        # domains, and so does every such item (a DP group meets a stage's TP groups: a stage larger than a leaf)
        comp_size = Counter(comp)
        for pi, p in enumerate(pops):
            if p.label in sub or p.kind is None or not p.members:
                continue
            need = min(sum(comp_size[c] for c in {comp[r] for r in m}) for m in p.members)
            lv = next((li for li, fs in enumerate(free) if max(fs, default=0) >= need), len(free) - 1)
            if lv > 0 and (idx, pi, lv) not in alls:
                more.append((idx, pi, lv))
        if not sizes:
            continue
        big, small = max(sizes), min(sizes)
        over = [
            li
            for li, fs in enumerate(free)
            if (max(fs, default=0) < big or sum(f // small for f in fs) < len(sizes))
        ]
        if over and over[-1] + 1 < len(free):
            out.append((idx, over[-1] + 1))
    # the whole job's every-item constraints first, then the others, highest level and fewest labels first
    more.sort(key=lambda c: (-c[2], len(c[0])))
    return out, alls + [c for c in dict.fromkeys(more) if c not in alls]


def _search(
    pops: Sequence[_Pop],
    rows: Sequence[Sequence[float]],
    constraints: Sequence[tuple[frozenset[int], int]],
    names: Sequence[str],
    backward: DpOverlap | None,
    compute: tuple[float, float, float],
    notes: dict[int, str],
    floors: dict[int, list[list[float]]] | None = None,
    alls: Sequence[tuple[frozenset[int], int, int]] = (),
    cutoff: tuple[float, float] = (-math.inf, -math.inf),
) -> CommBound:
    """`_search_one` over both branches of every constraint ``(S, i, L)`` of `alls` (an item of S at level L or
    above, or every item of population i at level L or above: then its floor too is priced from L): the least
    exposed comm and the least step of them all.

    `cutoff` (exposed comm, step): the bound the caller already holds. Once the least found is at or below it in
    both, the search stops and returns it: the true least is lower still, and the caller (who keeps the greater)
    gains nothing from either, so the bound it ends with is the same."""
    alls = list(alls)[:MAX_ALLS]
    out: list[CommBound] = []
    for branch in itertools.product((False, True), repeat=len(alls)):
        cons = list(constraints)
        every: dict[int, int] = {}
        why = dict(notes)
        for (s, i, lv), each in zip(alls, branch, strict=True):
            if each:
                every[i] = max(every.get(i, 0), lv)
                cons.append((frozenset([i]), lv))
                why[i] = why.get(i, "") + f" (every {pops[i].label} group spans {names[lv - 1]}s)"
            else:
                cons.append((s, lv))
        out.append(_search_one(pops, rows, cons, names, backward, compute, why, floors or {}, every, cutoff))
        if _below(out[-1], cutoff):
            break
    low = min(out, key=lambda b: b.value)
    return CommBound(low.value, low.by_label, low.argument, min(b.step for b in out))


def _search_one(
    pops: Sequence[_Pop],
    rows: Sequence[Sequence[float]],
    constraints: Sequence[tuple[frozenset[int], int]],
    names: Sequence[str],
    backward: DpOverlap | None,
    compute: tuple[float, float, float],
    notes: dict[int, str],
    floors: dict[int, list[list[float]]],
    every: dict[int, int],
    cutoff: tuple[float, float] = (-math.inf, -math.inf),
) -> CommBound:
    """The least `_case` over every choice of the level each population is forced to that meets the crossing
    constraints (a population's cost only grows with its level, so its choices are 0 and the constraints'
    levels). The bound holds whichever items cross: the least exposed comm and, separately, the least step.
    Stops once both are at or below `cutoff` (`_search`)."""
    grid = [list(r) for r in rows]
    multi: list[tuple[frozenset[int], int]] = []
    why = dict(notes)
    for s, lv in constraints:
        if len(s) == 1:
            (i,) = s
            if any(math.isfinite(x) for x in grid[i][:lv]):
                grid[i][:lv] = [math.inf] * lv
                why[i] = why.get(i, "") + f" ({pops[i].label} spans {names[lv - 1]}s)"
        else:
            multi.append((s, lv))
    while True:
        options = [sorted({0, *(lv for s, lv in multi if i in s)}) for i in range(len(pops))]
        if math.prod(len(o) for o in options) <= MAX_CASES or not multi:
            break
        multi.pop()
    best: CommBound | None = None
    best_combo: tuple[int, ...] = ()
    step = math.inf
    for combo in itertools.product(*options):
        if not all(any(combo[i] >= lv for i in s) for s, lv in multi):
            continue
        c = _case(pops, grid, combo, names, backward, why, compute, floors, every, explain=False)
        step = min(step, c.step)
        if best is None or c.value < best.value:
            best, best_combo = c, combo
        if best.value <= cutoff[0] and step <= cutoff[1]:
            break
    if best is None:
        return CommBound(math.inf, {}, {}, math.inf)
    # the least case again, with its reasons (the numbers do not depend on them)
    forced = dict(why)
    for i, m in enumerate(best_combo):
        if m > 0:
            sets = [s for s, lv in multi if i in s and lv == m]
            labels = sorted({pops[j].label for j in sets[0]}) if sets else [pops[i].label]
            forced[i] = forced.get(i, "") + f" ({'+'.join(labels)} ranks span {names[m - 1]}s)"
    best = _case(pops, grid, best_combo, names, backward, forced, compute, floors, every)
    return CommBound(best.value, best.by_label, best.argument, step)


def _below(b: CommBound, cutoff: tuple[float, float]) -> bool:
    """`b` is at or below `cutoff` in both exposed comm and step (it cannot raise a bound that holds it)."""
    return b.value <= cutoff[0] and b.step <= cutoff[1]


def _least(cases: Sequence[CommBound]) -> CommBound:
    """The bound that holds whichever case happens: the least exposed comm (with its phases) and the least step."""
    low = min(cases, key=lambda b: b.value)
    return CommBound(low.value, low.by_label, low.argument, min(b.step for b in cases))


@dataclass
class _Pop:
    """Alike groups (or edges) of one label: their rank sets, per-level fastest time of one, and the NIC floor."""

    label: str
    members: Sequence[tuple[int, ...]]
    size: int  # 0 for edges
    disjoint: bool
    count: float
    exposed: float
    low: int  # the lowest level where all fit
    times: list[float]  # one item's fastest seconds with its lowest common level at each level
    floor: float  # the phase's seconds at least from the NIC capacity (0: no such argument)
    kind: CollectiveKind | None  # None for edges
    bytes: float


def _case(
    pops: Sequence[_Pop],
    rows: Sequence[Sequence[float]],
    levels: Sequence[int],
    names: Sequence[str],
    backward: DpOverlap | None,
    notes: dict[int, str],
    compute: tuple[float, float, float],
    floors: dict[int, list[list[float]]] | None = None,
    every: dict[int, int] | None = None,
    explain: bool = True,
) -> CommBound:
    """The per-phase bound with population i priced by `rows[i]` (one item's fastest seconds per lowest common
    level) at level `levels[i]` or above; infinite when some population has no level left. `explain` False
    leaves the reasons out (the numbers are the same)."""
    secs: dict[str, float] = defaultdict(float)
    expo: dict[str, float] = defaultdict(float)
    why: dict[str, str] = {}
    for i, p in enumerate(pops):
        row = rows[i]
        t = min(row[levels[i] :], default=math.inf)
        if not math.isfinite(t):
            return CommBound(math.inf, {}, {}, math.inf)
        if explain:
            low = next((li for li in range(levels[i], len(row)) if row[li] == t), levels[i])
            options = [(t, f"capacity at {names[low]}")]
        else:
            options = [(t, "capacity")]
        if p.floor > 0:
            options.append((p.floor, "nic-floor"))
        if floors and i in floors:
            # each floor row: some item costs at least its least entry from the level every item reaches
            fv = max(min(row[(every or {}).get(i, 0) :], default=math.inf) for row in floors[i])
            if not math.isfinite(fv):
                return CommBound(math.inf, {}, {}, math.inf)
            options.append((fv, "host-room (too few hosts hold many members of each group)"))
        for v, arg in options:
            val = p.count * v if arg != "nic-floor" else v
            if explain and (val * p.exposed > expo[p.label] or p.label not in why):
                why[p.label] = arg + notes.get(i, "")
            secs[p.label] = max(secs[p.label], val)
            expo[p.label] = max(expo[p.label], val * p.exposed)
    if "dp" in secs and backward is not None:
        ov = backward
        expo["dp"] = dp_exposed(
            secs["dp"], ov.backward, ov.gradient_bytes, distributed=ov.distributed, dp=ov.dp
        )
        if explain:
            why["dp"] += " (overlapped with the backward in buckets)"
    comm = sum(expo.values())
    k, b, wait = compute
    step = k + b * (k + sum(v for lab, v in expo.items() if lab != "dp")) + comm + wait
    return CommBound(comm, dict(expo), why, step)


def _fastest_compute(topology: Topology, job: Job, candidates: Sequence[int]) -> tuple[float, float, float]:
    """(compute seconds on the fastest kind the job could run on, the bubble's share (p-1)/m, the straggler wait
    of that compute); zeros when some mapping could have no compute model (its step is then its exposed
    communication)."""
    if job.model is None or job.parallel is None:
        return 0.0, 0.0, 0.0
    out: list[float] = []
    for name in {topology.devices[d].kind for d in candidates}:
        kind = device_kind(name, topology) or device_kind(job.device_kind, topology)
        if kind is None:
            return 0.0, 0.0, 0.0
        out.append(step_compute(job.model, job.parallel, kind).compute_seconds)
    if not out:
        return 0.0, 0.0, 0.0
    k = min(out)
    return (
        k,
        (job.parallel.pp - 1) / max(1, job.model.micro_batches),
        straggler_seconds(k, job.parallel.world_size),
    )


def _max_backward(topology: Topology, job: Job, candidates: Sequence[int]) -> float | None:
    """The longest backward of one micro-batch on any kind the job could run on (None: no compute model)."""
    if job.model is None or job.parallel is None:
        return None
    names = {topology.devices[d].kind for d in candidates}
    kinds = [device_kind(k, topology) for k in names]
    if job.device_kind is not None:
        kinds.append(device_kind(job.device_kind, topology))
    out = [step_compute(job.model, job.parallel, k).backward_seconds_per_microbatch for k in kinds if k]
    return max(out) if out else None


def _volume(kind: CollectiveKind, n: int, size: float) -> tuple[float, int]:
    """Bytes per member and steps of one ring collective (as `placement.cost.collectives` prices it)."""
    if kind is CollectiveKind.ALL_REDUCE:
        return 2.0 * (n - 1) / n * size, 2 * (n - 1)
    return (n - 1) / n * size, n - 1


def _is_forest(pairs: set[tuple[int, int]]) -> bool:
    """The undirected graph of `pairs` has no cycle."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in sorted(pairs):
        ra, rb = find(a), find(b)
        if ra == rb:
            return False
        parent[ra] = rb
    return True
