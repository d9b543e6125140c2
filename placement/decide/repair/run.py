"""`repair`: a running job's mapping after failures, drains and degradations, with few moves: a Pareto set of
(moved ranks, modeled step seconds) answers from the least repair up to a full re-place.

The same machinery as `place` (`PreparedRequest.prepare`, the unit model, CP-SAT) plus a move term
(`placement.decide.repair.model`); every answer is scored by `placement.cost.evaluate.evaluate` and checked by `validate`.
Its input is resolved by `placement.decide.repair.input`; the move-capped searches are in
`placement.decide.repair.search`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.cost.serving import ServingReport
from placement.decide.batch.clock import WallClock, limit_kind
from placement.decide.repair.input import RepairBudget, repair_state, resolve_selectors
from placement.decide.repair.model import MoveProgram, MoveSolve, greedy_assignment, relabel_keeping
from placement.decide.repair.search import budget_caps, neighbourhoods, sweep
from placement.errors import InfeasibleError, InputError, InternalError, Problem
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import validate
from placement.solve.construct import HostPool
from placement.solve.cpsat.model import build_units
from placement.solve.prepared import PreparedRequest
from placement.solve.run import explain_infeasible, place, request_problems
from placement.solve.types import SolveOptions

__all__ = ["Move", "Price", "RepairAnswer", "RepairResult", "pareto_front", "recommend", "repair"]

Price = Callable[[ClusterState, Sequence[int]], tuple[CostReport, ServingReport | None]]
"""How a repair prices a mapping on the repair state, instead of `evaluate`: its report (the step the answers are
ranked by) and, for a serving deployment, its serving report (`placement.decide.repair.serving`)."""

SINGLE_RANK_UNITS = 16  # jobs up to this size move rank by rank; larger ones move whole units (TP groups)
GLOBAL_VARS = 4_000  # units x hosts up to this: one program over every unit (minimum moves proven)


@dataclass(frozen=True)
class Move:
    rank: int
    src: int  # device index (the current one)
    dst: int


@dataclass
class RepairAnswer:
    """One point of the trade-off: a valid mapping, what moves, its modeled step; `optimal`: the least surrogate
    among mappings (of whole units) that move at most this many ranks, proven by CP-SAT."""

    name: str
    mapping: list[int]
    report: CostReport
    moves: list[Move]
    moved_hosts: int
    optimal: bool = False
    within_budget: bool = True
    serving: ServingReport | None = None
    """A serving job's report after the repair (`placement.decide.repair.serving`); `report` is its decode step."""

    @property
    def moved_ranks(self) -> int:
        return len(self.moves)


@dataclass
class RepairResult:
    """Pareto answers by moved ranks (fewest first; the last is the full re-place when it is not dominated),
    the recommended one, the current mapping's step on the new state, and the ranks that had to move."""

    answers: list[RepairAnswer]
    recommended: int
    before: CostReport
    forced: list[int]
    min_moves: int
    replace: RepairAnswer | None = None
    stats: dict[str, float | int | str] = field(default_factory=dict)
    before_serving: ServingReport | None = None
    """A serving job: the current mapping's serving report on the new state."""


def _answer(
    topology: Topology,
    state: ClusterState,
    job: Job,
    name: str,
    mapping: list[int],
    current: Sequence[int],
    optimal: bool,
    traffic: Traffic,
    price: Price | None = None,
) -> RepairAnswer | None:
    if validate(topology, state, job, mapping, traffic=traffic):
        return None
    serving = None
    if price is not None:
        rep, serving = price(state, mapping)
    else:
        rep = evaluate(topology, state, job, mapping, traffic=traffic, check=False)
    moves = [Move(r, current[r], d) for r, d in enumerate(mapping) if d != current[r]]
    hosts = len({topology.devices[m.dst].host_index for m in moves})
    return RepairAnswer(name, mapping, rep, moves, hosts, optimal, serving=serving)


def pareto_front(answers: list[RepairAnswer]) -> list[RepairAnswer]:
    """Fewest moves first; an answer stays when it is faster than every answer with fewer or as many moves."""
    out: list[RepairAnswer] = []
    for a in sorted(
        answers, key=lambda a: (a.moved_ranks, a.report.step_seconds, a.report.comm_seconds, not a.optimal)
    ):
        if out and a.report.step_seconds >= out[-1].report.step_seconds * (1 - 1e-12):
            continue
        out.append(a)
    return out


