"""What every scheduler baseline shares: pins, the job's slices (ranks a scheduler keeps on one host), free
devices per host, and turning a per-host slice count into a rank -> device mapping.

A slice is a set of ranks a scheduler keeps on one host because the job asks for pods or tasks of that size
(`job_slices`, whatever the rank order):

1. the job requires a label at the host level (``tp: node``): the host-level required units (the pod the job
   names, so such a group is never split);
2. else the job's TP groups when they fit a host: a structured job with ``1 < tp <=`` the largest host's
   device count takes the groups of ranks that differ only in their tp coordinate
   (`placement.model.traffic.dimension_groups`), so ``dp-tp-...`` orders get their real TP groups, not runs
   of consecutive ranks; an explicit job takes its declared ``tp`` groups and edges (connected components);
   one Kueue pod or one Slurm task (``--gpus-per-task=<size>``) per TP group;
3. else single ranks (one rank per pod or task).

A required level that holds the whole job (one unit covers every rank) caps the level the schedulers may use:
Kueue's ``podset-required-topology``, Slurm's ``--switches``. Requirements on other groups above the host are
not expressible in either scheduler's request and are not honoured here (the mapping may then break them, and
`placement.model.validate` says so).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, dimension_groups
from placement.solve.units import candidate_devices, required_units

__all__ = ["Prepared", "apply_pins", "candidates_of", "domain_paths", "job_slices", "prepare", "slice_size"]

SLICE_LABEL = "tp"
"""The group label whose groups are a job's slices when no host-level requirement names one."""


_last = threading.local()  # per thread: the last (topology, state, job) and its candidate devices


def candidates_of(topology: Topology, state: ClusterState, job: Job) -> list[int]:
    """`candidate_devices`, computed once for the baselines of one request (they all ask for the same job on the
    same state, one after the other): a copy of the last answer when the three objects are the same."""
    last = getattr(_last, "value", None)
    if last is not None and last[0] is topology and last[1] is state and last[2] is job:
        return list(last[3])
    cands = candidate_devices(topology, state, job)
    _last.value = (topology, state, job, cands)
    return list(cands)


def apply_pins(topology: Topology, job: Job, cands: list[int]) -> tuple[dict[int, int], list[int]] | None:
    """(rank -> pinned device, candidates left); None when a pin names an unknown or unusable device."""
    pinned: dict[int, int] = {}
    for r, dev_id in job.constraints.pins.items():
        d = topology.device_index(dev_id)
        if d is None or d not in cands:
            return None
        pinned[r] = d
    used = set(pinned.values())
    return pinned, [d for d in cands if d not in used]


def _largest_host(topology: Topology, job: Job) -> int:
    """Device count of the largest host that has devices of the job's kind."""
    kind = job.device_kind
    return max((nt.devices for nt in topology.host_types if kind is None or nt.kind == kind), default=0)


def _host_units(topology: Topology, job: Job, traffic: Traffic) -> list[tuple[int, ...]] | None:
    units = required_units(topology, job, traffic)
    return [u.ranks for u in units[0]] if 0 in units else None


def _label_components(job: Job, traffic: Traffic, label: str) -> list[tuple[int, ...]]:
    """Connected components (sorted rank tuples, by first rank) of the groups and edges labelled `label`;
    ranks outside them are single-rank components."""
    root = list(range(job.ranks))

    def find(x: int) -> int:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    def union(a: int, b: int) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            root[max(ra, rb)] = min(ra, rb)

    for g in traffic.groups:
        if g.label == label:
            for m in g.members[1:]:
                union(g.members[0], m)
    for e in traffic.edges:
        if e.label == label:
            union(e.src, e.dst)
    comp: dict[int, list[int]] = {}
    for r in range(job.ranks):
        comp.setdefault(find(r), []).append(r)
    return [tuple(v) for _, v in sorted(comp.items())]


