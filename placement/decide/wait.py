"""Place or wait: every Place answer's slowdown against the job's ideal step, and WAIT when it is above the
request's bound, with what blocks and, given the expected ends of running claims, when a placement within it is due.

The ideal is the same job placed by the same solver (`placement.decide.balance.place_job`) on the cluster with no
occupancy (failures and degradations kept), with a short limit, cached per process (`placement.decide.ideal`, shared
with preempt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from placement.cost.report import CostReport
from placement.decide.balance import Solve, place_job
from placement.decide.ideal import (
    IDEAL_LIMIT_S,
    IDEAL_SHARE,
    cluster_digest,
    ideal_limit,
    ideal_placement,
    ideal_step,
)
from placement.errors import InfeasibleError, InputError, Problem
from placement.limits import Interrupted
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.solve.run import place
from placement.solve.types import PlacementResult, SolveOptions, SolveStatus, Verdict
from placement.solve.units import candidate_devices

__all__ = [
    "IDEAL_LIMIT_S",
    "IDEAL_SHARE",
    "MAX_END_CHECKS",
    "cluster_digest",
    "decide",
    "earliest_start",
    "ideal_placement",
    "ideal_step",
    "place_or_wait",
    "wait_reasons",
]

MAX_END_CHECKS = 8
"""The earliest-start walk re-places the job at most this many times (distinct expected ends)."""

Ends = Sequence[tuple[float, Sequence[int]]] | Callable[[], Sequence[tuple[float, Sequence[int]]]]
"""(expected end, device indices freed then) of running claims, or a callable that returns them."""


def _check(max_slowdown: float | None) -> None:
    if max_slowdown is not None and not (max_slowdown >= 1 and max_slowdown < float("inf")):
        raise InputError(
            "request",
            [Problem("max_slowdown", f"must be a number >= 1 (1: the ideal step), got {max_slowdown}")],
        )


def decide(
    topology: Topology,
    state: ClusterState,
    job: Job,
    options: SolveOptions | None = None,
    *,
    max_slowdown: float | None = None,
    ends: Ends = (),
    traffic: Traffic | None = None,
    solve: Solve = place,
) -> PlacementResult:
    """Place the job now (`place_job`) and judge the answer against its ideal (`verdict` set on the result).

    The ideal step is min(`ideal_step`, the answer's step): when the answer beats the short solve on the empty
    cluster, that solve missed the ideal and the answer is the best one known, so the slowdown is never below 1
    and never flatters. Above `max_slowdown` the status is WAIT (the mapping is the placement it would take now;
    nothing should be started or held on it), with the reasons (`wait_reasons`) and, when `ends` gives
    (expected end time, device indices freed then) of running claims, the earliest time a placement within the
    bound is expected (`earliest_start`; `ends` may be a callable, called only then). InfeasibleError as
    `place` when no valid mapping exists now.

    `solve` places the job (`place`, or a stand-in); the ideal, the reasons and the earliest start use `place`.

    Time: on a busy state the ideal's short solve (`ideal_limit`: a quarter of the limit, at most 2 s) is taken out of
    the placement's limit, cached or not, so the call stays within `options.time_limit_s` and a deterministic
    request gives the same answer cold and warm; the solve itself runs after the placement, on a cache miss. The
    earliest-start walk of a WAIT answer takes at most half the limit more. On a state with no occupancy the
    answer is itself the solver on the empty cluster: the placement gets the whole limit, no second solve.
    """
    _check(max_slowdown)
    opts = options or SolveOptions()
    given, traffic = traffic, traffic if traffic is not None else job_traffic(job)
    own = opts
    if state.occupied:
        own = dataclasses.replace(
            opts, time_limit_s=max(opts.time_limit_s - ideal_limit(opts), ideal_limit(opts))
        )
    res = place_job(topology, state, job, own, traffic=given, solve=solve)
    if res.report is None or res.mapping is None:
        return res
    step = res.report.step_seconds
    source = "empty cluster"
    try:
        ideal = ideal_step(topology, state, job, opts, given) if state.occupied else step
    except Interrupted:  # the call's deadline passed during the ideal's solve: the answer stands, unjudged
        ideal, source = None, "the answer (the call ended before the ideal's solve)"
    if ideal is None or ideal > step or ideal <= 0:  # the answer beat the short solve (or none ran)
        ideal = step
        source = "the answer" if source == "empty cluster" else source
    verdict = Verdict(step / ideal if ideal > 0 else 1.0, ideal, source, max_slowdown)
    res.verdict = verdict
    if not verdict.wait:
        return res
    res.status = SolveStatus.WAIT
    verdict.reasons = wait_reasons(topology, state, job, res, ideal, traffic, opts)
    if callable(ends):
        ends = ends()
    if ends:
        try:
            verdict.earliest_s, verdict.earliest_how = earliest_start(
                topology, state, job, opts, ends, ideal * (max_slowdown or 1.0), traffic
            )
        except Interrupted:
            verdict.earliest_how = "the call ended before the walk over the expected ends"
    else:
        verdict.earliest_how = NO_ENDS
    return res


place_or_wait = decide

NO_ENDS = (
    "no start time can be given: no device in use has an expected end (occupancy from a state file or an outside "
    "job has none; on a registry cluster, held leases and reservations committed with --ttl give them)"
)
"""The earliest start of a WAIT when no running claim has an expected end."""


def wait_reasons(
    topology: Topology,
    state: ClusterState,
    job: Job,
    res: PlacementResult,
    ideal: float,
    traffic: Traffic,
    options: SolveOptions,
    solve: Solve = place,
) -> list[str]:
    """Why the answer is slow: its step and slowdown, and per group label the groups that span a higher level
    than the ideal placement puts them in, with how many domains of that level have room for a group now."""
    rep = res.report
    if rep is None or res.mapping is None:
        return []
    bound = res.verdict.max_slowdown if res.verdict else None
    out = [
        f"the best placement now has a step of {rep.step_seconds:.4g} s, {rep.step_seconds / ideal:.3f}x the "
        f"ideal {ideal:.4g} s (the job on the empty cluster); at most {bound:g}x asked"
    ]
    hit = ideal_placement(topology, state, job, options, traffic, solve)
    if hit is None:
        return out
    ideal_map = hit[1]
    levels = topology.level_names
    cands = candidate_devices(topology, state, job)
    free_by_level = [_free_per_domain(topology, li, cands) for li in range(len(levels))]
    for label in traffic.labels:
        groups = [g.members for g in traffic.groups if g.label == label and len(g.members) > 1]
        if not groups:
            continue
        want = max(_span(topology, ideal_map, g) for g in groups)
        worse = [g for g in groups if _span(topology, res.mapping, g) > want]
        if not worse:
            continue
        size = max(len(g) for g in worse)
        free = free_by_level[want].values()
        holders = sum(1 for v in free if v >= size)
        room = sum(v // size for v in free)
        if room >= len(groups):
            continue  # room enough for these groups alone: the split follows from the others' placement
        out.append(split_reason(label, len(groups), len(worse), size, levels[want], holders, room))
    top = _span(topology, res.mapping, range(job.ranks))
    want_top = _span(topology, ideal_map, range(job.ranks))
    if top > want_top:
        holders = sum(1 for v in free_by_level[want_top].values() if v >= job.ranks)
        out.append(
            f"the job spans a {levels[top]} (the ideal fits in one {levels[want_top]}); {holders} "
            f"{levels[want_top]} domain(s) have {job.ranks} free devices now"
        )
    return out


def split_reason(label: str, groups: int, split: int, size: int, level: str, holders: int, room: int) -> str:
    """One plain sentence: what the job needs (each group of `label` inside one `level`), what is free now, and
    what would make it fit."""
    more = groups - room
    return (
        f"{split} of the {groups} {label} groups are split across {level}s: to keep each in one {level}, as the "
        f"ideal placement does, every group needs a {level} with {size} free devices; {holders} {level}(s) have "
        f"them now, room for {room} group(s); {more} more {level}(s) with {size} free devices would let every "
        "group fit"
    )


def _free_per_domain(topology: Topology, li: int, cands: Sequence[int]) -> dict[int, int]:
    col = topology.domain_column(li)
    out: dict[int, int] = {}
    for d in cands:
        out[col[d]] = out.get(col[d], 0) + 1
    return out


def _span(topology: Topology, mapping: Sequence[int], ranks: Sequence[int] | range) -> int:
    """The level of the lowest domain that holds the devices of `ranks`."""
    devs = {mapping[r] for r in ranks}
    for li in range(len(topology.levels)):
        col = topology.domain_column(li)
        if len({col[d] for d in devs}) == 1:
            return li
    return len(topology.levels) - 1


def earliest_start(
    topology: Topology,
    state: ClusterState,
    job: Job,
    options: SolveOptions,
    ends: Sequence[tuple[float, Sequence[int]]],
    bound_s: float,
    traffic: Traffic,
    solve: Solve = place,
) -> tuple[float | None, str]:
    """Walk the running claims by expected end: free the devices of every claim ending by t (the earliest first),
    place the job again (at most `MAX_END_CHECKS` times, sharing half the time limit), and return the first t at
    which the step is within `bound_s`, with a sentence saying how it was found."""
    by_time: dict[float, set[int]] = {}
    for t, devs in ends:
        by_time.setdefault(t, set()).update(devs)
    times = sorted(by_time)
    occupied = dict(state.occupied)
    checks = min(len(times), MAX_END_CHECKS)
    per = max(0.05, min(ideal_limit(options), 0.5 * options.time_limit_s / max(1, checks)))
    opts = dataclasses.replace(options, time_limit_s=per)
    checked = 0
    best: CostReport | None = None
    for i, t in enumerate(times):
        for d in by_time[t]:
            occupied.pop(d, None)
        if i + 1 < len(times) and len(times) > MAX_END_CHECKS and (i + 1) % -(-len(times) // MAX_END_CHECKS):
            continue  # more ends than checks: check every k-th end (and the last)
        if options.stop is not None and options.stop.is_set():
            break
        checked += 1
        try:
            rep = place_job(
                topology,
                dataclasses.replace(state, occupied=occupied),
                job,
                opts,
                traffic=traffic,
                solve=solve,
            ).report
        except InfeasibleError:
            continue
        if rep is not None and rep.step_seconds <= bound_s * (1 + 1e-9):
            return t, (
                f"the running claims freed in order of expected end (lease or heartbeat expiry); after those "
                f"ending by then, the job places with a step of {rep.step_seconds:.4g} s <= {bound_s:.4g} s "
                f"({checked} re-placement(s) of {len(times)} distinct end(s))"
            )
        if rep is not None and (best is None or rep.step_seconds < best.step_seconds):
            best = rep
    how = (
        f"no placement within {bound_s:.4g} s even after every claim with an expected end ends "
        f"({checked} re-placement(s); best step {best.step_seconds:.4g} s)"
        if best is not None
        else f"no placement within {bound_s:.4g} s after every claim with an expected end ends"
    )
    return None, how