def repair(
    topology: Topology,
    state: ClusterState,
    job: Job,
    current: Sequence[int],
    *,
    drain: Sequence[str] = (),
    spares: Sequence[str] = (),
    spares_only: bool = False,
    budget: RepairBudget | None = None,
    options: SolveOptions | None = None,
    points: int = 3,
    price: Price | None = None,
) -> RepairResult:
    """Repair `job`, running on `current` (device index per rank), on the new `state`.

    Ranks on failed or drained devices must move; others move only in answers that are faster. `spares`
    (selectors) are preferred targets; with `spares_only` they are the only new devices. Raises `InputError`
    for bad input and `InfeasibleError` (with numbers) when no answer fits the hard rules or the budget.
    `points`: move caps tried between the least repair and the unconstrained answer. `options.time_limit_s`
    covers the whole repair: wall clock (within +10% + 50 ms), or with `options.deterministic` a deterministic
    budget (no bound on the wall time); `stats["time_limit"]` says which. `price`: how every answer and the
    current mapping are priced, before the front is chosen (default `evaluate`; a serving deployment's TPOT).
    """
    opts = options or SolveOptions(time_limit_s=5.0)
    clock = WallClock(opts, _RESERVE_SHARE * opts.time_limit_s + 0.02 + 5e-5 * job.ranks)
    try:
        result = _repair(
            topology,
            state,
            job,
            current,
            drain=drain,
            spares=spares,
            spares_only=spares_only,
            budget=budget,
            options=clock.options,
            points=points,
            price=price,
        )
    finally:
        clock.cancel()
    result.stats["time_limit"] = limit_kind(opts)
    return result


def _stopped(opts: SolveOptions) -> bool:
    return opts.stop is not None and opts.stop.is_set()


_RESERVE_SHARE = 0.05
"""Of a repair's wall-clock limit, kept for scoring and validating the answers after the search."""


@dataclass
class _Search:
    """One repair's shared state: the repair state and its prepared request, the current mapping and the ranks
    that must move, the spares, the clock and the stats."""

    topology: Topology
    state: ClusterState
    job: Job
    current: Sequence[int]
    traffic: Traffic
    opts: SolveOptions
    t0: float
    request: PreparedRequest
    spare_devs: set[int]
    forced: list[int]
    stats: dict[str, float | int | str] = field(default_factory=dict)
    price: Price | None = None

    def left(self, share: float) -> float:
        """`share` of the time left, after a reserve for scoring and validating the answers afterwards."""
        reserve = 0.05 + 4e-4 * self.job.ranks
        return max(0.05, (0.95 * self.opts.time_limit_s - reserve - (time.perf_counter() - self.t0)) * share)

    def answer(self, name: str, mapping: list[int], optimal: bool) -> RepairAnswer | None:
        return _answer(
            self.topology,
            self.state,
            self.job,
            name,
            mapping,
            self.current,
            optimal,
            self.traffic,
            self.price,
        )


def _check_input(
    topology: Topology,
    job: Job,
    current: Sequence[int],
    drain: Sequence[str],
    spares: Sequence[str],
    budget: RepairBudget,
) -> tuple[set[int], set[int]]:
    """The drained and spare devices; every problem of the current mapping, selectors and budget at once."""
    problems: list[Problem] = []
    if len(current) != job.ranks:
        problems.append(Problem("current", f"{len(current)} devices for a job of {job.ranks} ranks"))
    for r, d in enumerate(current):
        if not 0 <= d < topology.num_devices:
            problems.append(Problem(f"current[{r}]", f"device index {d} is not in the cluster"))
    drained, pr = resolve_selectors(topology, drain, "drain")
    problems += pr
    spare_devs, pr = resolve_selectors(topology, spares, "spares")
    problems += pr
    for name, v in (
        ("budget.max_moved_ranks", budget.max_moved_ranks),
        ("budget.max_moved_hosts", budget.max_moved_hosts),
    ):
        if v is not None and v < 0:
            problems.append(Problem(name, f"must be >= 0, got {v}"))
    if budget.move_cost_s < 0 or not math.isfinite(budget.move_cost_s):
        problems.append(
            Problem("budget.move_cost_s", f"must be a finite number >= 0, got {budget.move_cost_s}")
        )
    if problems:
        raise InputError(f"job {job.name}", problems)
    return drained, spare_devs


