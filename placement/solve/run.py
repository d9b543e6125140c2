"""`place` and `compare`: run a strategy, pre-check feasibility, re-score, validate, attach baselines.

The one entry point the CLI, the gRPC server and what-if studies share.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from placement.cost import CostReport, evaluate
from placement.errors import InfeasibleError, InputError, PlacementError, Problem
from placement.job import Job
from placement.solve import PlacementResult, SolveOptions, SolveStatus, Strategy
from placement.solve.baselines import first_fit, topology_greedy
from placement.solve.cpsat import solve_cpsat  # imported here: ortools takes ~1 s to import, not per call
from placement.solve.units import candidate_devices, required_units
from placement.state import ClusterState
from placement.topology import Topology
from placement.traffic import Traffic, job_traffic
from placement.validate import excluded_devices, validate

__all__ = ["compare", "explain_infeasible", "place"]


def request_problems(topology: Topology, state: ClusterState, job: Job, traffic: Traffic | None = None) -> list[Problem]:
    """Names in the job that the cluster or the job itself does not have: levels, pinned devices, excluded
    selectors, fault-domain kinds, spread scopes, the device kind. Input errors, not infeasibility; the gRPC
    server prefixes the paths with the request field."""
    traffic = traffic if traffic is not None else job_traffic(job)
    cons = job.constraints
    out: list[Problem] = []
    levels = list(topology.level_names)
    for what, table in (("require", cons.require), ("prefer", cons.prefer)):
        for label, level in sorted(table.items()):
            if level not in levels:
                out.append(Problem(f"constraints.{what}.{label}", f"unknown level {level!r}; levels are {levels}"))
    for rank, dev in sorted(cons.pins.items()):
        if topology.device_index(dev) is None:
            out.append(Problem(f"constraints.pins.{rank}",
                               f"unknown device {dev!r}; devices are named host/gpuK, e.g. {topology.devices[0].id}"))
    for i, sel in enumerate(cons.exclude):
        try:
            topology.resolve(sel)
        except KeyError as e:
            out.append(Problem(f"constraints.exclude[{i}]", str(e.args[0])))
    kinds = list(state.fault_kinds(topology))
    labels = sorted(traffic.labels)
    for i, rule in enumerate(cons.spread):
        if rule.kind not in kinds:
            out.append(Problem(f"constraints.spread[{i}].kind", f"unknown fault-domain kind {rule.kind!r}; known: {kinds}"))
        if rule.scope != "job" and rule.scope not in labels:
            out.append(Problem(f"constraints.spread[{i}].scope",
                               f"the job has no {rule.scope!r} groups; scopes are 'job' or one of {labels}"))
    if job.device_kind is not None and job.device_kind not in topology.kinds():
        out.append(Problem("device_kind", f"no device of kind {job.device_kind!r}; the cluster has {list(topology.kinds())}"))
    return out


def explain_infeasible(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[str]:
    """Pre-checks that catch the obvious infeasible requests, each reason with its numbers."""
    reasons: list[str] = []
    cands = candidate_devices(topology, state, job)
    kind = f" {job.device_kind}" if job.device_kind else ""
    if len(cands) < job.ranks:
        excl, _ = excluded_devices(topology, job)
        of_kind = [d for d in topology.devices if job.device_kind is None or d.kind == job.device_kind]
        n_failed = sum(1 for d in of_kind if d.index in state.failed)
        n_occ = sum(1 for d in of_kind if d.index not in state.failed and not state.usable(d.index, job.name))
        n_excl = sum(1 for d in of_kind if state.usable(d.index, job.name) and d.index in excl)
        reasons.append(
            f"the job needs {job.ranks}{kind} devices; {len(cands)} are usable "
            f"({len(of_kind)} of that kind: {n_occ} occupied, {n_failed} failed, {n_excl} excluded)"
        )
    cset = set(cands)
    for r, dev_id in sorted(job.constraints.pins.items()):
        d = topology.device_index(dev_id)
        if d is None:
            reasons.append(f"rank {r} is pinned to unknown device {dev_id!r}")
        elif d not in cset:
            why = state.status(d).value if not state.usable(d, job.name) else "excluded or of another kind"
            reasons.append(f"rank {r} is pinned to {dev_id}, which is {why}")
    for lvl, units in sorted(required_units(topology, job, traffic).items()):
        col = topology.domain_column(lvl)
        free = Counter(col[d] for d in cands)
        lname = topology.levels[lvl].name
        labels = sorted(lab for lab, lv in job.constraints.require.items() if lv == lname)
        # necessary for each size s: the units of >= s ranks each need a domain with >= s free devices
        for usize in sorted({len(u.ranks) for u in units}, reverse=True):
            need = sum(1 for u in units if len(u.ranks) >= usize)
            capacity = sum(v // usize for v in free.values())
            if capacity < need:
                holders = sum(1 for v in free.values() if v >= usize)
                best = max(free.values(), default=0)
                reasons.append(
                    f"{'+'.join(labels)} requires {usize} free{kind} devices in one {lname} for each of {need} groups: "
                    f"{holders} {lname} domain(s) have them (room for {capacity} groups; the best {lname} has {best} free), {need} are needed"
                )
                break
    for i, rule in enumerate(job.constraints.spread):
        try:
            fd = state.fault_domain_of(rule.kind, topology)
        except KeyError:
            reasons.append(f"constraints.spread[{i}]: unknown fault-domain kind {rule.kind!r}")
            continue
        per = Counter(fd.get(d, "<none>") for d in cands)
        smallest = job.ranks if rule.scope == "job" else min((len(g.members) for g in traffic.groups if g.label == rule.scope), default=0)
        if rule.min_domains is not None and smallest < rule.min_domains:
            what = "the job" if rule.scope == "job" else f"a {rule.scope} group"
            reasons.append(f"spread over >= {rule.min_domains} {rule.kind} domains needs >= {rule.min_domains} ranks, but {what} has {smallest}")
            continue
        if rule.min_domains is not None and len(per) < rule.min_domains:
            where = ", ".join(f"{k} ({v})" for k, v in sorted(per.items()))
            reasons.append(f"spread over >= {rule.min_domains} {rule.kind} domains: the usable devices are in {len(per)} ({where or 'none'})")
        if rule.max_ranks_per_domain is not None and rule.scope == "job":
            room = sum(min(v, rule.max_ranks_per_domain) for v in per.values())
            if room < job.ranks:
                reasons.append(f"at most {rule.max_ranks_per_domain} ranks per {rule.kind} domain leaves room for {room} ranks over {len(per)} domains; the job has {job.ranks}")
    return reasons


def _score(topology: Topology, state: ClusterState, job: Job, traffic: Traffic, mapping: list[int] | None) -> CostReport | None:
    if mapping is None or validate(topology, state, job, mapping, traffic=traffic):
        return None
    return evaluate(topology, state, job, mapping, traffic=traffic, check=False)


def place(topology: Topology, state: ClusterState, job: Job, options: SolveOptions | None = None) -> PlacementResult:
    """Place `job` on `state`. Raises `InfeasibleError` (with reasons and numbers) when no mapping exists."""
    opts = options or SolveOptions()
    t0 = time.perf_counter()
    traffic = job_traffic(job)
    problems = request_problems(topology, state, job, traffic)
    if problems:
        raise InputError(f"job {job.name}", problems)
    reasons = explain_infeasible(topology, state, job, traffic)
    if reasons:
        raise InfeasibleError(reasons)
    ff = first_fit(topology, state, job)
    tg = topology_greedy(topology, state, job, traffic)
    ff_rep = _score(topology, state, job, traffic, ff)
    tg_rep = _score(topology, state, job, traffic, tg)
    baselines: dict[str, float | None] = {
        Strategy.FIRST_FIT.value: ff_rep.seconds if ff_rep else None,
        Strategy.TOPOLOGY_GREEDY.value: tg_rep.seconds if tg_rep else None,
    }
    stats: dict[str, float | int | str] = {}
    lower: float | None = None
    if opts.strategy is Strategy.FIRST_FIT:
        mapping, rep = ff, ff_rep
        if mapping is not None and rep is None:
            raise InfeasibleError(["first-fit's mapping breaks a hard rule: " + str(validate(topology, state, job, mapping, traffic=traffic)[0])])
    elif opts.strategy is Strategy.TOPOLOGY_GREEDY:
        mapping, rep = tg, tg_rep
        if rep is None:
            why = "no domain holds the job's units" if tg is None else "its mapping breaks " + str(validate(topology, state, job, tg, traffic=traffic)[0])
            raise InfeasibleError([f"topology-greedy found no valid mapping: {why}; try the cpsat strategy"])
    else:
        hint = tg if tg_rep is not None else (ff if ff_rep is not None else None)
        # the time limit covers the whole call: baselines, solve, final scoring (about 3% of it)
        spent = time.perf_counter() - t0
        budget = max(0.05, opts.time_limit_s * 0.97 - spent)
        from dataclasses import replace

        out = solve_cpsat(topology, state, job, traffic, replace(opts, time_limit_s=budget), hint=hint)
        mapping, lower, stats = out.mapping, out.lower_bound, out.stats
        if mapping is None:
            raise InfeasibleError(out.explanation or [
                f"no valid mapping was found within {opts.time_limit_s:g} s (not proven impossible: each rule alone "
                "can be met; raise --time-limit or relax a constraint)"])
        rep = _score(topology, state, job, traffic, mapping)
        if rep is None:  # never return an invalid mapping
            v = validate(topology, state, job, mapping, traffic=traffic)
            raise PlacementError(f"internal: the solver returned a mapping that breaks {v[0]}")
        # never worse than a valid baseline on the same state
        for base_map, base_rep in ((tg, tg_rep), (ff, ff_rep)):
            if base_rep is not None and base_map is not None and base_rep.seconds < rep.seconds - 1e-12:
                mapping, rep = base_map, base_rep
                stats["fallback"] = "baseline"
    if mapping is None or rep is None:
        raise InfeasibleError(["no valid mapping found"])
    status = SolveStatus.FEASIBLE
    if opts.strategy is Strategy.CPSAT and lower is not None and rep.seconds - lower <= 1e-9 * max(1.0, rep.seconds):
        status = SolveStatus.OPTIMAL
    stats["wall_s"] = time.perf_counter() - t0
    return PlacementResult(status, opts.strategy, mapping, rep, lower, [], stats, baselines)


def compare(topology: Topology, state: ClusterState, jobs: Sequence[Job], options: SolveOptions | None = None) -> list[tuple[Job, PlacementResult | None, str | None]]:
    """Place each job on the same state; ranked by seconds per step (infeasible ones last, with the reason)."""
    rows: list[tuple[Job, PlacementResult | None, str | None]] = []
    for job in jobs:
        try:
            rows.append((job, place(topology, state, job, options), None))
        except InfeasibleError as e:
            rows.append((job, None, "; ".join(e.reasons)))
    rows.sort(key=lambda t: (t[1] is None, t[1].seconds if t[1] is not None and t[1].seconds is not None else 0.0, t[0].name))
    return rows