def job_slices(topology: Topology, job: Job, traffic: Traffic) -> tuple[int, list[tuple[int, ...]], bool]:
    """(slice size, the slices as sorted rank tuples by first rank, whether a host-level requirement made them).

    The rule is in the module docstring. Ranks outside every slice group are slices of one rank.

    >>> from dataclasses import replace
    >>> from placement.sim.scenarios import fat_tree, megatron_job
    >>> from placement.model.traffic import job_traffic
    >>> j = megatron_job("j", tp=2, pp=1, dp=2)
    >>> assert j.parallel is not None
    >>> j = replace(j, parallel=replace(j.parallel, order="dp-tp-cp-ep-pp"))
    >>> job_slices(fat_tree(64), j, job_traffic(j))[:2]
    (2, [(0, 2), (1, 3)])
    """
    units = _host_units(topology, job, traffic)
    if units is not None:
        return max(len(u) for u in units), sorted(units), True
    largest = _largest_host(topology, job)
    par = job.parallel
    if par is not None:
        if 1 < par.tp <= largest:
            return par.tp, dimension_groups(par, ("tp",)), False
    else:
        comps = _label_components(job, traffic, SLICE_LABEL)
        size = max((len(c) for c in comps), default=1)
        if 1 < size <= largest:
            return size, comps, False
    return 1, [(r,) for r in range(job.ranks)], False


def slice_size(topology: Topology, job: Job, traffic: Traffic) -> int:
    """Ranks a scheduler keeps on one host for this job (the rule is in the module docstring).

    >>> from placement.sim.scenarios import fat_tree, megatron_job
    >>> from placement.model.traffic import job_traffic
    >>> t = fat_tree(64)
    >>> j = megatron_job("j", tp=4, pp=2, dp=2)
    >>> slice_size(t, j, job_traffic(j))
    4
    """
    return job_slices(topology, job, traffic)[0]


def _cap_level(topology: Topology, job: Job, traffic: Traffic) -> int | None:
    """Lowest level whose required units hold the whole job (one unit of every rank), if any."""
    if job.ranks <= 1:
        return None
    units = required_units(topology, job, traffic)
    whole = [lv for lv, us in units.items() if len(us) == 1 and len(us[0].ranks) == job.ranks]
    return min(whole) if whole else None


def domain_paths(topology: Topology) -> list[list[tuple[str, ...]]]:
    """paths[l][k]: domain names from the top level down to domain k of level l (Kueue's ``levelValues``)."""
    top = len(topology.levels) - 1
    paths: list[list[tuple[str, ...]]] = [[] for _ in topology.levels]
    paths[top] = [(n,) for n in topology.domain_names[top]]
    for lv in range(top - 1, -1, -1):
        par = topology.parent[lv]
        paths[lv] = [(*paths[lv + 1][par[k]], n) for k, n in enumerate(topology.domain_names[lv])]
    return paths


@dataclass(frozen=True)
class Prepared:
    """A job seen as a scheduler sees it: slices to place, free devices per host, and what is fixed already.

    `slices` are rank tuples in placement order, each at most `size` ranks and kept on one host; `free[h]` are the
    free candidate devices of host h in local order (pins and pin-side fills removed); `fixed` maps ranks already
    placed (pins, and the rest of a slice that holds a pinned rank, put next to the pin when that host has room);
    `cap_level` is the level the whole job must stay inside (None: no such rule).
    """

    size: int
    slices: tuple[tuple[int, ...], ...]
    free: dict[int, tuple[int, ...]]
    fixed: dict[int, int]
    cap_level: int | None
    ranks: int

    def capacity(self, host: int) -> int:
        """Whole slices host `host` can take."""
        return len(self.free.get(host, ())) // self.size

    def fill(self, plan: Sequence[tuple[int, int]]) -> list[int] | None:
        """Slices in order onto `plan` = [(host, slice count)] in order; None when the plan does not place all."""
        out = [-1] * self.ranks
        for r, d in self.fixed.items():
            out[r] = d
        it = iter(self.slices)
        for h, n in plan:
            devs = list(self.free.get(h, ()))
            pos = 0
            for _ in range(n):
                s = next(it, None)
                if s is None:
                    break
                if pos + len(s) > len(devs):
                    return None
                for r in s:
                    out[r] = devs[pos]
                    pos += 1
        return out if all(d >= 0 for d in out) else None

    def within_cap(self, topology: Topology, hosts: Sequence[int]) -> bool:
        """True when `hosts` (and the fixed devices) share one domain at `cap_level` (or there is no cap)."""
        if self.cap_level is None:
            return True
        col = topology.domain_column(self.cap_level)
        per_host = topology.devices_in_domain[0]
        doms = {col[per_host[h][0]] for h in hosts} | {col[d] for d in self.fixed.values()}
        return len(doms) <= 1


