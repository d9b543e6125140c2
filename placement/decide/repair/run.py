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
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
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

__all__ = ["Move", "RepairAnswer", "RepairResult", "repair"]

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


def _answer(
    topology: Topology,
    state: ClusterState,
    job: Job,
    name: str,
    mapping: list[int],
    current: Sequence[int],
    optimal: bool,
    traffic: Traffic,
) -> RepairAnswer | None:
    if validate(topology, state, job, mapping, traffic=traffic):
        return None
    rep = evaluate(topology, state, job, mapping, traffic=traffic, check=False)
    moves = [Move(r, current[r], d) for r, d in enumerate(mapping) if d != current[r]]
    hosts = len({topology.devices[m.dst].host_index for m in moves})
    return RepairAnswer(name, mapping, rep, moves, hosts, optimal)


def _pareto(answers: list[RepairAnswer]) -> list[RepairAnswer]:
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
) -> RepairResult:
    """Repair `job`, running on `current` (device index per rank), on the new `state`.

    Ranks on failed or drained devices must move; others move only in answers that are faster. `spares`
    (selectors) are preferred targets; with `spares_only` they are the only new devices. Raises `InputError`
    for bad input and `InfeasibleError` (with numbers) when no answer fits the hard rules or the budget.
    `points`: move caps tried between the least repair and the unconstrained answer. `options.time_limit_s`
    covers the whole repair: wall clock (within +10% + 50 ms), or with `options.deterministic` a deterministic
    budget (no bound on the wall time); `stats["time_limit"]` says which.
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
        )
    finally:
        clock.cancel()
    result.stats["time_limit"] = limit_kind(opts)
    return result


def _stopped(opts: SolveOptions) -> bool:
    return opts.stop is not None and opts.stop.is_set()


_RESERVE_SHARE = 0.05
"""Of a repair's wall-clock limit, kept for scoring and validating the answers after the search."""


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
) -> RepairResult:
    budget = budget or RepairBudget()
    opts = options
    t0 = time.perf_counter()
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
    before = evaluate(topology, rstate, job, current, traffic=traffic, check=False)
    request = PreparedRequest.prepare(topology, rstate, job, opts, traffic=traffic, t0=t0)
    request.pool = HostPool.of(topology, request.candidates)  # degraded devices too: the move term needs them
    cset = set(request.candidates)
    forced = [r for r, d in enumerate(current) if d not in cset]
    stats: dict[str, float | int | str] = {"forced": len(forced)}
    answers: list[RepairAnswer] = []
    replaced: RepairAnswer | None = None
    # the full re-place: `place` on the same state (its answer is the reference the trade-off ends at)
    replace_share = 0.35 * opts.time_limit_s
    try:
        full = place(
            topology, rstate, job, dataclasses.replace(opts, time_limit_s=replace_share), traffic=traffic
        )
        if full.mapping is None:
            raise InternalError("place returned no mapping for the repair's full re-place")
        replaced = _answer(topology, rstate, job, "re-place", full.mapping, current, False, traffic)
        if replaced is not None:
            answers.append(replaced)
            kept = _answer(
                topology,
                rstate,
                job,
                "re-place, relabeled",
                relabel_keeping(topology, job, full.mapping, current),
                current,
                False,
                traffic,
            )
            # the same placement up to symmetry: kept only where the evaluator agrees it is no slower
            if kept is not None and kept.report.step_seconds <= replaced.report.step_seconds * (1 + 1e-9):
                answers.append(kept)
    except InfeasibleError:
        raise
    units = build_units(request)
    unit_ranks: list[tuple[int, ...]]
    if job.ranks <= SINGLE_RANK_UNITS or units.split:
        unit_ranks, units_exact = [(r,) for r in range(job.ranks)], not job.constraints.require
        if job.constraints.require:
            req = build_units(request)
            unit_ranks, units_exact = req.ranks, req.exact
    else:
        unit_ranks, units_exact = units.ranks, units.exact

    def left(share: float) -> float:
        return max(0.05, (0.95 * opts.time_limit_s - reserve - (time.perf_counter() - t0)) * share)

    reserve = 0.05 + 4e-4 * job.ranks  # scoring and validating the answers afterwards

    # the local program: units whole on a usable current host stay; the rest (the forced ones) are placed
    host_of = [d.host_index for d in topology.devices]
    forced_set = set(forced)
    fixed: dict[int, int] = {}
    for u, ranks in enumerate(unit_ranks):
        on = {host_of[current[r]] for r in ranks}
        if len(on) == 1 and not any(r in forced_set or r in request.pinned for r in ranks):
            fixed[u] = on.pop()
    local = MoveProgram(request, unit_ranks, units_exact, current, spare_devs, fixed)
    greedy = greedy_assignment(local)
    loc = local.solve("moves", left(0.2), greedy)
    if loc.assignment is None and greedy is not None:
        loc = MoveSolve(greedy, "GREEDY", False, sum(local.move.get((u, s), 0) for u, s in greedy.items()))
    hint = loc.assignment
    extra: list[
        tuple[str, dict[int, int], bool]
    ] = []  # more candidates for the front, scored by the evaluator
    if loc.assignment is not None and loc.moves is not None:
        local.cap_moves(loc.moves)
        ls = local.solve("surrogate", left(0.2), loc.assignment)
        hint = ls.assignment or loc.assignment
        extra.append(("least", hint, False))
        # the unit program does not see slow devices: a candidate that also moves the units on them
        slow_hosts = {up.domain for up, f in rstate.uplink_slowdown.items() if up.level == 0 and f > 1.0}
        slow = {
            u
            for u in fixed
            if any(
                rstate.device_slowdown.get(current[r], 1.0) > 1.0 or host_of[current[r]] in slow_hosts
                for r in unit_ranks[u]
            )
        }
        if slow and left(1.0) > 0.5 and not _stopped(opts):
            off = MoveProgram(
                request,
                unit_ranks,
                units_exact,
                current,
                spare_devs,
                {u: h for u, h in fixed.items() if u not in slow},
            )
            budget_caps(off, budget)
            so = off.solve("surrogate", left(0.2), hint)
            if so.assignment is not None:
                extra.append(("off slow devices", so.assignment, False))
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
        MoveProgram(request, unit_ranks, units_exact, current, spare_devs)
        if whole and not _stopped(opts)
        else None
    )
    if whole and prog is None:
        stats["model"] = "none: the time was up"
    least = loc
    if prog is not None:
        stats.update(
            {"model_vars": prog.variables, "slots": len(prog.hosts), "slots_pruned": int(prog.pruned)}
        )
        g = prog.solve("moves", left(0.25), hint)
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
    min_moves = least.moves or 0
    proven = prog is not None and least.optimal and not prog.pruned
    stats["min_moves"] = min_moves
    stats["min_moves_proven"] = int(proven)
    if budget.max_moved_ranks is not None and min_moves > budget.max_moved_ranks:
        raise InfeasibleError(
            [
                _over_budget(
                    topology,
                    current,
                    forced,
                    min_moves,
                    "ranks",
                    budget.max_moved_ranks,
                    len(unit_ranks[0]),
                    proven,
                )
            ]
        )
    host_prog = prog or local
    if budget.max_moved_hosts is not None:
        hl = host_prog.solve("hosts", left(0.2), least.assignment)
        if hl.assignment is not None:
            hosts_n = _hosts_of(topology, host_prog.realize(hl.assignment), current)
            if hosts_n > budget.max_moved_hosts:
                raise InfeasibleError(
                    [
                        _over_budget(
                            topology,
                            current,
                            forced,
                            hosts_n,
                            "hosts",
                            budget.max_moved_hosts,
                            len(unit_ranks[0]),
                            hl.optimal and prog is not None and not prog.pruned,
                        )
                    ]
                )
    if prog is not None:
        solves = sweep(prog, least, min_moves, budget, points, left)
    else:
        solves = neighbourhoods(
            request, unit_ranks, units_exact, current, spare_devs, fixed, least, budget, left, stats
        )
    seen: set[tuple[int, ...]] = {tuple(a.mapping) for a in answers}
    for name, assign, optimal in solves + extra:
        mp = host_prog.realize(assign)
        if mp is None or (tuple(mp) in seen and not optimal):
            continue
        seen.add(tuple(mp))
        a = _answer(topology, rstate, job, name, mp, current, optimal, traffic)
        if a is not None:
            answers.append(a)
    if not answers:
        raise InfeasibleError(["no repair could be realized onto devices that keep every hard rule"])
    for a in answers:
        a.within_budget = (budget.max_moved_ranks is None or a.moved_ranks <= budget.max_moved_ranks) and (
            budget.max_moved_hosts is None or a.moved_hosts <= budget.max_moved_hosts
        )
    front = _pareto(answers)
    if front[0].moved_ranks == min_moves and front[0].name != "re-place":
        front[0].name = "least"
    ok = [i for i, a in enumerate(front) if a.within_budget] or list(range(len(front)))
    rec = min(
        ok,
        key=lambda i: (
            budget.horizon_steps * front[i].report.step_seconds + budget.move_cost_s * front[i].moved_ranks
        ),
    )
    stats["wall_s"] = time.perf_counter() - t0
    return RepairResult(front, rec, before, forced, min_moves, replaced, stats)


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