def _prepare(
    topology: Topology,
    state: ClusterState,
    job: Job,
    current: Sequence[int],
    drained: set[int],
    spare_devs: set[int],
    spares_only: bool,
    opts: SolveOptions,
    t0: float,
    price: Price | None,
) -> tuple[_Search, CostReport, ServingReport | None]:
    """The repair state (failed and drained devices out) and its prepared request, checked; with `spares_only`
    every device but the current ones and the spares is excluded. Also the current mapping's report on it."""
    rstate, problems = repair_state(topology, state, job, current, drained)
    traffic = job_traffic(job)
    problems += request_problems(topology, rstate, job, traffic)
    if problems:
        raise InputError(f"job {job.name}", problems)
    if spares_only:
        allowed = set(current) | spare_devs
        excl = tuple(d.id for d in topology.devices if d.index not in allowed)
        job = dataclasses.replace(
            job, constraints=dataclasses.replace(job.constraints, exclude=job.constraints.exclude + excl)
        )
    reasons = explain_infeasible(topology, rstate, job, traffic)
    if reasons:
        raise InfeasibleError(reasons)
    before_serving = None
    if price is not None:
        before, before_serving = price(rstate, current)
    else:
        before = evaluate(topology, rstate, job, current, traffic=traffic, check=False)
    request = PreparedRequest.prepare(topology, rstate, job, opts, traffic=traffic, t0=t0)
    request.pool = HostPool.of(topology, request.candidates)  # degraded devices too: the move term needs them
    cset = set(request.candidates)
    forced = [r for r, d in enumerate(current) if d not in cset]
    run = _Search(topology, rstate, job, current, traffic, opts, t0, request, spare_devs, forced, price=price)
    run.stats["forced"] = len(forced)
    return run, before, before_serving


def _full_replace(run: _Search) -> tuple[list[RepairAnswer], RepairAnswer | None]:
    """The full re-place: `place` on the same state (the reference the trade-off ends at), and the same
    placement relabeled to keep ranks where they are (kept where the evaluator finds it no slower)."""
    answers: list[RepairAnswer] = []
    opts = run.opts
    full = place(
        run.topology,
        run.state,
        run.job,
        dataclasses.replace(opts, time_limit_s=0.35 * opts.time_limit_s),
        traffic=run.traffic,
    )
    if full.mapping is None:
        raise InternalError("place returned no mapping for the repair's full re-place")
    replaced = run.answer("re-place", full.mapping, False)
    if replaced is not None:
        answers.append(replaced)
        relabeled = relabel_keeping(run.topology, run.job, full.mapping, run.current)
        kept = run.answer("re-place, relabeled", relabeled, False)
        # the same placement up to symmetry: kept only where the evaluator agrees it is no slower
        if kept is not None and kept.report.step_seconds <= replaced.report.step_seconds * (1 + 1e-9):
            answers.append(kept)
    return answers, replaced


def _unit_ranks(run: _Search) -> tuple[list[tuple[int, ...]], bool]:
    """The ranks of each unit that moves whole, and whether the units are exact (`build_units`)."""
    units = build_units(run.request)
    job = run.job
    if job.ranks <= SINGLE_RANK_UNITS or units.split:
        if job.constraints.require:
            req = build_units(run.request)
            return list(req.ranks), req.exact
        return [(r,) for r in range(job.ranks)], True
    return list(units.ranks), units.exact


def _fixed_units(run: _Search, unit_ranks: list[tuple[int, ...]]) -> dict[int, int]:
    """Units whole on one usable current host, unpinned: the local program keeps them there."""
    host_of = [d.host_index for d in run.topology.devices]
    forced_set = set(run.forced)
    fixed: dict[int, int] = {}
    for u, ranks in enumerate(unit_ranks):
        on = {host_of[run.current[r]] for r in ranks}
        if len(on) == 1 and not any(r in forced_set or r in run.request.pinned for r in ranks):
            fixed[u] = on.pop()
    return fixed


def _local_search(
    run: _Search,
    local: MoveProgram,
    fixed: dict[int, int],
    unit_ranks: list[tuple[int, ...]],
    units_exact: bool,
    budget: RepairBudget,
) -> tuple[MoveSolve, dict[int, int] | None, list[tuple[str, dict[int, int], bool]]]:
    """The local program: the fixed units stay, the rest (the forced ones) are placed with the fewest moves;
    then the least surrogate at that many moves, and one that also moves the units on slow devices. Returns the
    fewest-moves answer, the hint for the programs after it, and the extra candidates for the front."""
    greedy = greedy_assignment(local)
    loc = local.solve("moves", run.left(0.2), greedy)
    if loc.assignment is None and greedy is not None:
        loc = MoveSolve(greedy, "GREEDY", False, sum(local.move.get((u, s), 0) for u, s in greedy.items()))
    hint = loc.assignment
    extra: list[
        tuple[str, dict[int, int], bool]
    ] = []  # more candidates for the front, scored by the evaluator
    if loc.assignment is None or loc.moves is None:
        return loc, hint, extra
    local.cap_moves(loc.moves)
    ls = local.solve("surrogate", run.left(0.2), loc.assignment)
    hint = ls.assignment or loc.assignment
    extra.append(("least", hint, False))
    # the unit program does not see slow devices: a candidate that also moves the units on them
    rstate, current = run.state, run.current
    host_of = [d.host_index for d in run.topology.devices]
    slow_hosts = {up.domain for up, f in rstate.uplink_slowdown.items() if up.level == 0 and f > 1.0}
    slow = {
        u
        for u in fixed
        if any(
            rstate.device_slowdown.get(current[r], 1.0) > 1.0 or host_of[current[r]] in slow_hosts
            for r in unit_ranks[u]
        )
    }
    if slow and run.left(1.0) > 0.5 and not _stopped(run.opts):
        off = MoveProgram(
            run.request,
            unit_ranks,
            units_exact,
            current,
            run.spare_devs,
            {u: h for u, h in fixed.items() if u not in slow},
        )
        budget_caps(off, budget)
        so = off.solve("surrogate", run.left(0.2), hint)
        if so.assignment is not None:
            extra.append(("off slow devices", so.assignment, False))
    return loc, hint, extra


