"""Multilevel candidates: Mt-KaHyPar process mapping of the job's rank units onto the hosts of a candidate domain.
Owns the tier-cost target graphs, the hierarchical descent and the capacity repair; the traffic hypergraph and
the tree of candidate domains are built by `placement.solve.multilevel.graph`.

Mt-KaHyPar (Gottesbüren, Heuer, Sanders, Schlag, ALENEX 2021; process mapping with the Steiner-tree objective:
Heuer, Maas, Sanders, "Multilevel Hypergraph Partitioning with Process Mapping", 2024) maps a hypergraph onto
a target graph of blocks; a hyperedge costs the weight of the Steiner tree its blocks span. Here:

- **Vertices**: the given units; the groups of the label that saves most by staying on a host (TP; for explicit
  jobs the components of a label's p2p edges) are merged into whole vertices, as many as hosts can hold.
- **Hyperedges**: groups and edges merged per vertex set (a group stays one hyperedge, not a clique or ring:
  its Steiner tree is the fabric it crosses, and 2-pin edges are exact), weighted by the surrogate cost step
  ``c[L] - c[l]`` (`placement.cost.evaluate` v1 on `placement.solve.bound.level_paths`) between spanning the mapped
  domain (level L) and staying inside one block (level l).
- **Target graph**: complete on the blocks; an edge weighs the tier-cost difference of the level where its two
  blocks meet, normalised over the step's traffic and scaled to integers.
- **Capacity**: a host's free candidate devices, in whole units; whole vertices also need a host slot. Free
  capacity is filled with isolated dummy vertices so that the partitioner picks which blocks stay partly empty.

Limits of mtkahypar 1.7, measured here: the Steiner-tree objective on hypergraphs takes k <= 64 blocks, and its
precomputation (Steiner trees of up to 4 blocks, k^4 entries capped at 1e8) costs 0.03 s at k=16, 0.2-0.3 s at
k=32 and 3 s at k=64 on one core; a mapping needs at least k vertices and crashes on unpackable weights. So
the mapping descends the tree: onto the lowest level with at most `MAX_BLOCKS` domains under the current one,
then inside each, down to hosts; equidistant blocks are partitioned for km1 (the Steiner-tree metric on a
uniform target). ``multilevel-cut`` goes one level at a time for the cut-net metric weighted by that level's
cost step, the surrogate's exact per-level term. Over-full blocks are repaired by moving their least-connected
units; a library call (not interruptible) starts only when its estimated time fits, else the domain is filled
greedily (hosts with the most room first).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from placement.errors import InternalError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.construct import HostPool, scope_domains, unit_capacity
from placement.solve.multilevel.graph import Term, Tree, Vertices, coarsen, hyperedges, label_groups

__all__ = ["MAX_BLOCKS", "available", "multilevel_candidates"]

MAX_BLOCKS = 32  # blocks per Steiner-tree mapping call (library limit 64; 3 s of precomputation at 64)
DIST_SCALE = 100  # the largest target-graph distance of a step
SECONDS_PER_VERTEX = 1.5e-4  # a DETERMINISTIC call, one thread, a dummy a fifth (2,048 + 2,472 dummies, 32 blocks: 0.32-0.53 s)
STEINER_SECONDS_32 = 0.5  # precomputing the Steiner trees of a 32-block target graph (grows with k^4)
WEIGHT_BUDGET = 2**29  # keeps every Steiner-tree sum inside Mt-KaHyPar's 32-bit weights
_LOCK = threading.Lock()  # the library's seed and thread pool are process-global
_STATE: dict[str, Any] = {}


def _library() -> Any | None:
    try:
        import mtkahypar
    except ImportError:  # an optional speed-up of the search, not a hard dependency of the library
        return None
    return mtkahypar


def available() -> bool:
    """True when the `mtkahypar` package imports."""
    return _library() is not None


def _initializer(threads: int) -> Any:
    """The library's initializer for `threads` threads (re-initialised only when the count changes)."""
    mk = _library()
    if _STATE.get("threads") != threads and mk is not None:
        _STATE.update(init=mk.initialize(threads, False), threads=threads, context=None)
    return _STATE["init"]


