"""Joint placement of a queue of jobs on one state (`place_batch`): which jobs to admit and where, no device in two
jobs, the admitted weight first and the weighted modeled step seconds second, next to two sequential baselines.

Built on `placement.solve.run.place` (one job on a shrinking state), `batch_admit` (the knapsack),
`batch_improve` (the improvement moves) and `batch_explain` (why a job is not admitted, and the joint validator).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.errors import InfeasibleError, InputError, PlacementError, Problem
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import validate
from placement.solve.baselines import kueue_tas
from placement.solve.batch.admit import Admission, Demand, admit
from placement.solve.batch.explain import Explainer, validate_batch
from placement.solve.batch.improve import improve, swap
from placement.solve.run import explain_infeasible, place, request_problems
from placement.solve.types import SolveOptions, Strategy
from placement.solve.units import candidate_devices

__all__ = [
    "BATCH",
    "FIFO",
    "MAX_WEIGHT",
    "PRIORITY",
    "BatchJob",
    "BatchPlan",
    "BatchResult",
    "JobOutcome",
    "batch_problems",
    "place_batch",
    "validate_batch",
]

BATCH = "batch"
"""The joint answer: knapsack admission, placement in a chosen order, then re-placement of each job."""
FIFO = "fifo-kueue-tas"
"""Baseline: the queue in arrival order, each job placed by the kueue-tas baseline (a job that does not fit is
skipped and the next one is tried, as Kueue's BestEffortFIFO does)."""
PRIORITY = "priority-cpsat"
"""Baseline: the queue by priority (then arrival), each job placed by the cpsat strategy on what is left."""
MAX_WEIGHT = 1e6

Assign = dict[int, tuple[list[int], CostReport]]


@dataclass(frozen=True)
class BatchJob:
    """A queued job: `weight` (> 0) counts toward the admitted weight and multiplies its step seconds;
    `priority` orders the priority baseline and decides which job wins a conflict between equal answers."""

    job: Job
    weight: float = 1.0
    priority: float = 0.0


@dataclass
class JobOutcome:
    """One job in one answer: its mapping and modeled step, or why it is not admitted.

    `reason` is ``capacity`` (not enough free devices or whole domains on the state), ``rule`` (its own rules
    cannot hold on the state) or ``conflict`` (it fits alone, but not next to the admitted jobs
    `conflicts_with`); `explanation` gives the numbers."""

    index: int
    name: str
    admitted: bool
    mapping: list[int] | None = None
    report: CostReport | None = None
    reason: str = ""
    explanation: list[str] = field(default_factory=list)
    conflicts_with: list[str] = field(default_factory=list)


@dataclass
class BatchPlan:
    """One answer (the joint one or a baseline): an outcome per job, in queue order."""

    strategy: str
    outcomes: list[JobOutcome]
    weights: list[float]

    @property
    def admitted(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.admitted]

    @property
    def admitted_weight(self) -> float:
        return sum(self.weights[o.index] for o in self.admitted)

    @property
    def weighted_step_seconds(self) -> float:
        return sum(
            self.weights[o.index] * o.report.step_seconds for o in self.admitted if o.report is not None
        )

    @property
    def weighted_comm_seconds(self) -> float:
        return sum(
            self.weights[o.index] * o.report.comm_seconds for o in self.admitted if o.report is not None
        )

    def key(self) -> tuple[float, float, float]:
        """Smaller is better: more admitted weight, then fewer weighted step seconds, then less communication."""
        return (-round(self.admitted_weight, 9), self.weighted_step_seconds, self.weighted_comm_seconds)


@dataclass
class BatchResult:
    """The answer (`plan`, never worse by `BatchPlan.key` than either baseline), the baselines, and the knapsack's
    bound on the admitted weight (`admission_optimal`: the answer reaches it)."""

    plan: BatchPlan
    baselines: dict[str, BatchPlan]
    weight_bound: float | None
    admission_optimal: bool
    stats: dict[str, float | int | str] = field(default_factory=dict)


def batch_problems(topology: Topology, state: ClusterState, jobs: Sequence[BatchJob]) -> list[Problem]:
    """Input errors of a batch, with paths ``jobs[i].weight``, ``jobs[i].job.name``, ``jobs[i].job.<field>``."""
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
            Problem(f"jobs[{i}].job.{p.path}", p.message) for p in request_problems(topology, state, bj.job)
        )
    return out


