"""Intra-node refinement: which free devices of a host its ranks take, for hosts with non-uniform links.

Small hosts are solved exactly by enumeration; larger ones by pairwise swaps. Scored by `placement.cost.evaluate`.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import defaultdict
from collections.abc import Sequence

from placement.cost.paths import group_path, pair_path
from placement.cost.surrogate import group_seconds, p2p_seconds
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic

__all__ = ["refine_hosts"]

MAX_ENUMERATION = 20_000


def refine_hosts(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    mapping: Sequence[int],
    candidates: Sequence[int],
    deadline: float,
) -> list[int]:
    """A mapping at least as good as `mapping`, with ranks re-seated inside each non-uniform host."""
    out = list(mapping)
    pinned = set(job.constraints.pins)
    cset = set(candidates)
    groups_of: dict[int, list[int]] = defaultdict(list)
    for gi, g in enumerate(traffic.groups):
        for r in g.members:
            groups_of[r].append(gi)
    edges_of: dict[int, list[int]] = defaultdict(list)
    for ei, e in enumerate(traffic.edges):
        edges_of[e.src].append(ei)
        edges_of[e.dst].append(ei)
    ranks_on: dict[int, list[int]] = defaultdict(list)
    for r, d in enumerate(out):
        ranks_on[topology.devices[d].host_index].append(r)
    for h, ranks in sorted(ranks_on.items()):
        if topology.host_types[h].matrix is None or topology.uniform_hosts[h]:
            continue
        if time.perf_counter() > deadline:
            break
        movable = [r for r in ranks if r not in pinned]
        taken_by_pins = {out[r] for r in ranks if r in pinned}
        seats = [d for d in topology.devices_in_domain[0][h] if d in cset and d not in taken_by_pins]
        if len(movable) < 1 or len(seats) < len(movable):
            continue
        gids = sorted({g for r in movable for g in groups_of[r]})
        eids = sorted({e for r in movable for e in edges_of[r]})

        def local_cost(mp: list[int], gids: list[int] = gids, eids: list[int] = eids) -> float:
            s = 0.0
            for gi in gids:
                g = traffic.groups[gi]
                s += group_seconds(g, group_path(topology, state, [mp[r] for r in g.members]))
            for ei in eids:
                e = traffic.edges[ei]
                s += p2p_seconds(
                    e.bytes, e.count, e.exposed, pair_path(topology, state, mp[e.src], mp[e.dst])
                )
            return s

        best_cost = local_cost(out)
        n_perm = math.perm(len(seats), len(movable))
        if n_perm <= MAX_ENUMERATION:
            best_seats = [out[r] for r in movable]
            for perm in itertools.permutations(seats, len(movable)):
                for r, d in zip(movable, perm, strict=True):
                    out[r] = d
                c = local_cost(out)
                if c < best_cost - 1e-15:
                    best_cost, best_seats = c, list(perm)
            for r, d in zip(movable, best_seats, strict=True):
                out[r] = d
        else:
            improved = True
            while improved and time.perf_counter() < deadline:
                improved = False
                for i, r in enumerate(movable):
                    used = {out[x] for x in movable}
                    options = [out[x] for x in movable[i + 1 :]] + [d for d in seats if d not in used]
                    for d in options:
                        other = next((x for x in movable if out[x] == d), None)
                        old = out[r]
                        out[r] = d
                        if other is not None:
                            out[other] = old
                        c = local_cost(out)
                        if c < best_cost - 1e-15:
                            best_cost, improved = c, True
                            break
                        out[r] = old
                        if other is not None:
                            out[other] = d
    return out
