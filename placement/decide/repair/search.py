"""Move sets of a repair after the least repair: a sweep of move caps over one program of every unit, or, for
large jobs, growing neighbourhoods of the least repair re-solved; each solve is a Pareto-front candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from placement.decide.repair.input import RepairBudget
from placement.decide.repair.model import MoveProgram, MoveSolve
from placement.errors import InternalError
from placement.solve.cpsat.model import build_model
from placement.solve.prepared import PreparedRequest

__all__ = ["budget_caps", "neighbourhoods", "sweep"]

NEIGHBOURHOOD_VARS = 6_000  # a neighbourhood program's units x hosts, at most


def _caps(low: int, high: int, points: int) -> list[int]:
    """Move caps between the least repair and the unconstrained answer, geometric, highest first."""
    if high <= low + 1 or points <= 0:
        return []
    ratio = (high / max(1, low)) ** (1.0 / (points + 1))
    caps = sorted({round(max(1, low) * ratio**k) for k in range(1, points + 1)} - {low, high}, reverse=True)
    return [c for c in caps if low < c < high]


def budget_caps(prog: MoveProgram, budget: RepairBudget) -> None:
    """Cap `prog` at the budget's moved ranks and moved hosts, where it sets them."""
    if budget.max_moved_ranks is not None:
        prog.cap_moves(budget.max_moved_ranks)
    if budget.max_moved_hosts is not None:
        prog.cap_hosts(budget.max_moved_hosts)


def sweep(
    prog: MoveProgram,
    least: MoveSolve,
    min_moves: int,
    budget: RepairBudget,
    points: int,
    left: Callable[[float], float],
) -> list[tuple[str, dict[int, int], bool]]:
    """One program over every unit: the best answer, then move caps down to the least repair (caps only tighten,
    so the program is built once); every solve starts from the least repair."""
    if least.assignment is None:
        raise InternalError("the repair sweep was called without the least repair's assignment")
    budget_caps(prog, budget)
    exact = not prog.pruned
    solves: list[tuple[str, dict[int, int], bool]] = []
    free = prog.solve("surrogate", left(0.35), least.assignment)
    if free.assignment is not None:
        solves.append(("best", free.assignment, free.optimal and exact))
    high = free.moves if free.moves is not None else len(prog.current)
    caps = _caps(min_moves, high, points)
    stop = prog.p.options.stop
    for i, cap in enumerate(caps):
        if stop is not None and stop.is_set():
            break  # the time is up: the caps in between are extras, the least repair below is not
        prog.cap_moves(cap)
        s = prog.solve("surrogate", left(1.0 / (len(caps) - i + 1)), least.assignment)
        if s.assignment is not None:
            solves.append((f"moves<={cap}", s.assignment, s.optimal and exact))
    prog.cap_moves(min_moves)
    s = prog.solve("surrogate", left(1.0), least.assignment)
    solves.append(
        ("least", s.assignment if s.assignment is not None else least.assignment, s.optimal and exact)
    )
    return solves


def neighbourhoods(
    request: PreparedRequest,
    units: list[tuple[int, ...]],
    units_exact: bool,
    current: Sequence[int],
    spares: set[int],
    fixed: dict[int, int],
    least: MoveSolve,
    budget: RepairBudget,
    left: Callable[[float], float],
    stats: dict[str, float | int | str],
) -> list[tuple[str, dict[int, int], bool]]:
    """Large jobs: the least repair, then growing neighbourhoods of it re-solved (the units that must move and
    those that share traffic with them, nearest first, twice as many each round); each is a Pareto candidate."""
    if least.assignment is None:
        raise InternalError("the repair neighbourhoods were called without the least repair's assignment")
    solves: list[tuple[str, dict[int, int], bool]] = [("least", least.assignment, False)]
    must = [u for u in range(len(units)) if u not in fixed]
    stop = request.options.stop
    if not must or (stop is not None and stop.is_set()):
        return solves
    model = build_model(
        request.topology, request.state, request.traffic, units, units_exact, request.candidates
    )
    near: dict[int, set[int]] = {}
    for t in model.terms:
        for u in t.units:
            near.setdefault(u, set()).update(t.units)
    order: list[int] = list(must)
    seen = set(must)
    frontier = list(must)
    while frontier:
        nxt: list[int] = []
        for u in frontier:
            for v in sorted(near.get(u, ())):
                if v not in seen:
                    seen.add(v)
                    order.append(v)
                    nxt.append(v)
        frontier = nxt
    hosts = max(1, sum(1 for devs in request.pool.devices.values() if len(devs) >= min(map(len, units))))
    limit = max(len(must) + 1, NEIGHBOURHOOD_VARS // hosts)
    size, assign, rounds = 2 * len(must), dict(least.assignment), 0
    while size <= min(len(order), limit) * 2 and left(1.0) > 0.3 and not (stop is not None and stop.is_set()):
        free = set(order[: min(size, len(order), limit)])
        prog = MoveProgram(
            request, units, units_exact, current, spares, {u: h for u, h in fixed.items() if u not in free}
        )
        budget_caps(prog, budget)
        s = prog.solve("surrogate", left(0.4), assign, presolve=False)
        rounds += 1
        if s.assignment is not None:
            assign = s.assignment
            solves.append((f"neighbourhood {len(free)}", s.assignment, False))
        if len(free) >= min(len(order), limit):
            break
        size *= 2
    stats["neighbourhood_rounds"] = rounds
    return solves
