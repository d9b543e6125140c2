"""Balanced slices in the solver: choose the domains and their slice counts, then let `place` optimize inside them.

`place_job` is the entry every Place path uses (library, CLI, gRPC, Reserve): `place` itself unless the job asks
for balanced slices (`placement.model.job.BalanceRule`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator

from placement.errors import InfeasibleError, InputError, InternalError
from placement.model.job import Job, SpreadRule
from placement.model.slices import balance_counts, slice_problems
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.solve.run import place
from placement.solve.types import PlacementResult, SolveOptions, better
from placement.solve.units import candidate_devices

__all__ = ["BLOCKED", "MAX_SETS", "Solve", "balance_reasons", "place_job"]

Solve = Callable[..., PlacementResult]
"""`place`'s signature: (topology, state, job, options, *, traffic) -> PlacementResult."""

MAX_SETS = 24
"""Domain sets tried per number of domains: every set when there are at most this many, else best-fit sets."""
BLOCKED = "~balance"
"""The occupant name of the devices a balanced search leaves out (outside the chosen domains, or beyond a
domain's slice count)."""


def place_job(
    topology: Topology,
    state: ClusterState,
    job: Job,
    options: SolveOptions | None = None,
    *,
    traffic: Traffic | None = None,
    solve: Solve = place,
) -> PlacementResult:
    """`place` (or `solve`, a function like it), with the balance rule honoured when the job has one.

    Balanced slices: for d = 1, 2, ... domains of the balance level (the fewest first), S slices split into r
    domains of q + 1 slices and d - r of q (`balance_counts`). For each chosen set of d domains (every set when
    there are few, else best-fit sets within one parent domain first), the devices outside the set and, in the
    q-slice domains, the devices beyond q slices are left out, a spread rule caps each domain at q + 1 slices,
    and `place` optimizes inside: the counts are then exactly q + 1 and q. The best answer (by `report_key`) of
    the first d that has one is returned; its mapping passes `validate` on `state`, balance rule included.
    """
    opts = options or SolveOptions()
    bal = job.constraints.balance
    if bal is None:
        # traffic only when given: `solve` may be a stand-in with place's positional arguments only
        return (
            solve(topology, state, job, opts)
            if traffic is None
            else solve(topology, state, job, opts, traffic=traffic)
        )
    problems = slice_problems(topology, job)
    if problems:
        raise InputError(f"job {job.name}", problems)
    traffic = traffic if traffic is not None else job_traffic(job)
    t0 = time.perf_counter()
    li = topology.level_index(bal.level)
    col = topology.domain_column(li)
    cands = candidate_devices(topology, state, job)
    free = Counter(col[d] for d in cands)
    room = {k: v // bal.slice for k, v in free.items() if v >= bal.slice}
    slices = job.ranks // bal.slice
    best: PlacementResult | None = None
    tried = 0
    last: list[str] = []
    for d in range(1, min(len(room), slices) + 1):
        q, r = balance_counts(job.ranks, bal.slice, d)
        sets = list(itertools.islice(_domain_sets(topology, li, room, d, q, r), MAX_SETS))
        for chosen in sets:
            left = opts.time_limit_s - (time.perf_counter() - t0)
            if (best is not None and left <= 0) or left <= -opts.time_limit_s:
                break  # the limit is spent (twice over without an answer: the sets left are not tried)
            share = max(left / max(1, min(len(sets), 4)), min(0.2, opts.time_limit_s))
            hi = set(sorted(chosen, key=lambda k: (-room[k], k))[:r])
            sub_state, sub_job = _restricted(topology, state, job, cands, chosen, hi, q, li)
            tried += 1
            try:
                res = solve(
                    topology,
                    sub_state,
                    sub_job,
                    dataclasses.replace(opts, time_limit_s=share),
                    traffic=traffic,
                )
            except InfeasibleError as e:
                last = e.reasons
                continue
            if res.report is None:
                continue
            if best is None or best.report is None or better(res.report, best.report):
                best = res
        if best is not None:
            best.stats["balance_domains"] = d
            best.stats["balance_sets_tried"] = tried
            return best
    raise InfeasibleError([_no_split(topology, job, li, room, f"{tried} set(s) tried; "), *last[:2]])


def balance_reasons(
    topology: Topology, state: ClusterState, job: Job, candidates: list[int] | None = None
) -> list[str]:
    """Why no balanced split of the job's slices fits its free devices, counted in whole slices per domain of
    the balance level (for some d, r = slices mod d domains with room for q + 1 = slices // d + 1 slices and d - r
    more with room for q): a necessary condition, and a sufficient one when the job requires no level. [] when
    a split fits, or the job has no balance rule (or one with input errors: `slice_problems` names them).
    `candidates`: the job's candidate devices, when the caller has them."""
    bal = job.constraints.balance
    if bal is None or slice_problems(topology, job):
        return []
    li = topology.level_index(bal.level)
    col = topology.domain_column(li)
    cands = candidates if candidates is not None else candidate_devices(topology, state, job)
    free = Counter(col[d] for d in cands)
    room = {k: v // bal.slice for k, v in free.items() if v >= bal.slice}
    slices = job.ranks // bal.slice
    for d in range(1, min(len(room), slices) + 1):
        q, r = balance_counts(job.ranks, bal.slice, d)
        if sum(1 for v in room.values() if v >= q + 1) >= r and sum(1 for v in room.values() if v >= q) >= d:
            return []
    return [_no_split(topology, job, li, room, "")]


def _no_split(topology: Topology, job: Job, li: int, room: dict[int, int], tried: str) -> str:
    """The reason a balanced search found nothing, with the free slices of the roomiest domains."""
    bal = job.constraints.balance
    if bal is None:
        raise InternalError("_no_split needs a job with a balance rule")
    names = topology.domain_names[li]
    shown = ", ".join(f"{names[k]} {v}" for k, v in sorted(room.items(), key=lambda kv: -kv[1])[:6])
    return (
        f"balance over {bal.level}: no set of {bal.level} domains holds the job's {job.ranks // bal.slice} "
        f"slice(s) of {bal.slice} rank(s) evenly ({tried}free slices per {bal.level}: {shown or 'none'})"
    )


def _domain_sets(
    topology: Topology, li: int, room: dict[int, int], d: int, q: int, r: int
) -> Iterator[tuple[int, ...]]:
    """Sets of d domains with r of room >= q + 1 slices and the others >= q: every set when few, else
    best-fit sets (the tightest domains that suffice), those inside one parent domain first."""
    ok = sorted(k for k, v in room.items() if v >= q)
    if sum(1 for k in ok if room[k] >= q + 1) < r or len(ok) < d:
        return
    if math.comb(len(ok), d) <= MAX_SETS:
        for combo in itertools.combinations(ok, d):
            if sum(1 for k in combo if room[k] >= q + 1) >= r:
                yield combo
        return
    seen: set[tuple[int, ...]] = set()
    groups: dict[int, list[int]] = {}
    parent = topology.parent[li] if li + 1 < len(topology.levels) else None
    for k in ok:
        groups.setdefault(parent[k] if parent is not None else 0, []).append(k)
    pools = [*sorted(groups.values(), key=lambda g: sum(room[k] for k in g)), ok]
    for pool in pools:
        fit = _best_fit(pool, room, d, q, r)
        if fit is not None and fit not in seen:
            seen.add(fit)
            yield fit


def _best_fit(pool: list[int], room: dict[int, int], d: int, q: int, r: int) -> tuple[int, ...] | None:
    """The r tightest domains of room >= q + 1 and the d - r tightest others of room >= q, or None."""
    by_room = sorted(pool, key=lambda k: (room[k], k))
    hi = [k for k in by_room if room[k] >= q + 1][:r]
    if len(hi) < r:
        return None
    lo = [k for k in by_room if k not in hi and room[k] >= q][: d - r]
    if len(lo) < d - r:
        return None
    return tuple(sorted(hi + lo))


def _restricted(
    topology: Topology,
    state: ClusterState,
    job: Job,
    cands: list[int],
    chosen: tuple[int, ...],
    hi: set[int],
    q: int,
    li: int,
) -> tuple[ClusterState, Job]:
    """The state with the devices outside `chosen` blocked and each q-slice domain left with q slices of free
    devices (whole hosts first, the hosts with most free devices first), and the job capped at q + 1 slices per
    domain of the level (q when no domain holds q + 1)."""
    bal = job.constraints.balance
    if bal is None:
        raise InternalError("_restricted needs a job with a balance rule")
    col, hosts = topology.domain_column(li), topology.domain_column(0)
    inside = set(chosen)
    blocked = {d: BLOCKED for d in cands if col[d] not in inside}
    pinned = {topology.device_index(v) for v in job.constraints.pins.values()}
    for k in chosen:
        if k in hi:
            continue
        per_host: dict[int, list[int]] = {}
        for d in cands:
            if col[d] == k:
                per_host.setdefault(hosts[d], []).append(d)
        keep = q * bal.slice
        order = sorted(
            per_host.values(), key=lambda ds: (-sum(1 for x in ds if x in pinned), -len(ds), ds[0])
        )
        for ds in order:
            for x in sorted(ds, key=lambda x: (x not in pinned, x)):
                if keep > 0:
                    keep -= 1
                else:
                    blocked[x] = BLOCKED
    cap = (q + 1 if hi else q) * bal.slice
    occupied = {**state.occupied, **blocked}
    rule = SpreadRule(kind=bal.level, max_ranks_per_domain=cap)
    cons = dataclasses.replace(job.constraints, spread=(*job.constraints.spread, rule))
    return dataclasses.replace(state, occupied=occupied), dataclasses.replace(job, constraints=cons)
