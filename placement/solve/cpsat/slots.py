"""Slots for the unit program and the way back to devices: hosts or level-1 domains, symmetry pruning, hints.

`realize` turns a unit -> slot assignment into a rank -> device mapping: whole units first, then (leaf slots)
the units that must span hosts, packed into the domain's remaining devices, largest fragments first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from placement.errors import InternalError
from placement.model.job import Job
from placement.model.topology import Topology
from placement.solve.construct import HostPool
from placement.solve.cpsat.program import Slots

__all__ = ["assignment_from_mapping", "host_slots", "leaf_slots", "realize", "sorted_hint", "symmetry_chains"]


def host_classes(
    topology: Topology, pool: HostPool, hosts: Sequence[int], max_size: int, keep: int
) -> list[int]:
    """Exact symmetry pruning: hosts with the same ancestors and free count are interchangeable; keep `keep`
    of each class. Then leaves (level 1) with the same parent and the same host multiset: keep `keep`."""
    n_levels = len(topology.levels)
    cls: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for h in hosts:
        anc = tuple(topology.domain_of(pool.devices[h][0], li) for li in range(1, n_levels))
        nt = topology.host_types[h]
        key = (
            anc,
            min(pool.free(h), max_size),
            nt.name if nt.matrix is not None else "",
            tuple(topology.devices[d].local_index for d in pool.devices[h])
            if nt.matrix is not None or topology.rail_policy
            else (),
        )
        cls[key].append(h)
    kept = [h for v in cls.values() for h in v[:keep]]
    if n_levels < 3:
        return sorted(kept)
    # leaf-level symmetry
    by_leaf: dict[int, list[int]] = defaultdict(list)
    for h in kept:
        by_leaf[topology.domain_of(pool.devices[h][0], 1)].append(h)
    leaf_cls: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for leaf, hs in by_leaf.items():
        sig = (
            topology.parent[1][leaf],
            tuple(sorted((min(pool.free(h), max_size), topology.host_types[h].name) for h in hs)),
        )
        leaf_cls[sig].append(leaf)
    out: list[int] = []
    for leaves in leaf_cls.values():
        for leaf in leaves[:keep]:
            out.extend(by_leaf[leaf])
    return sorted(out)


def host_chains(topology: Topology, pool: HostPool) -> dict[int, list[int]]:
    """Every candidate host's domain chain (chain[h][0] == h)."""
    n_levels = len(topology.levels)
    return {
        h: [topology.domain_of(devs[0], li) for li in range(n_levels)] for h, devs in pool.devices.items()
    }


def host_slots(topology: Topology, pool: HostPool, hosts: Sequence[int]) -> Slots:
    return Slots({h: pool.free(h) for h in hosts}, host_chains(topology, pool))