class _Mapper:
    """One descent from a scope domain to hosts; `steiner` picks the Steiner-tree or the cut-net variant."""

    def __init__(
        self,
        tree: Tree,
        vx: Vertices,
        terms: list[Term],
        steiner: bool,
        seed: int,
        deadline: float,
        threads: int,
    ) -> None:
        self.tree, self.vx, self.terms = tree, vx, terms
        self.steiner, self.seed, self.deadline, self.threads = steiner, seed, deadline, threads
        self.host_of: dict[int, int] = {}

    def run(self, level: int, k: int) -> dict[int, int] | None:
        """Vertex -> host for all vertices inside domain (level, k), greedily if the descent strands a unit
        (sizes that do not pack); None when they do not fit."""
        if self._descend(level, k, list(range(len(self.vx.size))), list(range(len(self.terms)))):
            return self.host_of
        self.host_of = {}
        return self.host_of if self._greedy(level, k, list(range(len(self.vx.size)))) else None

    def _descend(self, level: int, k: int, verts: list[int], tids: list[int]) -> bool:
        if not verts:
            return True
        vx, tree = self.vx, self.tree
        if level == 0:
            if sum(vx.size[v] for v in verts) > tree.room[0].get(k, 0) or sum(
                vx.whole[v] for v in verts
            ) > tree.slots[0].get(k, 0):
                return False
            self.host_of.update((v, k) for v in verts)
            return True
        target = level - 1
        if self.steiner:
            target = next((li for li in range(level) if len(tree.below(level, k, li)) <= MAX_BLOCKS), target)
        blocks = tree.below(level, k, target)
        if len(blocks) == 1:
            return self._descend(target, blocks[0], verts, tids)
        part: list[int] | None = None
        sizes = sorted(vx.size[v] for v in verts)
        if len(sizes) > 1 and max(tree.room[target][b] for b in blocks) >= sizes[0] + sizes[1]:
            part = self._split(
                level, target, blocks, verts, tids
            )  # (else no term fits a block: any fit is as good)
        if part is None:
            return self._greedy(level, k, verts)
        block_of = dict(zip(verts, part, strict=True))
        by_block: list[list[int]] = [[v for v in verts if block_of[v] == i] for i in range(len(blocks))]
        sub: list[list[int]] = [[] for _ in blocks]
        for t in tids:
            bs = {block_of[v] for v in self.terms[t].verts}
            if len(bs) == 1:
                sub[bs.pop()].append(t)
        return all(self._descend(target, b, by_block[i], sub[i]) for i, b in enumerate(blocks))

    def _split(
        self, level: int, target: int, blocks: list[int], verts: list[int], tids: list[int]
    ) -> list[int] | None:
        """Whole vertices onto block slots first, then the rest with those fixed; block index per vertex."""
        vx, tree = self.vx, self.tree
        whole = [v for v in verts if vx.whole[v]]
        fixed: dict[int, int] = {}
        if whole:
            caps = [tree.slots[target].get(b, 0) * vx.slot for b in blocks]
            got = self._partition(level, target, blocks, caps, whole, tids, {}, vx.slot)
            if got is None:
                return None
            fixed = dict(zip(whole, got, strict=True))
            if len(whole) == len(verts):
                return got
        caps = [tree.room[target][b] for b in blocks]
        return self._partition(level, target, blocks, caps, verts, tids, fixed)

    def _weights(self, level: int, target: int, tids: list[int]) -> tuple[list[int], list[int]]:
        """Integer hyperedge weights of the step's terms and integer distances per meeting level."""
        hi = level if self.steiner else target + 1
        raw = [max(0.0, self.terms[t].cost[hi] - self.terms[t].cost[target]) for t in tids]
        total = [sum(self.terms[t].cost[li] for t in tids) for li in range(level + 1)]
        span = total[level] - total[target]
        dist = [0] * (level + 1)
        for li in range(target + 1, level + 1):
            frac = (total[li] - total[target]) / span if span > 0 else 1.0
            dist[li] = max(1, round(min(1.0, frac) * DIST_SCALE))
        s = sum(raw) * (MAX_BLOCKS - 1) * (DIST_SCALE if self.steiner else 1)  # the largest possible total
        scale = WEIGHT_BUDGET / s if s > 0 else 0.0
        return [min(2**24, round(w * scale)) for w in raw], dist

    def _partition(
        self,
        level: int,
        target: int,
        blocks: list[int],
        caps: list[int],
        verts: list[int],
        tids: list[int],
        fixed: dict[int, int],
        grain: int = 1,
    ) -> list[int] | None:
        """One Mt-KaHyPar call: `verts` onto `blocks` (capacities `caps`), `fixed` vertices held in place; dummies
        of weight `grain` fill the blocks (else its initial partitioning spreads the job in proportion to them)."""
        weights, dist = self._weights(level, target, tids)
        local = {v: i for i, v in enumerate(verts)}
        hes: list[list[int]] = []
        hw: list[int] = []
        for t, w in zip(tids, weights, strict=True):
            pins = [local[v] for v in self.terms[t].verts if v in local]
            if w > 0 and len(pins) > 1:
                hes.append(pins)
                hw.append(w)
        vw = [self.vx.size[v] for v in verts]
        if sum(caps) < sum(vw):
            return None
        if not hes or len(verts) == 1:  # nothing to cut here: fill the blocks
            return _repair(
                [fixed.get(v, 0) for v in verts], vw, caps, [], [], [v not in fixed for v in verts]
            )
        mk = _library()
        if mk is None:
            raise InternalError("a multilevel mapping was asked for without the mtkahypar package")
        kb = len(blocks)
        # the library's mapping needs at least as many vertices as blocks (an invalid-pin error otherwise) and
        # crashes (segmentation fault, mtkahypar 1.7) when the free vertices cannot be packed into the blocks:
        # it is used only where they weigh the same (and, with fixed vertices, 1), counted as 1 each; the
        # partitioner returns an over-full block instead, repaired below
        ws = {vw[i] for i, v in enumerate(verts) if v not in fixed}
        grain = ws.copy().pop() if len(ws) == 1 and not fixed else grain  # dummies as heavy as the vertices
        unit = min(ws) if ws == {grain} and (not fixed or grain == 1) else 0
        use_target = self.steiner and len(set(dist[target + 1 :])) > 1 and kb <= MAX_BLOCKS and unit > 0
        if use_target and unit > 1:
            vw, caps, grain = [1] * len(vw), [c // unit for c in caps], 1
        n_dummy = (sum(caps) - sum(vw)) // grain
        n = len(verts) + n_dummy
        use_target = use_target and n >= kb
        est = (
            0.01
            + SECONDS_PER_VERTEX * len(verts)
            + SECONDS_PER_VERTEX / 5 * n_dummy
            + (STEINER_SECONDS_32 * (kb / 32) ** 4 if use_target else 0.0)
        )
        if time.perf_counter() + est > self.deadline:
            return None
        with _LOCK:
            init = _initializer(self.threads)
            ctx = _STATE.get("context")
            if ctx is None:  # 3 ms to build; the library copies it on every call, so one is reused
                ctx = _STATE["context"] = init.context_from_preset(mk.PresetType.DETERMINISTIC)
                ctx.logging = False
            if use_target:
                ctx.set_mapping_parameters(kb, 0.03)
            else:
                ctx.set_partitioning_parameters(
                    kb, 0.03, mk.Objective.KM1 if self.steiner else mk.Objective.CUT
                )
            ctx.set_individual_target_block_weights(caps)
            mk.set_seed(self.seed)
            hg = init.create_hypergraph(ctx, n, len(hes), hes, vw + [grain] * n_dummy, hw)
            if fixed:
                hg.add_fixed_vertices([fixed.get(v, -1) for v in verts] + [-1] * n_dummy, kb)
            if use_target:
                pairs = list(itertools.combinations(range(kb), 2))
                d = [dist[self.tree.meet(target, blocks[a], blocks[b])] for a, b in pairs]
                phg = hg.map_onto_graph(init.create_target_graph(ctx, kb, len(pairs), pairs, d), ctx)
            else:
                phg = hg.partition(ctx)
            part = list(phg.get_partition())[: len(verts)]
        movable = [v not in fixed for v in verts]
        return _repair(part, vw, caps, hes, hw, movable)

    def _greedy(self, level: int, k: int, verts: list[int]) -> bool:
        """Whole vertices first, then the rest largest first, each into the first host with room (and a slot
        for a whole one), hosts with the most room first."""
        vx, tree = self.vx, self.tree
        hosts = sorted(tree.below(level, k, 0), key=lambda h: (-tree.room[0][h], h))
        room = {h: tree.room[0][h] for h in hosts}
        slots = {h: tree.slots[0].get(h, 0) for h in hosts}
        start = 0
        for v in sorted(verts, key=lambda v: (not vx.whole[v], -vx.size[v], v)):
            while start < len(hosts) and room[hosts[start]] == 0:
                start += 1
            fit = next(
                (h for h in hosts[start:] if room[h] >= vx.size[v] and (slots[h] or not vx.whole[v])), None
            )
            if fit is None:
                return False
            room[fit] -= vx.size[v]
            slots[fit] -= vx.whole[v]
            self.host_of[v] = fit
        return True


def _repair(
    part: list[int], vw: list[int], caps: list[int], hes: list[list[int]], hw: list[int], movable: list[bool]
) -> list[int] | None:
    """Move the least-connected movable vertices out of over-full blocks into the block they are most tied to
    that has room; None when some vertex fits nowhere."""
    load = [sum(w for w, b in zip(vw, part, strict=True) if b == c) for c in range(len(caps))]
    if all(ld <= c for ld, c in zip(load, caps, strict=True)):
        return part
    inc: dict[int, list[int]] = defaultdict(list)
    for i, he in enumerate(hes):
        for v in he:
            inc[v].append(i)

    def ties(v: int, b: int) -> int:
        return sum(hw[i] for i in inc[v] if any(part[u] == b for u in hes[i] if u != v))

    for b in range(len(caps)):
        if load[b] <= caps[b]:
            continue
        members = sorted(
            (v for v in range(len(part)) if part[v] == b and movable[v]),
            key=lambda v: (ties(v, b), -vw[v], v),
        )
        for v in members:
            if load[b] <= caps[b]:
                break
            dest = [c for c in range(len(caps)) if c != b and load[c] + vw[v] <= caps[c]]
            if not dest:
                return None
            c = max(dest, key=lambda c: (ties(v, c), caps[c] - load[c], -c))
            part[v] = c
            load[b] -= vw[v]
            load[c] += vw[v]
    return part if all(ld <= c for ld, c in zip(load, caps, strict=True)) else None


def multilevel_candidates(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    candidates: Sequence[int],
    units: Sequence[tuple[int, ...]],
    *,
    seed: int,
    deadline: float,
    threads: int = 1,
) -> list[tuple[str, list[int]]]:
    """Named full mappings (rank -> device index) from Mt-KaHyPar process mapping; see the module docstring.

    Each uses only `candidates`, each device once, and keeps every unit on one host. Candidates, in order:
    ``multilevel-cut`` (cut-net partitioning level by level inside the tightest domain that holds the job),
    ``multilevel`` (Steiner-tree mapping, same domain), ``multilevel-wide`` (cut-net, in a wider domain that
    holds more TP groups whole, or one level up). The first two get even shares of the time, the third what is
    left; past `deadline` the first is still completed greedily (never an empty answer for lack of time) and
    the others are skipped. Deterministic for a fixed `seed` and `threads` when the deadline does not bind.
    [] when not applicable: pins, spread rules, a device graph (`topology.pair_paths`), units that do not cover
    the ranks once, too few devices, or `mtkahypar` not installed.
    """
    if (
        _library() is None
        or job.constraints.pins
        or job.constraints.spread
        or topology.pair_paths is not None
        or not units
        or sorted(r for u in units for r in u) != list(range(job.ranks))
    ):
        return []
    pool = HostPool.of(topology, candidates)
    sizes = [len(u) for u in units]
    usize = sizes[0] if len(set(sizes)) == 1 else 1
    free = {h: len(devs) // usize * usize for h, devs in pool.devices.items()}
    top = len(topology.levels) - 1
    chosen = label_groups(topology, state, traffic, units, max(free.values(), default=0))
    # the tightest domain that holds the job (all units as large as the largest when sizes differ: a domain
    # that surely holds them), then the tightest that holds as many merged groups whole as the cluster can,
    # else one level up, then the whole cluster
    scopes = scope_domains(topology, unit_capacity(topology, pool, max(sizes)), len(units), limit=1)
    if chosen:
        g = len(chosen[0])
        scopes[1:1] = scope_domains(
            topology,
            unit_capacity(topology, pool, g),
            min(len(chosen), sum(f // g for f in free.values())),
            limit=1,
        )[:1]
    scopes = list(dict.fromkeys([*scopes, (top, 0)]))
    # (name, scope, Steiner-tree objective, weight of its share of the time): the cut-net variant matches the
    # linear surrogate per level; the Steiner-tree one keeps split groups on fewer hosts, which the step-time
    # model rewards (4,096 GPUs at 60%: 1.82 s against 2.95 s a step), so both get an even share
    plan: list[tuple[str, tuple[int, int], bool, float]] = [
        ("multilevel-cut", scopes[0], False, 1.0),
        ("multilevel", scopes[0], True, 1.0),
    ]
    if len(scopes) > 1:
        plan.append(("multilevel-wide", scopes[1], False, 0.25))
    out: list[tuple[str, list[int]]] = []
    prepared: dict[tuple[int, int], tuple[Vertices, Tree, list[Term]]] = {}
    for i, (name, scope, steiner, weight) in enumerate(plan):
        now = time.perf_counter()
        if now >= deadline and out:
            break
        col = topology.domain_column(scope[0])
        in_scope = {h: f for h, f in free.items() if col[pool.devices[h][0]] == scope[1]}
        if scope not in prepared and sum(in_scope.values()) >= job.ranks:
            vx = coarsen(units, chosen, in_scope)
            vertex_of = {r: v for v, us in enumerate(vx.units) for u in us for r in units[u]}
            prepared[scope] = (
                vx,
                Tree.of(topology, in_scope, vx.slot),
                hyperedges(topology, state, traffic, vertex_of),
            )
        prep = prepared.get(scope)
        if prep is None:
            continue
        vx, tree, terms = prep
        share = now + (deadline - now) * weight / sum(p[3] for p in plan[i:])  # its share of what is left
        host_of = _Mapper(tree, vx, terms, steiner, seed, share, threads).run(*scope)
        if host_of is not None:
            out.append((name, _mapping(pool, units, vx, host_of, job.ranks)))
    return out


def _mapping(
    pool: HostPool, units: Sequence[tuple[int, ...]], vx: Vertices, host_of: dict[int, int], n_ranks: int
) -> list[int]:
    """Devices of each host to its vertices in order, units in order inside a vertex, ranks in order inside a unit."""
    left = {h: list(devs) for h, devs in pool.devices.items()}
    out = [-1] * n_ranks
    for v in sorted(host_of):
        devs = left[host_of[v]]
        for u in vx.units[v]:
            for r in units[u]:
                out[r] = devs.pop(0)
    return out
