"""Joint placement of a queue of jobs on one state (`place_batch`): which jobs to admit and where, no device in two
jobs, the admitted weight first and the weighted modeled step seconds second, next to two sequential baselines.

Built on `placement.decide.batch.search` (single-job placements on a shrinking state), `admit` (the knapsack),
`improve` (the improvement moves) and `explain` (why a job is not admitted, and the joint validator); the data
types are in `placement.decide.batch.types`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence

from placement.decide.batch.admit import Admission, Demand, admit
from placement.decide.batch.clock import WallClock, limit_kind
from placement.decide.batch.explain import Explainer, validate_batch
from placement.decide.batch.improve import improve, swap
from placement.decide.batch.search import BatchSearch
from placement.decide.batch.types import Assign, BatchJob, BatchResult
from placement.errors import InputError, InternalError, Problem
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.solve.run import request_problems
from placement.solve.types import SolveOptions
from placement.solve.units import candidate_devices

__all__ = [
    "BATCH",
    "FIFO",
    "MAX_WEIGHT",
    "PRIORITY",
    "batch_problems",
    "place_batch",
]

BATCH = "batch"
"""The joint answer: knapsack admission, placement in a chosen order, then re-placement of each job."""
FIFO = "fifo-kueue-tas"
"""Baseline: the queue in arrival order, each job placed by the kueue-tas baseline (a job that does not fit is
skipped and the next one is tried, as Kueue's BestEffortFIFO does)."""
PRIORITY = "priority-cpsat"
"""Baseline: the queue by priority (then arrival), each job placed by the cpsat strategy on what is left."""
MAX_WEIGHT = 1e6


def batch_problems(
    topology: Topology,
    state: ClusterState,
    jobs: Sequence[BatchJob],
    traffic: Sequence[Traffic] | None = None,
) -> list[Problem]:
    """Input errors of a batch, with paths ``jobs[i].weight``, ``jobs[i].job.name``, ``jobs[i].job.<field>``
    (`traffic`: each job's `job_traffic`, when the caller has it)."""
    out: list[Problem] = []
    if not jobs:
        out.append(Problem("jobs", "give at least one job"))
    running = set(state.occupied.values())
    first: dict[str, int] = {}
    for i, bj in enumerate(jobs):
        w = bj.weight
        if not (isinstance(w, int | float) and math.isfinite(w) and 0 < w <= MAX_WEIGHT):
            out.append(Problem(f"jobs[{i}].weight", f"must be a number in (0, {MAX_WEIGHT:g}], got {w!r}"))
        if not (isinstance(bj.priority, int | float) and math.isfinite(bj.priority)):
            out.append(Problem(f"jobs[{i}].priority", f"must be a finite number, got {bj.priority!r}"))
        name = bj.job.name
        if name in first:
            out.append(
                Problem(
                    f"jobs[{i}].job.name",
                    f"duplicate job name {name!r} (also jobs[{first[name]}]); "
                    "names in a batch must be unique",
                )
            )
        else:
            first[name] = i
        if name in running:
            n = sum(1 for v in state.occupied.values() if v == name)
            out.append(
                Problem(
                    f"jobs[{i}].job.name",
                    f"{name!r} is a running job in the state ({n} devices); "
                    "a queued job needs a name of its own",
                )
            )
        out.extend(
            Problem(f"jobs[{i}].job.{p.path}", p.message)
            for p in request_problems(topology, state, bj.job, None if traffic is None else traffic[i])
        )
    return out


def _order(b: BatchSearch, admitted: Sequence[int], demands: Mapping[int, Demand]) -> list[int]:
    """Jobs with units that must share a host (largest unit, then most ranks) first: they need whole fragments;
    among equal units, jobs whose spread rules ask for the most fault domains (a serving deployment's replicas)
    first: they need room in several domains, which a job without that rule packed before them may have taken;
    then the rest by ranks. Heavier and higher-priority jobs first among equals."""

    def key(j: int) -> tuple[int, int, int, float, float, int]:
        units = demands[j].units.get(0)
        unit = max(units) if units else 1
        bj = b.jobs[j]
        spread = max((r.min_domains or 0 for r in bj.job.constraints.spread), default=0)
        return (-unit, -spread, -bj.job.ranks, -bj.weight, -bj.priority, j)

    return sorted(admitted, key=key)


def place_batch(
    topology: Topology, state: ClusterState, jobs: Sequence[BatchJob], options: SolveOptions | None = None
) -> BatchResult:
    """Admit and place a queue of jobs jointly on `state`. `options.time_limit_s` covers the whole batch: wall
    clock (within +10% + 50 ms), or with `options.deterministic` a deterministic budget (the same answer under
    any load, no bound on the wall time); `stats["time_limit"]` says which.

    Raises `InputError` for bad input (duplicate names, bad weights, unknown names in a job). Every admitted
    mapping passes `placement.model.validate` against the state plus the other admitted jobs' devices, or the call
    raises `InternalError`. A batch where no job fits is an answer (nothing admitted, each job with its reason).
    """
    opts = options or SolveOptions()
    traffic = [job_traffic(bj.job) for bj in jobs]  # once per job: every placement of the batch reuses it
    problems = batch_problems(topology, state, jobs, traffic)
    if problems:
        raise InputError("batch", problems)
    # a wall-clock limit (unless deterministic): the search is stopped with a reserve for the reasons and
    # the joint check of the answers
    clock = WallClock(
        opts, _RESERVE_SHARE * opts.time_limit_s + 0.02 + 2e-5 * sum(bj.job.ranks for bj in jobs)
    )
    try:
        result = _place_batch(topology, state, jobs, clock.options, traffic)
    finally:
        clock.cancel()
    result.stats["time_limit"] = limit_kind(opts)
    return result


_RESERVE_SHARE = 0.05
"""Of a batch's wall-clock limit, kept for what follows the search (reasons, the joint validation)."""


def _place_batch(
    topology: Topology,
    state: ClusterState,
    jobs: Sequence[BatchJob],
    opts: SolveOptions,
    traffic: list[Traffic],
) -> BatchResult:
    b = BatchSearch(topology, state, jobs, opts, traffic)
    limit = opts.time_limit_s
    stats: dict[str, float | int | str] = {}

    fifo = b.fifo()
    stats["fifo_s"] = time.perf_counter() - b.t0
    prio_order = sorted(b.feasible, key=lambda j: (-b.jobs[j].priority, j))
    demands = _demands(b)
    t = time.perf_counter()
    adm = admit(topology, state, list(demands.values()), opts, min(2.0, 0.1 * limit))
    stats["admission_s"] = time.perf_counter() - t
    stats["admission_status"] = adm.status
    if adm.bound is not None:
        stats["admission_bound"] = adm.bound

    t = time.perf_counter()
    prio = b.sequential(prio_order, 0.3 * limit)
    stats["priority_s"] = time.perf_counter() - t

    t = time.perf_counter()
    ours = _admitted_order(b, adm, demands, stats)
    if (opts.deterministic or b.remaining() > 0.35 * limit) and not b.stopped():
        ours = _second_order(b, ours, stats)
    stats["batch_s"] = time.perf_counter() - t
    stats["knapsack_admitted"] = len(adm.admitted)
    stats["batch_admitted_before_improve"] = len(ours)

    t = time.perf_counter()
    ours, moves = _improve_best(b, ours, prio, fifo, stats)
    stats["improve_s"] = time.perf_counter() - t
    stats["improved_jobs"] = moves
    stats["placements"] = b.placements
    if b.cut_short:
        stats["cut_short"] = b.cut_short
    return _answer(b, ours, fifo, prio, adm.bound, stats)


def _demands(b: BatchSearch) -> dict[int, Demand]:
    """Each feasible job's demand for the admission knapsack (ties broken by priority, then arrival)."""
    ranking = sorted(range(len(b.jobs)), key=lambda j: (b.jobs[j].priority, -j))
    tiebreak = {j: r for r, j in enumerate(ranking)}
    return {
        j: Demand.of(
            j,
            b.jobs[j].job,
            b.jobs[j].weight,
            tiebreak[j],
            b.topology,
            b.traffic[j],
            candidate_devices(b.topology, b.state, b.jobs[j].job),
        )
        for j in b.feasible
    }


def _admitted_order(
    b: BatchSearch, adm: Admission, demands: dict[int, Demand], stats: dict[str, float | int | str]
) -> Assign:
    """The knapsack's admitted jobs placed in `_order` (on the hosts it reserved, when that admits more), then any
    other job that still fits while the admitted weight is below the knapsack's bound."""
    limit = b.options.time_limit_s
    chosen = adm.admitted if adm.admitted else list(b.feasible)
    order = _order(b, chosen, demands)
    ours = b.sequential(order, 0.3 * limit)
    if len(ours) < len(order) and adm.hosts and not b.stopped():
        packed = b.sequential(order, 0.15 * limit, allowed=b.reserved(adm, order))
        stats["packed"] = len(packed)
        if b.key(packed) < b.key(ours):
            ours = packed
    if adm.bound is None or sum(b.jobs[j].weight for j in ours) < adm.bound - 5e-4 * len(b.jobs):
        rest = sorted(
            (j for j in b.feasible if j not in ours),
            key=lambda j: (-b.jobs[j].weight, -b.jobs[j].priority, j),
        )
        ours = b.sequential(rest, 0.1 * limit, assign=ours)
    return ours


def _second_order(b: BatchSearch, ours: Assign, stats: dict[str, float | int | str]) -> Assign:
    """A second order over the same admitted jobs: the most weighted communication first (they gain the most from
    the best domains); kept when better."""
    limit = b.options.time_limit_s

    def comm(j: int) -> float:
        return b.jobs[j].weight * min((r.comm_seconds for r in b.seen.get(j, {}).values()), default=0.0)

    second = b.sequential(sorted(ours, key=lambda j: (-comm(j), -b.jobs[j].job.ranks, j)), 0.2 * limit)
    left = sorted(
        (j for j in b.feasible if j not in second),
        key=lambda j: (-b.jobs[j].weight, -b.jobs[j].priority, j),
    )
    second = b.sequential(left, 0.05 * limit, assign=second)
    stats["second_order"] = "kept" if b.key(second) < b.key(ours) else "dropped"
    return second if b.key(second) < b.key(ours) else ours


def _improve_best(
    b: BatchSearch,
    ours: Assign,
    prio: Assign,
    fifo: Assign,
    stats: dict[str, float | int | str],
) -> tuple[Assign, int]:
    """Improve the best answer so far, ours or a baseline's (re-placing a baseline's jobs by cpsat often helps):
    swaps, then moves; returns it and the jobs moved."""
    opts, limit = b.options, b.options.time_limit_s
    start = min(((BATCH, ours), (PRIORITY, prio), (FIFO, fifo)), key=lambda na: b.key(na[1]))
    stats["improved_from"] = start[0]
    ours = dict(start[1])
    budget = limit - (time.perf_counter() - b.t0) if not opts.deterministic else 0.3 * limit
    ours, swaps = swap(b, ours, max(0.0, 0.5 * budget - 0.05))
    stats["swaps"] = swaps
    budget = limit - (time.perf_counter() - b.t0) if not opts.deterministic else 0.15 * limit
    ours, moves = improve(
        b, ours, max(0.0, budget - max(0.1, 0.05 * limit))
    )  # a reserve for the reasons and checks
    return ours, moves


def _answer(
    b: BatchSearch,
    ours: Assign,
    fifo: Assign,
    prio: Assign,
    bound: float | None,
    stats: dict[str, float | int | str],
) -> BatchResult:
    """The plans of ours and the baselines with their reasons, the best of them (checked jointly), and whether it
    reaches the knapsack's bound."""
    jobs = [bj.job for bj in b.jobs]
    explainer = Explainer(
        b.topology,
        b.state,
        jobs,
        [bj.weight for bj in b.jobs],
        [bj.priority for bj in b.jobs],
        b.traffic,
        b.solo,
    )
    plans = {
        name: explainer.plan(name, assign) for name, assign in ((BATCH, ours), (FIFO, fifo), (PRIORITY, prio))
    }
    for p in plans.values():  # serving jobs: their serving report beside their decode step
        for o in p.admitted:
            if o.mapping is not None:
                o.serving = b.serving_report(o.index, o.mapping)
    best = min((BATCH, FIFO, PRIORITY), key=lambda n: plans[n].key())  # min keeps the first of ties: ours
    plan = plans[best]
    bad = validate_batch(
        b.topology,
        b.state,
        jobs,
        {o.index: o.mapping for o in plan.admitted if o.mapping},
        b.traffic,
    )
    if bad:
        raise InternalError("the batch answer breaks a rule: " + "; ".join(bad[:5]))
    stats["chosen"] = best
    stats["wall_s"] = time.perf_counter() - b.t0
    optimal = bound is not None and plan.admitted_weight >= bound - 5e-4 * len(b.jobs)
    return BatchResult(plan, {FIFO: plans[FIFO], PRIORITY: plans[PRIORITY]}, bound, optimal, stats)
