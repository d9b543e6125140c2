"""Defragmentation hint (what-if): which running jobs must move, and how many of their ranks, to free whole hosts
in one domain of a level for a job that does not fit today. A Pareto set of (moved ranks, jobs touched).

Reads the job-labelled occupancy of `ClusterState.occupied` (device -> job id); changes nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from placement.errors import InputError, Problem
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["DefragAnswer", "DefragResult", "defrag"]


@dataclass
class DefragAnswer:
    """Free `hosts` (whole) in `domain`: the ranks of each job (`jobs`: job id -> ranks that move) leave them.
    `room_elsewhere`: free devices outside the domain's chosen hosts (where the moved ranks could go)."""

    domain: str
    hosts: list[str]
    jobs: dict[str, int]
    moved_ranks: int
    room_elsewhere: int
    devices: list[tuple[str, str]] = field(default_factory=list)  # (job id, device id) that move

    @property
    def jobs_touched(self) -> int:
        return len(self.jobs)


@dataclass
class DefragResult:
    level: str
    hosts_needed: int
    fits_today: bool
    answers: list[DefragAnswer]
    considered: int  # domains of the level that could hold the hosts at all
    reasons: list[str] = field(default_factory=list)


def hosts_needed(topology: Topology, job: Job) -> int:
    """Whole hosts a job needs: its ranks over the devices of a host of its kind."""
    per = max(
        (nt.devices for nt in topology.host_types if job.device_kind is None or nt.kind == job.device_kind),
        default=1,
    )
    return math.ceil(job.ranks / per)


def defrag(
    topology: Topology,
    state: ClusterState,
    level: str,
    hosts: int,
    *,
    kind: str | None = None,
    keep: tuple[str, ...] = (),
    limit: int = 5,
) -> DefragResult:
    """Free `hosts` whole hosts (of device `kind`) under one domain of `level`, moving as few ranks of running
    jobs as possible; `keep`: job ids that must not move. Per domain the cheapest hosts (fewest occupied
    devices) are exactly the least-moves answer; a second pick per domain touches the fewest jobs. The answer
    set keeps the Pareto front of (moved ranks, jobs touched), at most `limit` points."""
    problems: list[Problem] = []
    try:
        li = topology.level_index(level)
    except KeyError:
        problems.append(Problem("level", f"unknown level {level!r}; levels are {list(topology.level_names)}"))
        li = -1
    if hosts < 1:
        problems.append(Problem("hosts", f"must be >= 1, got {hosts}"))
    if kind is not None and kind not in topology.kinds():
        problems.append(
            Problem("kind", f"no device of kind {kind!r}; the cluster has {list(topology.kinds())}")
        )
    if problems:
        raise InputError("whatif defrag", problems)
    host_devs = topology.devices_in_domain[0]
    col = topology.domain_column(li)
    names = topology.domain_names[li]
    by_domain: dict[int, list[int]] = {}
    for h, devs in enumerate(host_devs):
        if kind is not None and topology.host_types[h].kind != kind:
            continue
        by_domain.setdefault(col[devs[0]], []).append(h)
    keep_set = set(keep)
    free_total = sum(
        1
        for d in range(topology.num_devices)
        if d not in state.failed
        and d not in state.occupied
        and (kind is None or topology.devices[d].kind == kind)
    )

    def clear_cost(h: int) -> tuple[int, Counter[str]] | None:
        devs = host_devs[h]
        if any(d in state.failed for d in devs):
            return None
        jobs = Counter(state.occupied[d] for d in devs if d in state.occupied)
        if keep_set & set(jobs):
            return None
        return sum(jobs.values()), jobs

    answers: list[DefragAnswer] = []
    fits = False
    considered = 0
    best_clearable = 0
    for k, hs in sorted(by_domain.items()):
        costs: list[tuple[int, tuple[int, Counter[str]]]] = []
        for h in hs:
            c = clear_cost(h)
            if c is not None:
                costs.append((h, c))
        best_clearable = max(best_clearable, len(costs))
        if len(costs) < hosts:
            continue
        considered += 1
        picks = [sorted(costs, key=lambda hc: (hc[1][0], len(hc[1][1]), hc[0]))[:hosts]]
        # fewest jobs: greedily take hosts whose jobs are already touched, then the cheapest new job
        chosen: list[tuple[int, tuple[int, Counter[str]]]] = []
        touched: set[str] = set()
        pool = list(costs)
        while len(chosen) < hosts:
            hc = min(pool, key=lambda hc: (len(set(hc[1][1]) - touched), hc[1][0], hc[0]))
            pool.remove(hc)
            chosen.append(hc)
            touched |= set(hc[1][1])
        picks.append(chosen)
        for pick in picks:
            jobs: Counter[str] = Counter()
            moved: list[tuple[str, str]] = []
            for h, (_, held) in pick:
                jobs.update(held)
                moved += [
                    (state.occupied[d], topology.devices[d].id) for d in host_devs[h] if d in state.occupied
                ]
            n = sum(jobs.values())
            if n == 0:
                fits = True
            freed = sum(len(host_devs[h]) - hc[0] for h, hc in pick)
            answers.append(
                DefragAnswer(
                    names[k],
                    sorted(topology.host_names[h] for h, _ in pick),
                    dict(sorted(jobs.items())),
                    n,
                    free_total - freed,
                    sorted(moved),
                )
            )
    front: list[DefragAnswer] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for a in sorted(answers, key=lambda a: (a.moved_ranks, a.jobs_touched, a.domain)):
        key = (a.domain, tuple(a.hosts))
        if key in seen or a.room_elsewhere < a.moved_ranks:
            continue
        if front and a.jobs_touched >= front[-1].jobs_touched:
            continue
        seen.add(key)
        front.append(a)
    reasons: list[str] = []
    if not front:
        lname = topology.levels[li].name
        if considered == 0:
            reasons.append(
                f"no {lname} has {hosts} hosts that can be cleared (the best has {best_clearable}; hosts with "
                f"a failed device or a kept job cannot)"
            )
        else:
            reasons.append(
                f"every {lname} that could be cleared needs more free devices elsewhere for the moved ranks "
                f"than the cluster has ({free_total} free)"
            )
    return DefragResult(topology.levels[li].name, hosts, fits, front[:limit], considered, reasons)