class BatchSearch:
    """One request: the inputs, the clock, and the single-job placements on a shrinking state."""

    def __init__(
        self, topology: Topology, state: ClusterState, jobs: Sequence[BatchJob], options: SolveOptions
    ) -> None:
        self.topology, self.state, self.jobs, self.options = topology, state, list(jobs), options
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + options.time_limit_s
        self.traffic: list[Traffic] = [job_traffic(bj.job) for bj in jobs]
        self.solo: list[list[str]] = [
            explain_infeasible(topology, state, bj.job, t) for bj, t in zip(jobs, self.traffic, strict=True)
        ]
        self.feasible = [i for i, r in enumerate(self.solo) if not r]
        self.placements = 0
        self.cut_short = 0  # sequential passes ended early at the time limit
        self.seen: dict[
            int, dict[tuple[int, ...], CostReport]
        ] = {}  # every placement found per job, any state

    def remaining(self) -> float:
        if self.options.deterministic:
            return self.options.time_limit_s
        return self.deadline - time.perf_counter()

    def stopped(self) -> bool:
        return self.options.stop is not None and self.options.stop.is_set()

    def state_with(
        self, assign: Mapping[int, tuple[list[int], CostReport]], skip: int | None = None
    ) -> ClusterState:
        """The base state with the devices of every job in `assign` (but `skip`) occupied by that job."""
        occ = dict(self.state.occupied)
        for j, (m, _) in assign.items():
            if j != skip:
                name = self.jobs[j].job.name
                for d in m:
                    occ[d] = name
        return replace(self.state, occupied=occ)

    def place_one(
        self, j: int, state: ClusterState, limit_s: float, allowed: set[int] | None = None
    ) -> tuple[list[int], CostReport] | None:
        """Job `j` by the cpsat strategy on `state` (only on `allowed` devices, when given); None if it fails."""
        job = self.jobs[j].job
        if allowed is not None:
            occ = dict(state.occupied)
            for d in candidate_devices(self.topology, state, job):
                if d not in allowed:
                    occ[d] = "<reserved for another job of the batch>"
            solve_state = replace(state, occupied=occ)
        else:
            solve_state = state
        if explain_infeasible(self.topology, solve_state, job, self.traffic[j]):
            return None
        opts = SolveOptions(
            strategy=Strategy.CPSAT,
            time_limit_s=max(0.05, limit_s),
            relative_gap=self.options.relative_gap,
            seed=self.options.seed,
            workers=self.options.workers,
            stop=self.options.stop,
            deterministic=self.options.deterministic,
        )
        self.placements += 1
        try:
            res = place(self.topology, solve_state, job, opts)
        except InfeasibleError:
            return None
        if (
            res.mapping is None
            or res.report is None
            or validate(self.topology, state, job, res.mapping, traffic=self.traffic[j])
        ):
            return None
        self.seen.setdefault(j, {})[tuple(res.mapping)] = res.report
        return list(res.mapping), res.report

    def sequential(
        self,
        order: Sequence[int],
        budget_s: float,
        assign: Assign | None = None,
        allowed: Mapping[int, set[int]] | None = None,
    ) -> Assign:
        """Place `order` one job after the other on what the jobs before left; a job that does not fit is left
        out. Each job's time limit is its share (by ranks, at least 16) of `budget_s`."""
        out: Assign = dict(assign or {})
        todo = [j for j in order if j not in out]
        total = sum(max(16, self.jobs[j].job.ranks) for j in todo)
        end = time.perf_counter() + budget_s
        for j in todo:
            if self.stopped():
                break
            size = max(16, self.jobs[j].job.ranks)
            if self.options.deterministic:
                share = budget_s * size / max(total, 1)
            else:
                if self.remaining() < 0.05:  # the whole limit is spent (a loaded machine): leave the rest out
                    self.cut_short += 1
                    break
                share = min(
                    max(0.0, end - time.perf_counter()) * size / max(total, 1), self.remaining() - 0.05
                )
            total -= size
            got = self.place_one(j, self.state_with(out), share, None if allowed is None else allowed.get(j))
            if got is not None:
                out[j] = got
        return out

    def fifo(self) -> Assign:
        """The FIFO kueue-tas baseline."""
        out: Assign = {}
        for j in self.feasible:
            st = self.state_with(out)
            job, traffic = self.jobs[j].job, self.traffic[j]
            m = kueue_tas(self.topology, st, job, traffic)
            if m is not None and not validate(self.topology, st, job, m, traffic=traffic):
                out[j] = (m, evaluate(self.topology, st, job, m, traffic=traffic, check=False))
                self.seen.setdefault(j, {})[tuple(m)] = out[j][1]
        return out

    def key(self, assign: Assign) -> tuple[float, float, float]:
        w = [bj.weight for bj in self.jobs]
        return (
            -round(sum(w[j] for j in assign), 9),
            sum(w[j] * r.step_seconds for j, (_, r) in assign.items()),
            sum(w[j] * r.comm_seconds for j, (_, r) in assign.items()),
        )

    def reserved(self, adm: Admission, order: Sequence[int]) -> dict[int, set[int]]:
        """Concrete devices for the knapsack's host allocation: per host, its free candidates in device order go
        to the jobs in `order`; jobs without host-level units get every free device nobody reserved."""
        taken: set[int] = set()
        out: dict[int, set[int]] = {}
        hosts = self.topology.devices_in_domain[0]
        for j in order:
            if j not in adm.hosts:
                continue
            cands = set(candidate_devices(self.topology, self.state, self.jobs[j].job))
            mine: set[int] = set()
            for h, k in adm.hosts[j].items():
                free = [d for d in hosts[h] if d in cands and d not in taken][:k]
                mine.update(free)
                taken.update(free)
            out[j] = mine
        rest = {d for d in range(self.topology.num_devices) if self.state.usable(d) and d not in taken}
        for j in order:
            out.setdefault(j, rest)
        return out