def _least_moves(
    run: _Search,
    loc: MoveSolve,
    hint: dict[int, int] | None,
    unit_ranks: list[tuple[int, ...]],
    units_exact: bool,
    answers: list[RepairAnswer],
) -> tuple[MoveSolve, MoveProgram | None]:
    """The fewest moves: the local answer, or the whole program's (over every unit and host, proven minimal)
    when it is small enough and the time is not up. Returns it and the whole program (None: not built)."""
    request, stats = run.request, run.stats
    pool_hosts = sum(1 for devs in request.pool.devices.values() if len(devs) >= min(map(len, unit_ranks)))
    whole = len(unit_ranks) * pool_hosts <= GLOBAL_VARS
    stats.update(
        {
            "units": len(unit_ranks),
            "local_status": loc.status,
            "model": "whole" if whole else "neighbourhoods",
        }
    )
    # the whole program is the costliest to build: not once the time is up (the local answer stands)
    prog = (
        MoveProgram(request, unit_ranks, units_exact, run.current, run.spare_devs)
        if whole and not _stopped(run.opts)
        else None
    )
    if whole and prog is None:
        stats["model"] = "none: the time was up"
    least = loc
    if prog is not None:
        stats.update(
            {"model_vars": prog.variables, "slots": len(prog.hosts), "slots_pruned": int(prog.pruned)}
        )
        g = prog.solve("moves", run.left(0.25), hint)
        stats["least_status"] = g.status
        if g.assignment is not None and (loc.moves is None or (g.moves or 0) < loc.moves):
            least = g
        elif g.assignment is not None and hint is not None:
            least = MoveSolve(hint, g.status, g.optimal, loc.moves)
    if least.assignment is None:
        raise InfeasibleError(
            [
                f"no repair keeps the hard rules ({least.status}); a full re-place found "
                + (f"one moving {answers[0].moved_ranks} ranks" if answers else "none")
            ]
        )
    return least, prog


def _check_budget(
    run: _Search,
    budget: RepairBudget,
    least: MoveSolve,
    host_prog: MoveProgram,
    proven_program: bool,
    unit: int,
) -> None:
    """InfeasibleError, with the numbers, when the least repair moves more ranks or hosts than the budget."""
    min_moves = least.moves or 0
    proven = proven_program and least.optimal
    if budget.max_moved_ranks is not None and min_moves > budget.max_moved_ranks:
        raise InfeasibleError(
            [
                _over_budget(
                    run.topology,
                    run.current,
                    run.forced,
                    min_moves,
                    "ranks",
                    budget.max_moved_ranks,
                    unit,
                    proven,
                )
            ]
        )
    if budget.max_moved_hosts is not None and least.assignment is not None:
        hl = host_prog.solve("hosts", run.left(0.2), least.assignment)
        if hl.assignment is not None:
            hosts_n = _hosts_of(run.topology, host_prog.realize(hl.assignment), run.current)
            if hosts_n > budget.max_moved_hosts:
                raise InfeasibleError(
                    [
                        _over_budget(
                            run.topology,
                            run.current,
                            run.forced,
                            hosts_n,
                            "hosts",
                            budget.max_moved_hosts,
                            unit,
                            hl.optimal and proven_program,
                        )
                    ]
                )


