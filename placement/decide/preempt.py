"""`preempt`: the running jobs to stop so that a job can be placed within a step bound, at the least cost (fewest
victims or fewest GPU-hours lost), with the Pareto set of that cost against the job's modeled step.

Victims are whole jobs of strictly lower priority than the incoming job. Candidate victim sets come in order of
cost from a small CP-SAT cover (free devices, required-level units and balanced slices counted per domain); each is
checked by `placement.decide.balance.place_job` (which aims for a balance rule) on the state with the victims'
devices freed. The ideal is `placement.decide.ideal`'s, shared with place or wait. See docs/decisions.md.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ortools.sat.python import cp_model

from placement.cost.report import CostReport
from placement.cost.serving import ServingReport
from placement.decide.balance import place_job
from placement.decide.ideal import ideal_result
from placement.decide.serving import place_decode_step
from placement.errors import InfeasibleError, InputError, InternalError, Problem
from placement.model.job import Job
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import validate
from placement.solve.run import request_problems
from placement.solve.types import SolveOptions
from placement.solve.units import candidate_devices, required_units

__all__ = [
    "CHECK_SHARE",
    "Objective",
    "PreemptAnswer",
    "PreemptResult",
    "RunningJob",
    "Victim",
    "check_options",
    "freed_state",
    "ideal_report",
    "objective_key",
    "preempt",
    "restart_cost",
]

CHECK_SHARE = 8
"""Each feasibility check (one `place_job` call) gets the request's time limit / CHECK_SHARE."""
COST_SCALE = 1000
"""GPU-hours enter the integer cover model rounded to 1/1000."""
DOMAIN_CANDIDATES = 3
"""Domains of the lowest level that can hold the job whose own covers are checked (for the Pareto set)."""
PARETO_EXTRA = 3
"""Victim sets checked after the least one, next in order of cost (for the Pareto set)."""


class Objective(StrEnum):
    """What `preempt` minimises first (the other is the tie-break, then the job's step)."""

    FEWEST = "fewest"
    """The fewest victims, then the fewest GPU-hours lost."""
    GPU_HOURS = "gpu-hours"
    """The fewest GPU-hours lost, then the fewest victims."""


@dataclass(frozen=True)
class RunningJob:
    """A running job that might be preempted: its name as in the state's occupancy, its priority, and what
    stopping it costs: `gpu_hours` lost, or `checkpoint_age_s` (the work since its last checkpoint, lost on
    every one of its devices). At least one of the two is given."""

    job: str
    priority: float = 0.0
    checkpoint_age_s: float | None = None
    gpu_hours: float | None = None


def restart_cost(rj: RunningJob, devices: int) -> float:
    """GPU-hours lost if `rj`, running on `devices` devices, is preempted: `gpu_hours` when given, else
    devices x checkpoint age / 3600."""
    if rj.gpu_hours is not None:
        return rj.gpu_hours
    return devices * (rj.checkpoint_age_s or 0.0) / 3600.0


@dataclass(frozen=True)
class Victim:
    """One preempted job, explained: its devices, how many of them lie in the domain that holds the incoming
    job and how many the job takes, the domains it clears, its priority and cost."""

    job: str
    priority: float
    devices: tuple[int, ...]
    gpu_hours: float
    checkpoint_age_s: float | None
    domain_devices: int
    used_devices: int
    explanation: str
    clears: tuple[str, ...] = ()
    """The domains (``level:name``, the highest level below the top) holding its devices that the preemption
    leaves with no occupied device."""


@dataclass
class PreemptAnswer:
    """One point of the trade-off: the victims, the job's mapping on the state with their devices freed, its
    modeled step, and the lowest domain (``level:name``) that holds the job."""

    name: str
    victims: list[Victim]
    mapping: list[int]
    report: CostReport
    gpu_hours: float
    within_bound: bool
    domain: str
    serving: ServingReport | None = None
    """A serving job's report on the mapping; `report` is then its decode step (``step_seconds`` = TPOT)."""

    @property
    def count(self) -> int:
        return len(self.victims)


