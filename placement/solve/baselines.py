"""The two baselines: first-fit (topology-blind) and topology-greedy (Kueue TAS / Slurm tree best fit).

Both honour occupancy, failures, kind, exclusions and pins; topology-greedy also keeps the finest required unit
(e.g. a TP group under ``tp: node``) inside one domain. Neither looks at traffic volumes or spread rules.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.job import Job
from placement.solve.units import candidate_devices, required_units
from placement.state import ClusterState
from placement.topology import Topology
from placement.traffic import Traffic

__all__ = ["first_fit", "topology_greedy"]


def _apply_pins(topology: Topology, job: Job, cands: list[int]) -> tuple[dict[int, int], list[int]] | None:
    pinned: dict[int, int] = {}
    for r, dev_id in job.constraints.pins.items():
        d = topology.device_index(dev_id)
        if d is None or d not in cands:
            return None
        pinned[r] = d
    used = set(pinned.values())
    return pinned, [d for d in cands if d not in used]


def first_fit(topology: Topology, state: ClusterState, job: Job) -> list[int] | None:
    """Ranks in order onto usable devices in cluster order; None when there are too few."""
    cands = candidate_devices(topology, state, job)
    pins = _apply_pins(topology, job, cands)
    if pins is None:
        return None
    pinned, rest = pins
    free_ranks = [r for r in range(job.ranks) if r not in pinned]
    if len(rest) < len(free_ranks):
        return None
    out = [-1] * job.ranks
    for r, d in pinned.items():
        out[r] = d
    for r, d in zip(free_ranks, rest, strict=False):
        out[r] = d
    return out


def topology_greedy(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Kueue TAS-style best fit. None when no domain can hold the job's units.

    Units are the rank sets the finest required level forces together (single ranks if none). The unit
    capacity of a domain counts whole units its level-L subdomains can hold. The job goes to the tightest
    domain at the lowest level whose capacity suffices; inside it, children are taken largest capacity first,
    and the last, partial demand goes to the tightest child that fits (best fit). Ranks fill in job order.
    """
    cands = candidate_devices(topology, state, job)
    pins = _apply_pins(topology, job, cands)
    if pins is None:
        return None
    pinned, rest = pins
    units_by_level = required_units(topology, job, traffic)
    if units_by_level:
        lvl = min(units_by_level)
        units = [tuple(r for r in u.ranks if r not in pinned) for u in units_by_level[lvl]]
        units = [u for u in units if u]
    else:
        lvl = 0
        units = [(r,) for r in range(job.ranks) if r not in pinned]
    if not units:
        out = [-1] * job.ranks
        for r, d in pinned.items():
            out[r] = d
        return out
    usize = max(len(u) for u in units)
    # free devices per level-`lvl` domain
    col = topology.domain_column(lvl)
    free_in: dict[int, list[int]] = {}
    for d in rest:
        free_in.setdefault(col[d], []).append(d)
    n_levels = len(topology.levels)
    cap: list[list[int]] = [[0] * len(topology.domain_names[li]) for li in range(n_levels)]
    for k, devs in free_in.items():
        cap[lvl][k] = len(devs) // usize
    for li in range(lvl + 1, n_levels):
        par = topology.parent[li - 1]
        for c, v in enumerate(cap[li - 1]):
            cap[li][par[c]] += v
    need = len(units)
    choice: tuple[int, int] | None = None
    for li in range(lvl, n_levels):
        fits = [k for k, v in enumerate(cap[li]) if v >= need]
        if fits:
            choice = (li, min(fits, key=lambda k: (cap[li][k], k)))
            break
    if choice is None:
        return None
    plan: list[tuple[int, int]] = []  # (level-lvl domain, units)

    def take(li: int, k: int, demand: int) -> None:
        if li == lvl:
            plan.append((k, demand))
            return
        kids = sorted(topology.children[li][k], key=lambda c: (-cap[li - 1][c], c))
        while demand > 0:
            fit = [c for c in kids if cap[li - 1][c] >= demand]
            if fit:
                c = min(fit, key=lambda c: (cap[li - 1][c], c))
                take(li - 1, c, demand)
                return
            c = kids.pop(0)
            if cap[li - 1][c] == 0:
                return
            take(li - 1, c, cap[li - 1][c])
            demand -= cap[li - 1][c]

    take(choice[0], choice[1], need)
    out = [-1] * job.ranks
    for r, d in pinned.items():
        out[r] = d
    it = iter(units)
    for k, n in plan:
        devs = _fullest_hosts_first(topology, free_in[k])
        pos = 0
        for _ in range(n):
            u = next(it)
            # a unit must not straddle hosts when lvl == 0; devices are grouped per host already
            for r in u:
                out[r] = devs[pos]
                pos += 1
    return out if all(x >= 0 for x in out) else None


def _fullest_hosts_first(topology: Topology, devs: Sequence[int]) -> list[int]:
    """Devices grouped per host, hosts with the most free devices first (fewest hosts per unit), then order."""
    by_host: dict[int, list[int]] = {}
    for d in devs:
        by_host.setdefault(topology.devices[d].host_index, []).append(d)
    hosts = sorted(by_host, key=lambda h: (-len(by_host[h]), h))
    return [d for h in hosts for d in by_host[h]]
