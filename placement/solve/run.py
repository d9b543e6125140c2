"""`place` and `compare`: pre-check the request, run every scheduler baseline, the constructive heuristics and the
chosen strategy, score all with the evaluator, and return the best by `report_key` (step, then exposed comm).

The one entry point the CLI, the gRPC server and what-if studies share.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.cost.shared import OBJECTIVES
from placement.errors import InfeasibleError, InputError, InternalError, Problem
from placement.limits import checkpoint
from placement.model.job import Job
from placement.model.slices import slice_problems
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import excluded_devices, validate
from placement.solve.baselines import BASELINES, why_none
from placement.solve.bound import comm_bound
from placement.solve.cpsat import (  # imported here: ortools takes ~1 s to import, not per call
    CpsatOutcome,
    solve_cpsat,
)
from placement.solve.cpsat.model import build_units
from placement.solve.heuristics import HEURISTICS, rank_units, shared_view
from placement.solve.launcher import contiguous
from placement.solve.multilevel.mapping import multilevel_candidates
from placement.solve.prepared import PreparedRequest
from placement.solve.refine import polish
from placement.solve.types import (
    PlacementResult,
    SolveOptions,
    SolveStatus,
    Strategy,
    better,
    gap_of,
    report_key,
)
from placement.solve.units import candidate_devices, required_units

__all__ = ["WHY_NOT", "compare", "explain_infeasible", "place"]


def request_problems(
    topology: Topology, state: ClusterState, job: Job, traffic: Traffic | None = None
) -> list[Problem]:
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
                out.append(
                    Problem(f"constraints.{what}.{label}", f"unknown level {level!r}; levels are {levels}")
                )
    for rank, dev in sorted(cons.pins.items()):
        if topology.device_index(dev) is None:
            out.append(
                Problem(
                    f"constraints.pins.{rank}",
                    f"unknown device {dev!r}; devices are named host/gpuK, e.g. {topology.devices[0].id}",
                )
            )
    for i, sel in enumerate(cons.exclude):
        try:
            topology.resolve(sel)
        except KeyError as e:
            out.append(Problem(f"constraints.exclude[{i}]", str(e.args[0])))
    kinds = list(state.fault_kinds(topology))
    labels = sorted(traffic.labels)
    for i, rule in enumerate(cons.spread):
        if rule.kind not in kinds:
            out.append(
                Problem(
                    f"constraints.spread[{i}].kind",
                    f"unknown fault-domain kind {rule.kind!r}; known: {kinds}",
                )
            )
        if rule.scope != "job" and rule.scope not in labels:
            out.append(
                Problem(
                    f"constraints.spread[{i}].scope",
                    f"the job has no {rule.scope!r} groups; scopes are 'job' or one of {labels}",
                )
            )
    out.extend(slice_problems(topology, job))  # balance and segment rules (placement.model.slices)
    if job.device_kind is not None and job.device_kind not in topology.kinds():
        out.append(
            Problem(
                "device_kind",
                f"no device of kind {job.device_kind!r}; the cluster has {list(topology.kinds())}",
            )
        )
    return out


def explain_infeasible(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    candidates: list[int] | None = None,
) -> list[str]:
    """Pre-checks that catch the obvious infeasible requests, each reason with its numbers (`candidates`: the
    job's candidate devices when the caller has them)."""
    reasons: list[str] = []
    cands = candidates if candidates is not None else candidate_devices(topology, state, job)
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
        smallest = (
            job.ranks
            if rule.scope == "job"
            else min((len(g.members) for g in traffic.groups if g.label == rule.scope), default=0)
        )
        if rule.min_domains is not None and smallest < rule.min_domains:
            what = "the job" if rule.scope == "job" else f"a {rule.scope} group"
            reasons.append(
                f"spread over >= {rule.min_domains} {rule.kind} domains needs >= {rule.min_domains} ranks, but {what} has {smallest}"
            )
            continue
        if rule.min_domains is not None and len(per) < rule.min_domains:
            where = ", ".join(f"{k} ({v})" for k, v in sorted(per.items()))
            reasons.append(
                f"spread over >= {rule.min_domains} {rule.kind} domains: the usable devices are in {len(per)} ({where or 'none'})"
            )
        if rule.max_ranks_per_domain is not None and rule.scope == "job":
            room = sum(min(v, rule.max_ranks_per_domain) for v in per.values())
            if room < job.ranks:
                reasons.append(
                    f"at most {rule.max_ranks_per_domain} ranks per {rule.kind} domain leaves room for {room} ranks over {len(per)} domains; the job has {job.ranks}"
                )
    return reasons


class _Scorer:
    """The evaluator's reports of valid mappings, each mapping scored once, with the time one scoring takes (so
    that a tight limit skips the scoring of further baselines instead of overrunning)."""

    def __init__(self, request: PreparedRequest) -> None:
        self.request = request
        self.memo: dict[tuple[int, ...], CostReport | None] = {}
        self.cost_s = 0.0

    def __call__(self, mapping: list[int] | None) -> CostReport | None:
        if mapping is None:
            return None
        key = tuple(mapping)
        if key not in self.memo:
            t = time.perf_counter()
            r = self.request
            known = r.reports.get(key)
            if not r.valid(mapping):
                self.memo[key] = None
            else:
                self.memo[key] = known or evaluate(
                    r.topology,
                    r.state,
                    r.job,
                    mapping,
                    traffic=r.traffic,
                    check=False,
                    objective=r.options.objective,
                )
            if known is None:
                self.cost_s = max(self.cost_s, time.perf_counter() - t)
        return self.memo[key]

    def affordable(self, reserve: float = 1.0) -> bool:
        """One more scoring fits in the time left, keeping `reserve` scorings for the answer."""
        return (
            self.request.options.deterministic
            or self.request.remaining() > self.cost_s * (1.0 + reserve) + 0.02
        )


def place(
    topology: Topology,
    state: ClusterState,
    job: Job,
    options: SolveOptions | None = None,
    *,
    traffic: Traffic | None = None,
) -> PlacementResult:
    """Place `job` on `state`. Raises `InfeasibleError` (with reasons and numbers) when no mapping exists.

    Every scheduler baseline is computed and scored on the same state, whatever the limit (they are cheap). The
    ``cpsat`` strategy also scores the constructive heuristics (`placement.solve.heuristics`), then, unless one of
    them already meets the lower bound on exposed communication (`comm_bound`: the gap is closed, nothing can
    beat it), the multilevel candidates, the search and an evaluator-judged local search that uses the time left
    (`placement.solve.refine.polish`). Its answer is the best of all of them by `report_key` (step seconds, then
    exposed communication): never worse than any.

    The job's traffic (`job_traffic`) is derived once per call, or taken from `traffic` when the caller has it
    (a batch or a repair placing the same job again), and passed to every step that needs it.
    """
    opts = options or SolveOptions()
    if opts.objective not in OBJECTIVES:
        raise InputError(
            "options",
            [Problem("objective", f"must be one of {', '.join(OBJECTIVES)}, got {opts.objective!r}")],
        )
    strategy = Strategy(opts.strategy).canonical
    t0 = time.perf_counter()
    traffic = traffic if traffic is not None else job_traffic(job)
    problems = request_problems(topology, state, job, traffic)
    if problems:
        raise InputError(f"job {job.name}", problems)
    checkpoint("checking the request")
    cands = candidate_devices(topology, state, job)  # once per call: the checks and the prepared request
    reasons = explain_infeasible(topology, state, job, traffic, cands)
    if reasons:
        raise InfeasibleError(reasons)
    request = PreparedRequest.prepare(topology, state, job, opts, traffic=traffic, t0=t0, candidates=cands)
    reserve = 0.2 * opts.time_limit_s if job.launcher == "torchrun" else 0.0  # for the contiguous search
    request.deadline -= reserve
    score = _Scorer(request)
    found: dict[str, tuple[list[int], CostReport]] = {}
    baselines: dict[str, float | None] = {}
    why_not: dict[str, str] = {}
    stats: dict[str, float | int | str] = {}
    for name in BASELINES:
        checkpoint(
            f"the {name} baseline"
        )  # the call ended (cancelled, deadline passed): nobody awaits the answer
        mapping = BASELINES[name](topology, state, job, traffic)
        rep = score(mapping)
        baselines[name] = rep.comm_seconds if rep else None
        if rep is not None and mapping is not None:
            found[name] = (mapping, rep)
        else:
            why_not[name] = (
                why_none(topology, state, job, traffic, name)
                if mapping is None
                else "breaks " + str(validate(topology, state, job, mapping, traffic=traffic)[0])
            )
    lower: float | None = None
    if strategy is not Strategy.CPSAT:
        if strategy.value not in found:
            raise InfeasibleError(
                [
                    f"{strategy.value} found no valid mapping ({why_not.get(strategy.value, 'not run')}); "
                    "try the cpsat strategy"
                ]
            )
        mapping, rep = found[strategy.value]
    else:
        checkpoint("the heuristics")
        _heuristics(request, score, found, baselines, why_not)
        checkpoint("the search")
        mapping, rep, lower, stats = _optimize(request, score, found, baselines)
    request.deadline += reserve
    if job.launcher == "torchrun":
        mapping, rep, extra = contiguous(request, score, (mapping, rep), [m for m, _ in found.values()])
        stats.update(extra)
        closed_before = stats.get("stop_reason") == "gap_closed" and lower is not None
        if closed_before and gap_of(rep.comm_seconds, lower or 0.0) > OPTIMAL_GAP:
            stats["stop_reason"] = (
                "launcher_blocks"  # the search's answer met its bound; the launcher's does not
            )
    status = SolveStatus.FEASIBLE
    if lower is not None:
        gap = gap_of(rep.comm_seconds, lower)
        stats["evaluator_gap"] = gap
        # with objective cluster the ranked seconds (step + harm >= step >= the step bound) must meet it
        step_gap = gap_of(rep.ranked_seconds, float(stats.get("step_bound", 0.0)))
        if gap <= OPTIMAL_GAP and step_gap <= OPTIMAL_GAP:
            status = SolveStatus.OPTIMAL
            stats["stop_reason"] = "gap_closed"
    for name, comm in baselines.items():  # each "no valid mapping" with its reason (`PlacementResult.stats`)
        if comm is None:
            stats[f"{WHY_NOT}{name}"] = why_not.get(name) or why_none(topology, state, job, traffic, name)
    stats["wall_s"] = time.perf_counter() - t0
    reports = {name: r for name, (_, r) in found.items() if name in baselines}
    return PlacementResult(status, strategy, mapping, rep, lower, [], stats, baselines, reports)


WHY_NOT = "why_not:"
"""`PlacementResult.stats` key prefix: ``why_not:<baseline>`` is why that baseline or candidate found no valid
mapping."""
OPTIMAL_GAP = 1e-9
"""Relative gap on exposed communication below which the answer is reported OPTIMAL."""
LARGE_JOB_HEURISTICS = (
    "stage-per-domain",
    "tile-pack-dp",
    "tight-emptiest",
    "rail-aligned",
    "block-pack-dp",
    "group-pack-dp",
)
"""The heuristics scored first for jobs above the evaluator-guided size."""
POLISH_SHARE = 0.3
"""Share of the time left after the candidates that `polish` gets (the CP-SAT search gets the rest)."""


def _heuristics(
    request: PreparedRequest,
    score: _Scorer,
    found: dict[str, tuple[list[int], CostReport]],
    baselines: dict[str, float | None],
    why_not: dict[str, str] | None = None,
) -> None:
    """Score the constructive heuristics within a fifth of the time left (once something valid is found): in
    their order up to evaluator-guided sizes; for larger jobs, where one scoring takes seconds, the likeliest
    first."""
    r = request
    names = list(HEURISTICS)
    if not r.evaluator_guided:
        first = [n for n in LARGE_JOB_HEURISTICS if n in HEURISTICS]
        names = first + [n for n in names if n not in first]
    until = r.until(0.2)
    with shared_view():
        for name in names:
            heuristic = HEURISTICS[name]
            if found and (time.perf_counter() > until or not score.affordable(2.0)):
                break  # a tight limit: the baselines' best stands (deterministic options never stop here)
            m = heuristic(r.topology, r.state, r.job, r.traffic)
            rep = score(m)
            baselines[name] = rep.comm_seconds if rep else None
            if rep is not None and m is not None:
                found[name] = (m, rep)
            elif m is not None and why_not is not None:
                why_not[name] = "breaks " + str(validate(r.topology, r.state, r.job, m, traffic=r.traffic)[0])


def _best(found: dict[str, tuple[list[int], CostReport]]) -> str:
    """The name of the best entry by `report_key` (ties: the first in order, first-fit last)."""
    return min(found, key=lambda k: (*report_key(found[k][1]), k == "first-fit", k))


def _optimize(
    request: PreparedRequest,
    score: _Scorer,
    found: dict[str, tuple[list[int], CostReport]],
    baselines: dict[str, float | None],
) -> tuple[list[int], CostReport, float | None, dict[str, float | int | str]]:
    """The ``cpsat`` strategy: the bound, then (gap open) multilevel candidates, `solve_cpsat` and `polish`, and
    the best of everything by `report_key` (`found` and `baselines` gain the candidates)."""
    opts = request.options
    incumbent = (found[_best(found)][1].comm_seconds, found[_best(found)][1].step_seconds) if found else None
    # a deterministic search never reads the clock; otherwise a call already past its limit gets the quick bound
    deadline = None if opts.deterministic else request.deadline
    cb = comm_bound(
        request.topology, request.state, request.job, request.traffic, request.candidates, incumbent, deadline
    )
    stats: dict[str, float | int | str] = {
        "bound_source": cb.source,
        "bound_by_phase": ", ".join(f"{k} {v:.6g}" for k, v in cb.by_label.items()),
        "step_bound": cb.step,
    }
    target = _Target.of(cb.value, cb.step, max(OPTIMAL_GAP, opts.relative_gap))
    if target.closed(found):
        name = _best(found)
        stats["stop_reason"] = "gap_closed"
        stats["fallback"] = name
        return found[name][0], found[name][1], cb.value, stats
    starts = [(name, m) for name, (m, _) in found.items()]
    if request.remaining() > 0.2 and score.affordable(2.0):
        _multilevel(request, score, found, baselines, starts)
    out: CpsatOutcome | None = None
    if not target.closed(found) and (score.affordable() or not found):
        out = _search(request, found, starts)
    elif not target.closed(found):
        stats["cpsat_status"] = "SKIPPED: the time limit is spent on the baselines"
    if out is not None:
        _take_outcome(request, score, found, baselines, out, stats)
    if not found:
        raise InfeasibleError(
            (out.explanation if out is not None else [])
            or [
                f"no valid mapping was found within {opts.time_limit_s:g} s (not proven impossible: each rule alone "
                "can be met; raise --time-limit or relax a constraint)"
            ]
        )
    stop = "gap_closed" if target.closed(found) else "time_limit"
    if stop != "gap_closed" and request.evaluator_guided and not request.stopped():
        reason = _polish(request, score, found, stats, target)
        if reason is not None:
            stop = reason
    chosen = "cpsat" if "cpsat" in found else _best(found)
    mapping, rep = found[chosen]
    for name, (m, r) in sorted(found.items()):
        if better(r, rep):
            mapping, rep, chosen = m, r, name
    if chosen != "cpsat":
        stats["fallback"] = chosen
    stats["stop_reason"] = "gap_closed" if target.met(rep) else stop
    return mapping, rep, cb.value, stats


@dataclass(frozen=True)
class _Target:
    """The exposed comm and the step at which nothing can beat a mapping by more than the gap asked for."""

    comm: float
    step: float

    @staticmethod
    def of(comm_bound: float, step_bound: float, gap: float) -> _Target:
        if gap >= 1.0:
            return _Target(float("inf"), float("inf"))
        return _Target(comm_bound / (1.0 - gap), step_bound / (1.0 - gap))

    def met(self, rep: CostReport) -> bool:
        """Nothing can beat `rep` by more than the gap asked for: its exposed comm and its step are at their
        bounds (the comm alone is not enough: a mapping with more comm may have a shorter step)."""
        return rep.comm_seconds <= self.comm and rep.ranked_seconds <= self.step

    def closed(self, found: dict[str, tuple[list[int], CostReport]]) -> bool:
        return bool(found) and self.met(found[_best(found)][1])


def _multilevel(
    request: PreparedRequest,
    score: _Scorer,
    found: dict[str, tuple[list[int], CostReport]],
    baselines: dict[str, float | None],
    starts: list[tuple[str, list[int]]],
) -> None:
    """Score the multilevel candidates (on the job's units) while affordable; each valid one is also a start."""
    job = request.job
    units = build_units(request)
    ranks = [(r,) for r in range(job.ranks)] if units.split else units.ranks
    for name, m in multilevel_candidates(
        request.topology,
        request.state,
        job,
        request.traffic,
        request.candidates,
        ranks,
        seed=request.options.seed,
        deadline=request.until(0.25),
        threads=1,
    ):
        if not score.affordable(2.0):
            break
        rep = score(m)
        baselines[name] = rep.comm_seconds if rep else None
        if rep is not None:
            found[name] = (m, rep)
            starts.append((name, m))


def _search(
    request: PreparedRequest,
    found: dict[str, tuple[list[int], CostReport]],
    starts: list[tuple[str, list[int]]],
) -> CpsatOutcome:
    """`solve_cpsat` from the starts; a share of the time left is kept for the evaluator-judged polish (the
    search proposes by the surrogate)."""
    held = POLISH_SHARE * max(0.0, request.remaining()) if request.evaluator_guided and found else 0.0
    request.deadline -= held
    try:
        return solve_cpsat(request, starts, [report_key(found[n][1]) for n, _ in starts])
    finally:
        request.deadline += held


def _take_outcome(
    request: PreparedRequest,
    score: _Scorer,
    found: dict[str, tuple[list[int], CostReport]],
    baselines: dict[str, float | None],
    out: CpsatOutcome,
    stats: dict[str, float | int | str],
) -> None:
    """The search's statistics, and its answer and constructive candidates scored by the evaluator."""
    for k, v in out.stats.items():
        stats[f"surrogate_{k}" if k == "bound_source" else k] = v
    if out.lower_bound is not None and out.mapping is not None:
        stats["surrogate_bound"] = out.lower_bound
    for name, m in out.candidates:
        if name not in ("constructive", "cpsat") or (tuple(m) in score.memo and name != "cpsat"):
            continue
        if name == "constructive" and tuple(m) not in request.reports and not score.affordable(0.5):
            continue  # a candidate not worth overrunning the limit for (the solver's answer is scored always)
        rep = score(m)
        if rep is None:
            if name == "cpsat":
                broken = validate(request.topology, request.state, request.job, m, traffic=request.traffic)
                raise InternalError(f"the solver returned a mapping that breaks {broken[0]}")
            continue
        if name in found and not better(rep, found[name][1]):
            continue
        found[name] = (m, rep)
        if name == "constructive":
            baselines[name] = rep.comm_seconds


def _polish(
    request: PreparedRequest,
    score: _Scorer,
    found: dict[str, tuple[list[int], CostReport]],
    stats: dict[str, float | int | str],
    target: _Target,
) -> str | None:
    """The evaluator-judged polish of the best so far; returns why it stopped (None: it did not run)."""
    job, opts = request.job, request.options
    start = found[_best(found)][0]
    # leave time to score and validate the answer afterwards (about 50 µs a rank)
    deadline = request.until(1.0) - 0.05 - job.ranks * 5e-5
    rounds = max(2, int(2 * opts.time_limit_s)) if opts.deterministic else None
    if not (opts.deterministic or deadline > time.perf_counter()):
        return None
    pol = polish(
        request,
        start,
        rank_units(job, request.traffic),
        deadline,
        target=(target.step, target.comm),
        max_rounds=rounds,
    )
    stats.update({"polish_rounds": pol.rounds, "polish_improved": pol.improved, "polish_trials": pol.trials})
    if pol.improved:
        rep = score(pol.mapping)
        if rep is not None:
            found["polish"] = (pol.mapping, rep)
    return pol.stop_reason


def compare(
    topology: Topology, state: ClusterState, jobs: Sequence[Job], options: SolveOptions | None = None
) -> list[tuple[Job, PlacementResult | None, str | None]]:
    """Place each job on the same state; ranked by modeled step seconds, then exposed communication (infeasible
    ones last, with the reason)."""
    rows: list[tuple[Job, PlacementResult | None, str | None]] = []
    for job in jobs:
        try:
            rows.append((job, place(topology, state, job, options), None))
        except InfeasibleError as e:
            rows.append((job, None, "; ".join(e.reasons)))

    def key(row: tuple[Job, PlacementResult | None, str | None]) -> tuple[bool, float, float, str]:
        rep = row[1].report if row[1] is not None else None
        return (rep is None, rep.step_seconds if rep else 0.0, rep.comm_seconds if rep else 0.0, row[0].name)

    rows.sort(key=key)
    return rows