@dataclass
class PreemptResult:
    """Pareto answers (cost by the objective, then step; each later one is faster), the recommended one (the
    least cost within the bound), the bound, the job's ideal step, and the running jobs that may not be
    preempted (higher or equal priority, or not listed)."""

    answers: list[PreemptAnswer]
    recommended: int
    bound_s: float
    ideal: CostReport | None
    objective: Objective
    proven: bool
    protected: list[str]
    stats: dict[str, float | int | str] = field(default_factory=dict)
    ideal_serving: ServingReport | None = None
    """A serving job: its serving report on the cluster with no occupancy."""

    @property
    def chosen(self) -> PreemptAnswer:
        return self.answers[self.recommended]


def objective_key(objective: Objective, count: int, gpu_hours: float) -> tuple[float, float]:
    """The order of victim sets: (victims, GPU-hours) or (GPU-hours, victims), GPU-hours rounded to 1/1000."""
    cost = round(gpu_hours * COST_SCALE) / COST_SCALE
    return (count, cost) if objective is Objective.FEWEST else (cost, count)


def check_options(options: SolveOptions) -> SolveOptions:
    """The options of one feasibility check: the request's, with its time limit / CHECK_SHARE."""
    return dataclasses.replace(options, time_limit_s=options.time_limit_s / CHECK_SHARE)


def freed_state(state: ClusterState, victims: frozenset[str] | set[str]) -> ClusterState:
    """`state` with every device of the `victims` jobs free."""
    return dataclasses.replace(state, occupied={d: j for d, j in state.occupied.items() if j not in victims})


def ideal_report(
    topology: Topology, state: ClusterState, job: Job, options: SolveOptions, traffic: Traffic | None = None
) -> CostReport | None:
    """The job's modeled step on the cluster with no occupancy (failures and degradations kept), balance rule
    honoured: `placement.decide.ideal.ideal_result`, solved once per process for the job's shape and shared with
    place or wait (`options`: the request's; the ideal gets its share). None when it does not fit even there."""
    hit = ideal_result(topology, state, job, options, traffic)
    return None if hit is None else hit[0]


def _problems(
    state: ClusterState,
    job: Job,
    running: Sequence[RunningJob],
    max_step_seconds: float | None,
    max_slowdown: float | None,
    job_priority: float,
) -> list[Problem]:
    out: list[Problem] = []
    known = sorted(set(state.occupied.values()))
    seen: set[str] = set()
    if not math.isfinite(job_priority):
        out.append(Problem("priority", f"must be a finite number, got {job_priority}"))
    for i, rj in enumerate(running):
        if rj.job in seen:
            out.append(Problem(f"running[{i}].job", f"job {rj.job!r} is listed twice"))
        seen.add(rj.job)
        if rj.job == job.name:
            out.append(Problem(f"running[{i}].job", f"{rj.job!r} is the incoming job itself"))
        elif rj.job not in known:
            shown = known[:10] + (["..."] if len(known) > 10 else [])
            out.append(
                Problem(
                    f"running[{i}].job",
                    f"no device of the state is occupied by job {rj.job!r}; jobs in the occupancy are {shown}",
                )
            )
        if not math.isfinite(rj.priority):
            out.append(Problem(f"running[{i}].priority", f"must be a finite number, got {rj.priority}"))
        if rj.gpu_hours is None and rj.checkpoint_age_s is None:
            out.append(
                Problem(
                    f"running[{i}]",
                    "give gpu_hours or checkpoint_age_s: the work lost if the job is preempted",
                )
            )
        for name, v in (("gpu_hours", rj.gpu_hours), ("checkpoint_age_s", rj.checkpoint_age_s)):
            if v is not None and not (math.isfinite(v) and v >= 0):
                out.append(Problem(f"running[{i}].{name}", f"must be a number >= 0, got {v}"))
    if max_step_seconds is not None and not (math.isfinite(max_step_seconds) and max_step_seconds > 0):
        out.append(Problem("max_step_seconds", f"must be a number > 0, got {max_step_seconds}"))
    if max_slowdown is not None and not (math.isfinite(max_slowdown) and max_slowdown >= 1):
        out.append(Problem("max_slowdown", f"must be a number >= 1 (1: the ideal step), got {max_slowdown}"))
    return out


@dataclass
class _Cover:
    """The data of the cover model: candidate devices with all preemptible jobs freed, who holds each, and the
    job's required-level units and balanced slices (level -> unit size -> units per job)."""

    devices: list[int]
    owner: dict[int, str]  # candidate device -> preemptible job holding it (free devices absent)
    units: dict[int, Counter[int]]