def _front(
    run: _Search,
    answers: list[RepairAnswer],
    candidates: list[tuple[str, dict[int, int], bool]],
    host_prog: MoveProgram,
    budget: RepairBudget,
    min_moves: int,
) -> tuple[list[RepairAnswer], int]:
    """The candidates realized onto devices and scored, the Pareto front of all answers, and the recommended
    one (within the budget, the least horizon steps plus move cost)."""
    seen: set[tuple[int, ...]] = {tuple(a.mapping) for a in answers}
    for name, assign, optimal in candidates:
        mp = host_prog.realize(assign)
        if mp is None or (tuple(mp) in seen and not optimal):
            continue
        seen.add(tuple(mp))
        a = run.answer(name, mp, optimal)
        if a is not None:
            answers.append(a)
    if not answers:
        raise InfeasibleError(["no repair could be realized onto devices that keep every hard rule"])
    for a in answers:
        a.within_budget = (budget.max_moved_ranks is None or a.moved_ranks <= budget.max_moved_ranks) and (
            budget.max_moved_hosts is None or a.moved_hosts <= budget.max_moved_hosts
        )
    front = pareto_front(answers)
    if front[0].moved_ranks == min_moves and front[0].name != "re-place":
        front[0].name = "least"
    return front, recommend(front, budget)


def recommend(front: Sequence[RepairAnswer], budget: RepairBudget) -> int:
    """The recommended answer of a front: within the budget (any, if none is), the least
    ``horizon_steps * step_seconds + move_cost_s * moved_ranks``."""
    ok = [i for i, a in enumerate(front) if a.within_budget] or list(range(len(front)))
    return min(
        ok,
        key=lambda i: (
            budget.horizon_steps * front[i].report.step_seconds + budget.move_cost_s * front[i].moved_ranks
        ),
    )


def _repair(
    topology: Topology,
    state: ClusterState,
    job: Job,
    current: Sequence[int],
    *,
    drain: Sequence[str],
    spares: Sequence[str],
    spares_only: bool,
    budget: RepairBudget | None,
    options: SolveOptions,
    points: int,
    price: Price | None,
) -> RepairResult:
    """`repair`'s stages: check the input, prepare the repair state, re-place in full, then the fewest moves
    (local, then whole or by neighbourhoods), the budget, the sweep of move caps, and the front."""
    budget = budget or RepairBudget()
    t0 = time.perf_counter()
    drained, spare_devs = _check_input(topology, job, current, drain, spares, budget)
    run, before, before_serving = _prepare(
        topology, state, job, current, drained, spare_devs, spares_only, options, t0, price
    )
    answers, replaced = _full_replace(run)
    unit_ranks, units_exact = _unit_ranks(run)
    fixed = _fixed_units(run, unit_ranks)
    local = MoveProgram(run.request, unit_ranks, units_exact, current, spare_devs, fixed)
    loc, hint, extra = _local_search(run, local, fixed, unit_ranks, units_exact, budget)
    least, prog = _least_moves(run, loc, hint, unit_ranks, units_exact, answers)
    min_moves = least.moves or 0
    proven_program = prog is not None and not prog.pruned
    run.stats["min_moves"] = min_moves
    run.stats["min_moves_proven"] = int(proven_program and least.optimal)
    host_prog = prog or local
    _check_budget(run, budget, least, host_prog, proven_program, len(unit_ranks[0]))
    if prog is not None:
        solves = sweep(prog, least, min_moves, budget, points, run.left)
    else:
        solves = neighbourhoods(
            run.request,
            unit_ranks,
            units_exact,
            current,
            spare_devs,
            fixed,
            least,
            budget,
            run.left,
            run.stats,
        )
    front, rec = _front(run, answers, solves + extra, host_prog, budget, min_moves)
    run.stats["wall_s"] = time.perf_counter() - t0
    return RepairResult(front, rec, before, run.forced, min_moves, replaced, run.stats, before_serving)


def _hosts_of(topology: Topology, mapping: list[int] | None, current: Sequence[int]) -> int:
    if mapping is None:
        return 0
    return len({topology.devices[d].host_index for r, d in enumerate(mapping) if d != current[r]})


def _over_budget(
    topology: Topology,
    current: Sequence[int],
    forced: list[int],
    least: int,
    what: str,
    allowed: int,
    unit: int,
    proven: bool,
) -> str:
    on = sorted({topology.devices[current[r]].id for r in forced})
    shown = ", ".join(on[:6]) + (f", ... ({len(on)} in all)" if len(on) > 6 else "")
    why = (
        f"{len(forced)} ranks sit on failed or drained devices ({shown})"
        if forced
        else "no rank sits on a failed device"
    )
    unit_note = f"; ranks move in units of {unit} that stay in one host" if unit > 1 else ""
    claim = "the least repair moves" if proven else "the least repair found moves"
    return f"{why}{unit_note}: {claim} {least} {what}, the budget allows {allowed}"
