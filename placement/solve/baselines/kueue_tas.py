"""The kueue-tas baseline: Kueue Topology Aware Scheduling with its default BestFit profile.

Reproduces kubernetes-sigs/kueue ``pkg/cache/scheduler/tas_flavor_snapshot.go`` for one PodSet of 1-GPU pods
with a host-level slice (``podset-slice-required-topology: kubernetes.io/hostname``, ``podset-slice-size``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.baselines.common import domain_paths, prepare

__all__ = ["kueue_tas"]


def kueue_tas(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Kueue TAS BestFit placement; None when no domain Kueue may use holds the job's slices.

    The request modelled: one pod per rank asking for one device, ``podset-preferred-topology`` at the host
    level, slices of `slice_size` pods on one host (`placement.solve.baselines.common`), and a
    ``podset-required-topology`` when a required level holds the whole job (it caps the search).

    Algorithm, after Kueue's ``TASFlavorSnapshot.findTopologyAssignment``:

    1. ``fillInCounts``/``fillInCountsHelper``: a host holds ``floor(free / slice)`` slices and ``free`` pods; a
       domain holds the sums of its children.
    2. ``findLevelWithFitDomains`` from the requested level: sort the level's domains by slices (most first),
       pods (fewest first), then name path (``sortedDomains``); when the top domain holds every slice, take
       ``findBestFitDomainForSlices``: the first domain in that order with the fewest slices that still hold
       the job. With a required level the search starts and ends there (the tightest domain of that level,
       even when a lower domain would hold the job; None when none fits). Without one it starts at the
       preferred level (hosts) and climbs a level while nothing fits; at the top level it takes domains in
       order, each giving all its slices, the last one best fit.
    3. ``updateCountsToMinimumGeneric`` level by level down to the hosts: the children of the chosen domains,
       sorted as above, each give all their slices, and when one holds the rest, the rest goes to the best-fit
       (tightest) child from there on. Slices are never split over hosts.
    4. ``buildAssignment`` sorts the chosen hosts by name path and the ungater's rank-based ordering
       (``pkg/controller/tas/topology_ungater.go``) fills them with consecutive pod indices, so slices go
       to hosts in that order.
    """
    prep = prepare(topology, state, job, traffic)
    if prep is None:
        return None
    need = len(prep.slices)
    if need == 0:
        return prep.fill([])
    n_levels = len(topology.levels)
    slices: list[list[int]] = [[0] * len(topology.domain_names[lv]) for lv in range(n_levels)]
    pods: list[list[int]] = [[0] * len(topology.domain_names[lv]) for lv in range(n_levels)]
    for h, devs in prep.free.items():
        pods[0][h] = len(devs)
        slices[0][h] = prep.capacity(h)
    for lv in range(1, n_levels):
        par = topology.parent[lv - 1]
        for c in range(len(topology.domain_names[lv - 1])):
            slices[lv][par[c]] += slices[lv - 1][c]
            pods[lv][par[c]] += pods[lv - 1][c]
    paths = domain_paths(topology)

    def ordered(lv: int, doms: Sequence[int]) -> list[int]:
        return sorted(doms, key=lambda k: (-slices[lv][k], pods[lv][k], paths[lv][k]))

    def best_fit(lv: int, doms: Sequence[int], needed: int) -> int:
        fitting = [k for k in doms if slices[lv][k] >= needed]
        return (
            min(fitting, key=lambda k: slices[lv][k]) if fitting else doms[0]
        )  # min keeps the first of ties

    found = _fit_domains(topology, prep.cap_level, need, slices, ordered, best_fit)
    if found is None:
        return None
    fit_level, chosen = found
    for lv in range(fit_level, 0, -1):
        kids = ordered(lv - 1, [c for k, _ in chosen for c in topology.children[lv][k]])
        below = lv - 1

        def tightest(doms: list[int], n: int, below: int = below) -> int:
            return best_fit(below, doms, n)

        step = _consume(kids, need, slices[below], tightest)
        if step is None:
            return None
        chosen = step
    plan = sorted(chosen, key=lambda hn: paths[0][hn[0]])
    return prep.fill(plan)


def _fit_domains(
    topology: Topology,
    required: int | None,
    need: int,
    slices: list[list[int]],
    ordered: Callable[[int, Sequence[int]], list[int]],
    best_fit: Callable[[int, Sequence[int], int], int],
) -> tuple[int, list[tuple[int, int]]] | None:
    """``findLevelWithFitDomains`` from the requested level: (the level, [(domain, slices)]) or None.

    With a required level the search stays there: the best-fit domain of that level, or None. Else it starts
    at the preferred level (hosts) and climbs while the level's top domain cannot hold every slice; at the top
    level Kueue takes domains in order, each giving all its slices, the last one best fit.
    """
    levels = [required] if required is not None else list(range(len(topology.levels)))
    for lv in levels:
        doms = ordered(lv, range(len(topology.domain_names[lv])))
        if doms and slices[lv][doms[0]] >= need:
            return lv, [(best_fit(lv, doms, need), need)]
    if required is not None:
        return None
    top = len(topology.levels) - 1
    doms = ordered(top, range(len(topology.domain_names[top])))
    out: list[tuple[int, int]] = []
    left = need
    for i in range(len(doms)):
        if left <= 0:
            break
        d = doms[i]
        if slices[top][d] >= left:
            d = best_fit(top, doms[i:], left)
        take = min(slices[top][d], left)
        if take <= 0:
            break
        out.append((d, take))
        left -= take
    return (top, out) if left <= 0 else None


def _consume(
    doms: list[int], count: int, cap: list[int], best_fit: Callable[[list[int], int], int]
) -> list[tuple[int, int]] | None:
    """``updateCountsToMinimumGeneric`` without leaders: domains in order give all their slices until one can
    hold the rest; that rest goes to the best fit among the remaining domains."""
    out: list[tuple[int, int]] = []
    remaining = count
    for i, d in enumerate(doms):
        if cap[d] >= remaining:
            out.append((best_fit(doms[i:], remaining), remaining))
            return out
        if cap[d] > 0:
            out.append((d, cap[d]))
            remaining -= cap[d]
    return None