def _order(b: BatchSearch, admitted: Sequence[int], demands: Mapping[int, Demand]) -> list[int]:
    """Jobs with units that must share a host (largest unit, then most ranks) first: they need whole fragments;
    then the rest by ranks. Heavier and higher-priority jobs first among equals."""

    def key(j: int) -> tuple[int, int, float, float, int]:
        units = demands[j].units.get(0)
        unit = max(units) if units else 1
        bj = b.jobs[j]
        return (-unit, -bj.job.ranks, -bj.weight, -bj.priority, j)

    return sorted(admitted, key=key)


def place_batch(
    topology: Topology, state: ClusterState, jobs: Sequence[BatchJob], options: SolveOptions | None = None
) -> BatchResult:
    """Admit and place a queue of jobs jointly on `state`. `options.time_limit_s` covers the whole batch.

    Raises `InputError` for bad input (duplicate names, bad weights, unknown names in a job). Every admitted
    mapping passes `placement.model.validate` against the state plus the other admitted jobs' devices, or the call
    raises `PlacementError`. A batch where no job fits is an answer (nothing admitted, each job with its reason).
    """
    opts = options or SolveOptions()
    problems = batch_problems(topology, state, jobs)
    if problems:
        raise InputError("batch", problems)
    b = BatchSearch(topology, state, jobs, opts)
    limit = opts.time_limit_s
    stats: dict[str, float | int | str] = {}

    fifo = b.fifo()
    stats["fifo_s"] = time.perf_counter() - b.t0
    prio_order = sorted(b.feasible, key=lambda j: (-b.jobs[j].priority, j))
    ranking = sorted(range(len(b.jobs)), key=lambda j: (b.jobs[j].priority, -j))
    tiebreak = {j: r for r, j in enumerate(ranking)}
    demands = {
        j: Demand.of(
            j,
            b.jobs[j].job,
            b.jobs[j].weight,
            tiebreak[j],
            topology,
            b.traffic[j],
            candidate_devices(topology, state, b.jobs[j].job),
        )
        for j in b.feasible
    }
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
    chosen = adm.admitted if adm.admitted else list(b.feasible)
    order = _order(b, chosen, demands)
    ours = b.sequential(order, 0.3 * limit)
    if len(ours) < len(order) and adm.hosts and not b.stopped():
        packed = b.sequential(order, 0.15 * limit, allowed=b.reserved(adm, order))
        stats["packed"] = len(packed)
        if b.key(packed) < b.key(ours):
            ours = packed
    if adm.bound is None or sum(b.jobs[j].weight for j in ours) < adm.bound - 5e-4 * len(jobs):
        rest = sorted(
            (j for j in b.feasible if j not in ours),
            key=lambda j: (-b.jobs[j].weight, -b.jobs[j].priority, j),
        )
        ours = b.sequential(rest, 0.1 * limit, assign=ours)
    if (opts.deterministic or b.remaining() > 0.35 * limit) and not b.stopped():
        # a second order over the same admitted jobs: the most weighted communication first (they gain the most
        # from the best domains); kept when better
        def comm(j: int) -> float:
            return b.jobs[j].weight * min((r.comm_seconds for r in b.seen.get(j, {}).values()), default=0.0)

        second = b.sequential(sorted(ours, key=lambda j: (-comm(j), -b.jobs[j].job.ranks, j)), 0.2 * limit)
        left = sorted(
            (j for j in b.feasible if j not in second),
            key=lambda j: (-b.jobs[j].weight, -b.jobs[j].priority, j),
        )
        second = b.sequential(left, 0.05 * limit, assign=second)
        stats["second_order"] = "kept" if b.key(second) < b.key(ours) else "dropped"
        if b.key(second) < b.key(ours):
            ours = second
    stats["batch_s"] = time.perf_counter() - t
    stats["knapsack_admitted"] = len(adm.admitted)
    stats["batch_admitted_before_improve"] = len(ours)

    t = time.perf_counter()
    # improve the best answer so far, ours or a baseline's (re-placing a baseline's jobs by cpsat often helps)
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
    stats["improve_s"] = time.perf_counter() - t
    stats["improved_jobs"] = moves
    stats["placements"] = b.placements
    if b.cut_short:
        stats["cut_short"] = b.cut_short

    explainer = Explainer(
        topology,
        state,
        [bj.job for bj in jobs],
        [bj.weight for bj in jobs],
        [bj.priority for bj in jobs],
        b.traffic,
        b.solo,
    )
    plans = {
        name: explainer.plan(name, assign) for name, assign in ((BATCH, ours), (FIFO, fifo), (PRIORITY, prio))
    }
    best = min((BATCH, FIFO, PRIORITY), key=lambda n: plans[n].key())  # min keeps the first of ties: ours
    plan = plans[best]
    bad = validate_batch(
        topology, state, [bj.job for bj in jobs], {o.index: o.mapping for o in plan.admitted if o.mapping}
    )
    if bad:
        raise PlacementError("internal: the batch answer breaks a rule: " + "; ".join(bad[:5]))
    stats["chosen"] = best
    stats["wall_s"] = time.perf_counter() - b.t0
    optimal = adm.bound is not None and plan.admitted_weight >= adm.bound - 5e-4 * len(jobs)
    return BatchResult(plan, {FIFO: plans[FIFO], PRIORITY: plans[PRIORITY]}, adm.bound, optimal, stats)