def prepare(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> Prepared | None:
    """The job's slices and the free devices per host; None when a pin names a device the job cannot use, or
    when a required host-level unit holding a pinned rank cannot fit on that rank's host."""
    cands = candidates_of(topology, state, job)
    pins = apply_pins(topology, job, cands)
    if pins is None:
        return None
    pinned, rest = pins
    size, units, required = job_slices(topology, job, traffic)
    free: dict[int, list[int]] = {}
    for d in rest:
        free.setdefault(topology.devices[d].host_index, []).append(d)
    fixed = dict(pinned)
    slices: list[tuple[int, ...]] = []
    for u in units:
        left = tuple(r for r in u if r not in pinned)
        if not left:
            continue
        if len(left) < len(
            u
        ):  # the rest of a partly pinned slice goes next to its first pin when there is room
            h = topology.devices[pinned[next(r for r in u if r in pinned)]].host_index
            room = free.get(h, [])
            if len(room) >= len(left):
                for r in left:
                    fixed[r] = room.pop(0)
                continue
            if required:
                return None  # a required unit cannot stay on its pinned rank's host
        slices.append(left)
    return Prepared(
        size,
        tuple(slices),
        {h: tuple(v) for h, v in free.items()},
        fixed,
        _cap_level(topology, job, traffic),
        job.ranks,
    )


def _rank_best_fit(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """The old ``topology-greedy``: Kueue-style best fit with single-rank units and fullest hosts first.

    Kept for tests that show what slices change: it places one device per rank and so may split a TP group over
    host fragments. Required levels and slices are ignored on purpose.
    """
    cands = candidates_of(topology, state, job)
    pins = apply_pins(topology, job, cands)
    if pins is None:
        return None
    pinned, rest = pins
    ranks = [r for r in range(job.ranks) if r not in pinned]
    out = [-1] * job.ranks
    for r, d in pinned.items():
        out[r] = d
    if not ranks:
        return out
    col = topology.domain_column(0)
    free_in: dict[int, list[int]] = {}
    for d in rest:
        free_in.setdefault(col[d], []).append(d)
    n_levels = len(topology.levels)
    cap: list[list[int]] = [[0] * len(topology.domain_names[li]) for li in range(n_levels)]
    for k, devs in free_in.items():
        cap[0][k] = len(devs)
    for li in range(1, n_levels):
        par = topology.parent[li - 1]
        for c, v in enumerate(cap[li - 1]):
            cap[li][par[c]] += v
    need = len(ranks)
    choice: tuple[int, int] | None = None
    for li in range(n_levels):
        fits = [k for k, v in enumerate(cap[li]) if v >= need]
        if fits:
            choice = (li, min(fits, key=lambda k: (cap[li][k], k)))
            break
    if choice is None:
        return None
    plan: list[tuple[int, int]] = []

    def take(li: int, k: int, demand: int) -> None:
        if li == 0:
            plan.append((k, demand))
            return
        kids = sorted(topology.children[li][k], key=lambda c: (-cap[li - 1][c], c))
        while demand > 0 and kids:
            fit = [c for c in kids if cap[li - 1][c] >= demand]
            if fit:
                take(li - 1, min(fit, key=lambda c: (cap[li - 1][c], c)), demand)
                return
            c = kids.pop(0)
            if cap[li - 1][c] == 0:
                return
            take(li - 1, c, cap[li - 1][c])
            demand -= cap[li - 1][c]

    take(choice[0], choice[1], need)
    it = iter(ranks)
    for h, n in plan:
        for d in free_in[h][:n]:
            out[next(it)] = d
    return out if all(x >= 0 for x in out) else None