class _Search:
    """Feasibility checks (memoised by victim set) and the answers found."""

    def __init__(
        self,
        topology: Topology,
        state: ClusterState,
        job: Job,
        traffic: Traffic,
        options: SolveOptions,
        costs: Mapping[str, float],
        bound_s: float,
        objective: Objective,
        deadline: float,
        max_checks: int,
        running: Mapping[str, RunningJob],
        serving: ServingJob | None = None,
    ) -> None:
        self.topology, self.state, self.job, self.traffic = topology, state, job, traffic
        self.serving = serving
        self.serving_reports: dict[tuple[int, ...], ServingReport] = {}
        self.running = running
        self.options = check_options(options)
        self.costs = costs
        self.bound_s = bound_s
        self.objective = objective
        self.deadline = deadline
        self.max_checks = max_checks
        self.checks = 0
        self.memo: dict[frozenset[str], tuple[str, list[int], CostReport] | None] = {}
        self.found: list[PreemptAnswer] = []
        self.seen: dict[frozenset[str], PreemptAnswer | None] = {}

    def consider(self, name: str, victims: frozenset[str]) -> PreemptAnswer | None:
        """The answer of a victim set (checked once; one answer per set, named by the search that found it
        first), added to `found`; None when the job does not fit."""
        if victims in self.seen:
            return self.seen[victims]
        hit = self.check(name, victims)
        a = None if hit is None else _answer(self, name, victims, hit[0], hit[1], self.running)
        self.seen[victims] = a
        if a is not None:
            self.found.append(a)
        return a

    def key(self, victims: frozenset[str]) -> tuple[float, float]:
        return objective_key(self.objective, len(victims), sum(self.costs[v] for v in victims))

    def exhausted(self) -> bool:
        stop = self.options.stop
        return (
            self.checks >= self.max_checks
            or time.perf_counter() >= self.deadline
            or (stop is not None and stop.is_set())
        )

    def check(self, name: str, victims: frozenset[str]) -> tuple[list[int], CostReport] | None:
        """The job placed on the state with `victims` freed (memoised), or None when it does not fit."""
        if victims in self.memo:
            hit = self.memo[victims]
            return None if hit is None else (hit[1], hit[2])
        self.checks += 1
        st = freed_state(self.state, victims)
        try:
            if self.serving is not None:  # by the serving objective; its step is its TPOT
                mapping, report, srep = place_decode_step(self.topology, st, self.serving, self.options)
                self.serving_reports[tuple(mapping)] = srep
            else:
                res = place_job(self.topology, st, self.job, self.options, traffic=self.traffic)
                if res.mapping is None or res.report is None:
                    raise InternalError("place_job returned no mapping and raised nothing")
                mapping, report = res.mapping, res.report
        except InfeasibleError:
            self.memo[victims] = None
            return None
        broken = validate(self.topology, st, self.job, mapping, traffic=self.traffic)
        if broken:
            raise InternalError(f"the placement of the incoming job breaks {broken[0]}")
        self.memo[victims] = (name, mapping, report)
        return mapping, report

    def within(self, report: CostReport) -> bool:
        return report.step_seconds <= self.bound_s * (1 + 1e-9)