def leaf_slots(topology: Topology, pool: HostPool, usize: int, keep: int, *, split: bool) -> Slots:
    """Level-1 domains as slots: room for units (whole units only, or every free device when units may split),
    the units each holds whole, and the domain chain; interchangeable domains pruned to `keep` of a class."""
    n_levels = len(topology.levels)
    room: dict[int, int] = defaultdict(int)
    whole: dict[int, int] = defaultdict(int)
    for devs in pool.devices.values():
        k = topology.domain_of(devs[0], 1)
        whole[k] += len(devs) // usize
        room[k] += len(devs) if split else (len(devs) // usize) * usize
    chain: dict[int, list[int]] = {}
    classes: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for k, r in sorted(room.items()):
        if r < usize:
            continue
        c = [-1, k]
        for li in range(2, n_levels):
            c.append(topology.parent[li - 1][c[-1]])
        chain[k] = c
        classes[(r, whole[k], *c[2:])].append(k)
    kept = sorted(k for ks in classes.values() for k in ks[:keep])
    return Slots({k: room[k] for k in kept}, chain, True, {k: whole[k] for k in kept})


def realize(
    topology: Topology,
    pool: HostPool,
    units: Sequence[tuple[int, ...]],
    slots: Slots,
    assign: dict[int, int],
    n_ranks: int,
    pins: dict[int, int] | None = None,
) -> list[int] | None:
    """Rank -> device for a unit -> slot assignment; None when a leaf slot's devices run out."""
    out = [-1] * n_ranks
    pins = pins or {}
    taken = set(pins.values())
    for r, d in pins.items():
        out[r] = d
    if not slots.leaf:
        left = {h: [d for d in devs if d not in taken] for h, devs in pool.devices.items()}
        for u in sorted(assign):
            for r in units[u]:
                if r not in pins:
                    out[r] = left[assign[u]].pop(0)
        return out
    by_leaf: dict[int, list[int]] = defaultdict(list)
    for u in sorted(assign):
        by_leaf[assign[u]].append(u)
    hosts_in: dict[int, list[int]] = defaultdict(list)
    for h in sorted(pool.devices, key=lambda h: (-pool.free(h), h)):
        hosts_in[topology.domain_of(pool.devices[h][0], 1)].append(h)
    for leaf, us in by_leaf.items():
        left = {h: list(pool.devices[h]) for h in hosts_in[leaf]}
        pending: list[int] = []
        for u in us:  # whole units, hosts with the most free devices first
            size = len(units[u])
            host = next((h for h in hosts_in[leaf] if len(left[h]) >= size), None)
            if host is None:
                pending.append(u)
                continue
            for r in units[u]:
                out[r] = left[host].pop(0)
        for u in pending:  # the rest spans hosts: largest fragments first, so each unit touches few hosts
            for r in units[u]:
                h = max(hosts_in[leaf], key=lambda h: (len(left[h]), -h))
                if not left[h]:
                    return None
                out[r] = left[h].pop(0)
    return out


def assignment_from_mapping(
    topology: Topology,
    units: Sequence[tuple[int, ...]],
    mapping: Sequence[int],
    *,
    leaf: bool = False,
    partial: bool = False,
) -> dict[int, int] | None:
    """unit -> host (or level-1 domain) of a mapping; None when a unit spans several (`partial`: leave it out)."""
    out: dict[int, int] = {}
    for i, u in enumerate(units):
        where = {
            topology.domain_of(mapping[r], 1) if leaf else topology.devices[mapping[r]].host_index for r in u
        }
        if len(where) != 1:
            if partial:
                continue
            return None
        out[i] = where.pop()
    return out


def sorted_hint(
    job: Job, units: list[tuple[int, ...]], chain: list[int], assign: dict[int, int]
) -> dict[int, int]:
    """Relabel one symmetric dimension of a hint so that the chain's representatives are in slot order."""
    par = job.parallel
    if par is None:
        raise InternalError(f"sorted_hint needs a structured job (parallel sizes); job {job.name!r} has none")
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    c0 = [par.coords(units[u][0]) for u in chain]
    dim = next(
        d for d in ("dp", "cp", "ep") if par.size(d) == len(chain) and len({c[d] for c in c0}) == len(chain)
    )
    order = sorted(
        range(len(chain)), key=lambda i: (assign[chain[i]], i)
    )  # new index j takes old index order[j]
    out: dict[int, int] = {}
    for u, slot in assign.items():
        c = par.coords(units[u][0])
        new_index = order.index(c[dim])
        c[dim] = new_index
        out[unit_of[par.rank_of(c)]] = slot
    return out


def symmetry_chains(job: Job, units: list[tuple[int, ...]]) -> list[list[int]]:
    """Units whose order can be fixed without losing optimality: structured jobs are symmetric under any
    permutation of the indices of one collective dimension (dp, cp or ep) applied to every rank at once, so
    the representatives (all other coordinates 0) may be taken in non-decreasing host order."""
    par = job.parallel
    if par is None or job.constraints.pins or job.constraints.spread:
        return []
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    dims = [d for d in ("dp", "cp", "ep") if par.size(d) > 1]
    if not dims:
        return []
    dim = max(dims, key=lambda d: (par.size(d), d))
    reps: list[int] = []
    for i in range(par.size(dim)):
        c = {d: 0 for d in ("tp", "cp", "ep", "dp", "pp")}
        c[dim] = i
        reps.append(unit_of[par.rank_of(c)])
    if len(set(reps)) != len(reps):
        return []  # the dimension lives inside units
    # the symmetry must map units to units: every unit must be a union of whole coordinate lines of tp only
    return [reps]
