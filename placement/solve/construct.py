"""Fast constructive placements: rank-unit orders packed onto topology-ordered host sequences.

Each candidate is scored by the exact cost model; the best is the optimizer's hint and its fallback.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from placement.model.job import DIMENSIONS, Job
from placement.model.topology import Topology

__all__ = ["HostPool", "candidate_orders", "host_sequences", "pack_units"]


@dataclass
class HostPool:
    """Candidate devices grouped by host, in cluster order."""

    devices: dict[int, list[int]]  # host index -> free candidate devices (local order)

    @staticmethod
    def of(topology: Topology, candidates: Sequence[int]) -> HostPool:
        by_host: dict[int, list[int]] = {}
        for d in candidates:
            by_host.setdefault(topology.devices[d].host_index, []).append(d)
        return HostPool(by_host)

    def free(self, h: int) -> int:
        return len(self.devices.get(h, ()))


def unit_capacity(topology: Topology, pool: HostPool, usize: int) -> list[list[int]]:
    """cap[l][k]: whole units of `usize` ranks that domain k of level l holds (host-bound units)."""
    n_levels = len(topology.levels)
    cap = [[0] * len(topology.domain_names[li]) for li in range(n_levels)]
    for h, devs in pool.devices.items():
        cap[0][h] = len(devs) // usize
    for li in range(1, n_levels):
        par = topology.parent[li - 1]
        for c, v in enumerate(cap[li - 1]):
            if v:
                cap[li][par[c]] += v
    return cap


def scope_domains(
    topology: Topology, cap: list[list[int]], need: int, limit: int = 3
) -> list[tuple[int, int]]:
    """Domains that can hold `need` units: the tightest few at the lowest level that fits, and one level up."""
    out: list[tuple[int, int]] = []
    for li in range(len(topology.levels)):
        fits = sorted((k for k, v in enumerate(cap[li]) if v >= need), key=lambda k: (cap[li][k], k))
        if fits:
            out.extend((li, k) for k in fits[:limit])
            if li + 1 < len(topology.levels):
                up = sorted(
                    (k for k, v in enumerate(cap[li + 1]) if v >= need), key=lambda k: (cap[li + 1][k], k)
                )
                out.extend((li + 1, k) for k in up[:1])
            break
    return out


def host_sequences(
    topology: Topology, pool: HostPool, cap: list[list[int]], scope: tuple[int, int]
) -> list[list[int]]:
    """Host orders inside a scope domain: depth-first, children by unit capacity (largest first; tightest
    first), hosts that hold more first."""
    seqs: list[list[int]] = []
    for largest_first in (True, False):
        seq: list[int] = []

        def dfs(li: int, k: int, largest_first: bool = largest_first, seq: list[int] = seq) -> None:
            if li == 0:
                if pool.free(k):
                    seq.append(k)
                return
            kids = [
                c for c in topology.children[li][k] if cap[li - 1][c] > 0 or (li - 1 == 0 and pool.free(c))
            ]
            kids.sort(key=lambda c: ((-cap[li - 1][c]) if largest_first else cap[li - 1][c], c))
            for c in kids:
                dfs(li - 1, c)

        dfs(*scope)
        seqs.append(seq)
    return seqs


def pack_units(
    units: Sequence[tuple[int, ...]],
    hosts: Sequence[int],
    pool: HostPool,
    n_ranks: int,
    all_hosts: Sequence[int] | None = None,
) -> list[int] | None:
    """Whole units onto hosts in sequence; what does not fit whole is split over what is left (in sequence,
    then over `all_hosts`). None when devices run out."""
    left = {h: list(pool.devices.get(h, ())) for h in hosts}
    out = [-1] * n_ranks
    pending: list[tuple[int, ...]] = []
    hi = 0
    hseq = list(hosts)
    for u in units:
        placed = False
        while hi < len(hseq):
            h = hseq[hi]
            if len(left[h]) >= len(u):
                for r in u:
                    out[r] = left[h].pop(0)
                placed = True
                break
            hi += 1
        if not placed:
            pending.append(u)
    if pending:
        rest = [d for h in hseq for d in left[h]]
        if all_hosts is not None:
            seen = set(hseq)
            rest += [d for h in all_hosts if h not in seen for d in pool.devices.get(h, ())]
        need = sum(len(u) for u in pending)
        if len(rest) < need:
            return None
        it = iter(rest)
        for u in pending:
            for r in u:
                out[r] = next(it)
    return out


def candidate_orders(
    job: Job, units: Sequence[tuple[int, ...]], max_orders: int = 24
) -> list[list[tuple[int, ...]]]:
    """Unit orders to try: the job's own order, then (structured jobs) every order of the non-trivial
    dimensions not already inside a unit, fastest first."""
    orders: list[list[tuple[int, ...]]] = [list(units)]
    par = job.parallel
    if par is None:
        return orders
    in_unit = set()
    if units and len(units[0]) > 1:
        c0, c1 = par.coords(units[0][0]), par.coords(units[0][1])
        in_unit = {d for d in DIMENSIONS if c0[d] != c1[d]}
    dims = [d for d in DIMENSIONS if par.size(d) > 1 and d not in in_unit]
    coords = [par.coords(u[0]) for u in units]
    seen = {tuple(range(len(units)))}
    for perm in itertools.permutations(dims):
        key = sorted(range(len(units)), key=lambda i: tuple(coords[i][d] for d in reversed(perm)))
        t = tuple(key)
        if t in seen:
            continue
        seen.add(t)
        orders.append([units[i] for i in key])
        if len(orders) >= max_orders:
            break
    return orders


def best_constructive(
    topology: Topology,
    pool: HostPool,
    job: Job,
    units: Sequence[tuple[int, ...]],
    score: Callable[[list[int]], float],
    deadline: float,
) -> tuple[list[int] | None, float, int]:
    """Try unit orders x scope domains x host sequences until `deadline`; return (mapping, cost, tried)."""
    usize = max(len(u) for u in units)
    cap = unit_capacity(topology, pool, usize)
    scopes = scope_domains(topology, cap, len(units))
    top = (len(topology.levels) - 1, 0)
    if top not in scopes:
        scopes.append(top)
    all_hosts = sorted(pool.devices)
    best: list[int] | None = None
    best_cost = float("inf")
    tried = 0
    orders = candidate_orders(job, units)
    for sc in scopes:
        for seq in host_sequences(topology, pool, cap, sc):
            for order in orders:
                m = pack_units(order, seq, pool, job.ranks, all_hosts)
                if m is None:
                    continue
                c = score(m)
                tried += 1
                if c < best_cost:
                    best, best_cost = m, c
                if time.perf_counter() > deadline and best is not None:
                    return best, best_cost, tried
    return best, best_cost, tried