def _cover_data(
    topology: Topology, state: ClusterState, job: Job, traffic: Traffic, preemptible: Sequence[str]
) -> _Cover:
    pset = set(preemptible)
    all_freed = freed_state(state, pset)
    devices = candidate_devices(topology, all_freed, job)
    owner = {d: state.occupied[d] for d in devices if d in state.occupied and state.occupied[d] in pset}
    units: dict[int, Counter[int]] = {}
    for level, us in required_units(topology, job, traffic).items():
        sizes = Counter(len(u.ranks) for u in us if len(u.ranks) > 1)
        if sizes:
            units[level] = sizes
    bal = job.constraints.balance
    if bal is not None and bal.slice > 1:
        # balanced slices: every used domain of the level holds whole slices, so the domains need room for the
        # job's slices (necessary; the evenness itself is left to the check)
        level = topology.level_index(bal.level)
        if level not in units:
            units[level] = Counter({bal.slice: job.ranks // bal.slice})
    return _Cover(devices, owner, units)


def _covers(
    topology: Topology,
    cover: _Cover,
    job: Job,
    costs: Mapping[str, float],
    objective: Objective,
    within: frozenset[int] | None,
    seed: int,
    deadline: float,
    cut_short: list[bool],
) -> Iterator[frozenset[str]]:
    """Victim sets in nondecreasing order of the objective that meet the necessary counts: enough candidate
    devices (only those in `within`, when given) and, per required level, room for the job's units in the free
    devices of each domain of that level. Each set is yielded once (a no-good cut excludes it afterwards).
    `cut_short` gains an entry when the model ran out of time before proving that no further set exists."""
    devs = [d for d in cover.devices if within is None or d in within]
    victims = sorted({cover.owner[d] for d in devs if d in cover.owner})
    if len(devs) < job.ranks:
        return
    m = cp_model.CpModel()
    x = {v: m.new_bool_var(f"x[{v}]") for v in victims}
    free_n = sum(1 for d in devs if d not in cover.owner)
    held = Counter(cover.owner[d] for d in devs if d in cover.owner)
    m.add(free_n + sum(held[v] * x[v] for v in victims) >= job.ranks)
    for level, sizes in cover.units.items():
        col = topology.domain_column(level)
        free_d: Counter[int] = Counter()
        held_d: dict[int, Counter[str]] = {}
        for d in devs:
            k = col[d]
            if d in cover.owner:
                held_d.setdefault(k, Counter())[cover.owner[d]] += 1
            else:
                free_d[k] += 1
        domains = sorted(set(free_d) | set(held_d))
        for size in sorted(sizes):
            need = sum(n for s, n in sizes.items() if s >= size)
            caps = []
            for k in domains:
                top = (free_d[k] + sum(held_d.get(k, Counter()).values())) // size
                if top == 0:
                    continue
                c = m.new_int_var(0, top, f"cap[{level},{k},{size}]")
                m.add(size * c <= free_d[k] + sum(n * x[v] for v, n in held_d.get(k, Counter()).items()))
                caps.append(c)
            m.add(sum(caps) >= need)
    scaled = {v: round(costs[v] * COST_SCALE) for v in victims}
    count = sum(x.values())
    cost = sum(scaled[v] * x[v] for v in victims)
    first, second = (count, cost) if objective is Objective.FEWEST else (cost, count)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = seed

    def solve(model: cp_model.CpModel) -> bool | None:
        """True: optimal; False: infeasible; None: out of time."""
        solver.parameters.max_time_in_seconds = max(0.05, min(10.0, deadline - time.perf_counter()))
        status = solver.solve(model)
        if status == cp_model.OPTIMAL:
            return True
        return False if status == cp_model.INFEASIBLE else None

    while True:  # lexicographic: the least first term, then the least second term among those
        m.minimize(first)
        ok = solve(m)
        if not ok:
            if ok is None:  # not proven within the time left: the search is not exhaustive
                cut_short.append(True)
            return  # no further set meets the counts
        best_first = round(solver.objective_value)
        tie = m.clone()
        tie.add(first == best_first)
        tie.minimize(second)
        for v in victims:
            tie.add_hint(x[v], solver.value(x[v]))
        if not solve(tie):
            cut_short.append(True)
            return
        chosen = frozenset(v for v in victims if solver.value(x[v]))
        yield chosen
        m.add_bool_or([~x[v] for v in victims if v in chosen] + [x[v] for v in victims if v not in chosen])


def _lowest_domains(topology: Topology, cover: _Cover, job: Job) -> list[tuple[int, int, frozenset[int]]]:
    """(level, domain, its candidate devices) for every domain of the lowest level whose candidate devices (free
    or held by a preemptible job) number at least the job's ranks; below the top level only."""
    top = len(topology.levels) - 1
    for level in range(top):
        col = topology.domain_column(level)
        per: dict[int, list[int]] = {}
        for d in cover.devices:
            per.setdefault(col[d], []).append(d)
        fits = [(level, k, frozenset(ds)) for k, ds in sorted(per.items()) if len(ds) >= job.ranks]
        if fits:
            return fits
    return []


def _domain_name(topology: Topology, mapping: Sequence[int]) -> tuple[int, int, str]:
    level = topology.group_lca_level(mapping)
    k = topology.domain_of(mapping[0], level)
    return level, k, f"{topology.levels[level].name}:{topology.domain_names[level][k]}"


def _cleared(topology: Topology, after: ClusterState, devices: Sequence[int]) -> tuple[str, ...]:
    """The domains (``level:name``) of the highest level below the top that hold some of `devices` and have no
    occupied device on `after`: what preempting their job (with the other victims) clears."""
    for level in range(len(topology.levels) - 2, -1, -1):
        doms = sorted({topology.domain_of(d, level) for d in devices})
        free = [k for k in doms if not any(d in after.occupied for d in topology.devices_in_domain[level][k])]
        if free:
            lname = topology.levels[level].name
            return tuple(f"{lname}:{topology.domain_names[level][k]}" for k in free)
    return ()


def _answer(
    search: _Search,
    name: str,
    victims: frozenset[str],
    mapping: list[int],
    report: CostReport,
    running: Mapping[str, RunningJob],
) -> PreemptAnswer:
    topo, state = search.topology, search.state
    level, k, where = _domain_name(topo, mapping)
    in_domain = set(topo.devices_in_domain[level][k])
    used = set(mapping)
    after = freed_state(state, victims)
    cleared = not any(d in after.occupied for d in in_domain)
    out: list[Victim] = []
    for v in sorted(victims, key=lambda v: (-search.costs[v], v)):
        devs = tuple(sorted(d for d, j in state.occupied.items() if j == v))
        nd = sum(1 for d in devs if d in in_domain)
        nu = sum(1 for d in devs if d in used)
        rj = running[v]
        age = f", checkpoint {rj.checkpoint_age_s:g} s old" if rj.checkpoint_age_s is not None else ""
        shown = ", ".join(topo.devices[d].id for d in devs[:4]) + (" ..." if len(devs) > 4 else "")
        whole = _cleared(topo, after, devs)
        clears = f"; with the other victims it clears {where}" if cleared and nd else ""
        if whole and not clears:
            clears = f"; with the other victims it clears {', '.join(whole)}"
        text = (
            f"{v} (priority {rj.priority:g} < the job's): {len(devs)} device(s) ({shown}), {nd} of them in "
            f"{where}, the domain that holds the job, which takes {nu}{clears}; "
            f"{search.costs[v]:.3f} GPU-hours lost{age}"
        )
        out.append(Victim(v, rj.priority, devs, search.costs[v], rj.checkpoint_age_s, nd, nu, text, whole))
    total = sum(search.costs[v] for v in victims)
    served = search.serving_reports.get(tuple(mapping))
    return PreemptAnswer(name, out, mapping, report, total, search.within(report), where, served)


def _pareto(answers: list[PreemptAnswer], objective: Objective) -> list[PreemptAnswer]:
    """Least cost first; an answer stays when it is faster than every cheaper (or equally cheap) one."""
    out: list[PreemptAnswer] = []
    for a in sorted(
        answers,
        key=lambda a: (*objective_key(objective, a.count, a.gpu_hours), a.report.step_seconds, a.name),
    ):
        if out and a.report.step_seconds >= out[-1].report.step_seconds * (1 - 1e-12):
            continue
        out.append(a)
    return out


def preempt(
    topology: Topology,
    state: ClusterState,
    job: Job,
    running: Sequence[RunningJob],
    *,
    job_priority: float = 0.0,
    max_step_seconds: float | None = None,
    max_slowdown: float | None = None,
    objective: Objective | str = Objective.FEWEST,
    options: SolveOptions | None = None,
    max_checks: int = 64,
    serving: ServingJob | None = None,
) -> PreemptResult:
    """The victims whose preemption lets `job` (priority `job_priority`) be placed with a modeled step at most
    the bound, at the least cost by `objective`.

    The bound is `max_step_seconds`, or `max_slowdown` x the job's ideal step (`ideal_report`), the tighter
    when both are given; with neither, any placement will do. Only jobs of `running` with a priority strictly
    below `job_priority` may be preempted. `options.time_limit_s` covers the whole search; each feasibility
    check is a `place_job` call with `check_options(options)` (a balance rule is aimed for, not only checked); at
    most `max_checks` of them. Raises `InputError`
    for bad input, `InfeasibleError` when no set of preemptible jobs lets the job fit within the bound.

    A serving deployment gives `serving` and, as `job`, its explicit job
    (`placement.solve.serving.serving_traffic_job`): each check places it by the serving objective
    (`placement.decide.serving.place_decode_step`), its step is its time per output token, so the bound is on
    the TPOT (`max_step_seconds`, else the job's ``load.tpot_bound_ms``), and its ideal is its serving placement
    on the cluster with no occupancy.
    """
    t0 = time.perf_counter()
    opts = options or SolveOptions(time_limit_s=10.0)
    objective = _objective(objective)
    traffic = job_traffic(job)
    problems = [Problem(f"job.{p.path}", p.message) for p in request_problems(topology, state, job, traffic)]
    problems += _problems(state, job, running, max_step_seconds, max_slowdown, job_priority)
    if max_checks < 1:
        problems.append(Problem("max_checks", f"must be >= 1, got {max_checks}"))
    if problems:
        raise InputError("request", problems)
    held = Counter(state.occupied.values())
    costs = {rj.job: restart_cost(rj, held[rj.job]) for rj in running}
    preemptible = sorted(rj.job for rj in running if rj.priority < job_priority)
    protected = sorted(j for j in held if j not in preemptible and j != job.name)
    ideal_serving: ServingReport | None = None
    if serving is not None:
        ideal, ideal_serving = _serving_ideal(topology, state, serving, opts)
        if max_step_seconds is None and serving.load.tpot_bound_ms is not None:
            max_step_seconds = serving.load.tpot_bound_ms / 1e3
    else:
        ideal = ideal_report(topology, state, job, opts, traffic)
    bound = _bound(topology, ideal, max_step_seconds, max_slowdown)
    search = _Search(
        topology,
        state,
        job,
        traffic,
        opts,
        costs,
        bound,
        objective,
        t0 + opts.time_limit_s,
        max_checks,
        {rj.job: rj for rj in running},
        serving,
    )
    best: tuple[float, float] | None = None
    now = search.consider("none", frozenset())
    if now is not None and now.within_bound:
        best = search.key(frozenset())
    cover = _cover_data(topology, state, job, traffic, preemptible)
    if best is None or len(search.found) < 2:
        best = _domain_candidates(search, cover, best)
    proven = best is not None and best == search.key(frozenset())
    if not proven:
        proven = _exact_search(search, cover, best)
    stats: dict[str, float | int | str] = {
        "checks": search.checks,
        "preemptible": len(preemptible),
        "wall_s": time.perf_counter() - t0,
    }
    inside = [a for a in search.found if a.within_bound]
    if not inside:
        raise InfeasibleError(_no_answer_reasons(search, preemptible, protected, job_priority, proven))
    answers = _pareto(search.found, objective)
    pick = min(
        inside,
        key=lambda a: (*objective_key(objective, a.count, a.gpu_hours), a.report.step_seconds, a.name),
    )
    if pick not in answers:
        raise InternalError("the recommended answer is not on the Pareto front")
    stats["proven"] = int(proven)
    return PreemptResult(
        answers, answers.index(pick), bound, ideal, objective, proven, protected, stats, ideal_serving
    )


def _serving_ideal(
    topology: Topology, state: ClusterState, job: ServingJob, options: SolveOptions
) -> tuple[CostReport | None, ServingReport | None]:
    """A serving job's decode step and serving report placed on the cluster with no occupancy (failures and
    degradations kept), with a check's share of the time; (None, None) when it does not fit even there."""
    empty = dataclasses.replace(state, occupied={})
    try:
        _, report, served = place_decode_step(topology, empty, job, check_options(options))
    except InfeasibleError:
        return None, None
    return report, served


def _objective(objective: Objective | str) -> Objective:
    try:
        return Objective(objective)
    except ValueError:
        raise InputError(
            "request",
            [
                Problem(
                    "objective", f"unknown objective {objective!r}; use one of {[o.value for o in Objective]}"
                )
            ],
        ) from None


def _bound(
    topology: Topology, ideal: CostReport | None, max_step_seconds: float | None, max_slowdown: float | None
) -> float:
    """The step bound: `max_step_seconds`, or `max_slowdown` x the ideal step, the tighter of the two; inf with
    neither."""
    bound = math.inf
    if max_step_seconds is not None:
        bound = max_step_seconds
    if max_slowdown is not None:
        if ideal is None:
            raise InfeasibleError(
                [f"the job does not fit even on the empty cluster ({topology.num_devices} devices)"]
            )
        bound = min(bound, max_slowdown * ideal.step_seconds)
    return bound


def _domain_candidates(
    search: _Search, cover: _Cover, best: tuple[float, float] | None
) -> tuple[float, float] | None:
    """The lowest domains that can hold the job: the cheapest covers of the best `DOMAIN_CANDIDATES` of them
    and, for the best one, clearing it. Returns the best key within the bound so far."""
    topology, job = search.topology, search.job
    seed = search.options.seed  # the request's (check_options changes only the time limit)
    ranked: list[tuple[tuple[float, float], int, int, frozenset[str], frozenset[int]]] = []
    for level, k, devs in _lowest_domains(topology, cover, job):
        first = next(
            _covers(topology, cover, job, search.costs, search.objective, devs, seed, search.deadline, []),
            None,
        )
        if first is not None:
            ranked.append((search.key(first), level, k, first, devs))
    ranked.sort(key=lambda r: (r[0], r[1], r[2]))
    for key, level, k, victims, _ in ranked[:DOMAIN_CANDIDATES]:
        if search.exhausted():
            break
        where = f"{topology.levels[level].name}:{topology.domain_names[level][k]}"
        a = search.consider(f"domain {where}", victims)
        if a is not None and a.within_bound and (best is None or key < best):
            best = key
    if ranked and not search.exhausted():
        _, level, k, _, devs = ranked[0]
        clear = frozenset(cover.owner[d] for d in devs if d in cover.owner)
        where = f"{topology.levels[level].name}:{topology.domain_names[level][k]}"
        a = search.consider(f"clear {where}", clear)
        if a is not None and a.within_bound and (best is None or search.key(clear) < best):
            best = search.key(clear)
    return best


def _exact_search(search: _Search, cover: _Cover, best: tuple[float, float] | None) -> bool:
    """Every set cheaper than the best so far that meets the counts, cheapest first; then up to `PARETO_EXTRA`
    of the next sets (no cheaper, perhaps faster: points of the Pareto set). True when the cheapest set within
    the bound is proven (every cheaper set was checked)."""
    topology, job = search.topology, search.job
    seed = search.options.seed  # the request's (check_options changes only the time limit)
    proven = True
    extra = 0
    reached = False
    cut_short: list[bool] = []
    for victims in _covers(
        topology, cover, job, search.costs, search.objective, None, seed, search.deadline, cut_short
    ):
        key = search.key(victims)
        if best is not None and key >= best:
            reached = True
            if extra >= PARETO_EXTRA or search.exhausted():
                break
            extra += 1
            search.consider("more", victims)
            continue
        if search.exhausted():
            proven = False
            break
        a = search.consider("exact", victims)
        if a is not None and a.within_bound:
            best, reached = key, True
    if cut_short and not reached:  # the model ran out of time before the cheaper sets were all seen
        proven = False
    return proven


def _no_answer_reasons(
    search: _Search, preemptible: Sequence[str], protected: Sequence[str], job_priority: float, proven: bool
) -> list[str]:
    """Why no victim set lets the job fit within the bound: the bound, the fastest placement found, whether the
    search was cut short, and the jobs that may not be preempted."""
    bound = search.bound_s
    step = "a time per output token" if search.serving is not None else "a step"
    bound_text = "any step" if math.isinf(bound) else f"{step} of at most {bound:.4f} s"
    fastest = min((a.report.step_seconds for a in search.found), default=None)
    reasons = [
        f"no set of the {len(preemptible)} running job(s) of priority below {job_priority:g} lets the job "
        f"place with {bound_text}"
        + (f" (the fastest placement found takes {fastest:.4f} s)" if fastest is not None else "")
        + ("" if proven else f"; stopped after {search.checks} checks (raise max_checks or the time limit)")
    ]
    if protected:
        reasons.append(
            f"{len(protected)} running job(s) may not be preempted (priority >= {job_priority:g}, or not "
            f"listed in running): {protected[:10]}"
        )
    return reasons
