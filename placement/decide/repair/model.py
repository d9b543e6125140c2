"""The CP-SAT program of a repair: the unit program of `placement.solve.cpsat.program` plus a move term.

A unit placed on host s keeps the ranks whose current device is on s and still usable; the others move. The
program minimizes moves (the least repair), or the surrogate under a move cap; `realize` keeps every rank it can.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from placement.model.job import Job
from placement.model.topology import Topology
from placement.solve.cpsat.model import build_model
from placement.solve.cpsat.program import Slots, UnitProgram, spread_terms
from placement.solve.cpsat.slots import host_chains
from placement.solve.params import configure, run_cpsat
from placement.solve.prepared import PreparedRequest

__all__ = ["MoveProgram", "MoveSolve", "greedy_assignment", "realize_keeping", "relabel_keeping"]

MAX_VARS = 20_000  # beyond this many unit x slot variables, interchangeable free hosts are pruned further


@dataclass
class MoveSolve:
    """One solve: unit -> host, CP-SAT's status, and whether it is proven optimal for its objective."""

    assignment: dict[int, int] | None
    status: str
    optimal: bool
    moves: int | None = None


class MoveProgram:
    """Units of `request` on host slots, with the moves each (unit, host) costs against `current`.

    `spare_devices` win ties (a move onto a spare costs a little less in the tie-break). Slots: every candidate
    host the job holds now, and the other candidate hosts, interchangeable ones (same ancestors, same free and
    spare counts) pruned to as many as there are units (exact), or fewer when the model would grow too large
    (`pruned` then says so).
    """

    def __init__(
        self,
        request: PreparedRequest,
        units: list[tuple[int, ...]],
        units_exact: bool,
        current: Sequence[int],
        spare_devices: set[int],
        fixed: dict[int, int] | None = None,
    ) -> None:
        p, topo = request, request.topology
        self.fixed = dict(fixed or {})
        self.p, self.units, self.current = p, units, list(current)
        pool = p.pool
        self.spare = spare_devices
        host_of = [topo.devices[d].host_index for d in range(topo.num_devices)]
        job_hosts = ({host_of[d] for d in current if d >= 0} & set(pool.devices)) | set(self.fixed.values())
        free_units = [u for u in range(len(units)) if u not in self.fixed]
        min_size = min(len(units[u]) for u in free_units) if free_units else 1
        n_units = len(free_units)
        classes: dict[tuple[object, ...], list[int]] = defaultdict(list)
        for h in sorted(pool.devices):
            if h in job_hosts or pool.free(h) < min_size:
                continue
            devs = pool.devices[h]
            anc = tuple(topo.domain_of(devs[0], li) for li in range(1, len(topo.levels)))
            classes[(anc, len(devs), sum(1 for d in devs if d in spare_devices))].append(h)
        keep = n_units
        self.pruned = False
        while True:
            hosts = sorted(job_hosts | {h for hs in classes.values() for h in hs[:keep]})
            if n_units * len(hosts) <= MAX_VARS or keep <= 1 or self.fixed:
                break
            keep = max(1, keep // 2)
            self.pruned = True
        self.hosts = hosts
        slots = Slots({h: pool.free(h) for h in hosts}, host_chains(topo, pool))
        self.model = build_model(topo, p.state, p.traffic, units, units_exact, p.candidates)
        unit_of = {r: i for i, u in enumerate(units) for r in u}
        allowed: dict[int, set[int]] = {}
        for r, d in p.pinned.items():
            allowed[unit_of[r]] = allowed.get(unit_of[r], {host_of[d]}) & {host_of[d]}
        self.prog = UnitProgram(topo, self.model, free_units, slots, self.fixed, allowed=allowed or None)
        if p.job.constraints.spread and not self.prog.infeasible:
            self.prog.add_spread(spread_terms(topo, p.state, p.job, p.traffic, units, pool))
        usable = {d for devs in pool.devices.values() for d in devs}
        self.move: dict[tuple[int, int], int] = {}
        tie: list[tuple[int, cp_model.IntVar]] = []
        for (u, s), var in self.prog.x.items():
            kept = sum(1 for r in units[u] if current[r] in usable and host_of[current[r]] == s)
            mv = len(units[u]) - kept
            self.move[u, s] = mv
            if mv:
                spares_here = sum(1 for d in pool.devices[s] if d in spare_devices)
                tie.append((2 * mv + (0 if spares_here >= mv else 1), var))
        self.moves_expr = sum(mv * self.prog.x[k] for k, mv in self.move.items() if mv)
        self.tie_expr = sum(c * v for c, v in tie)
        self.host_vars: dict[int, cp_model.IntVar] = {}

    @property
    def infeasible(self) -> str:
        return self.prog.infeasible

    @property
    def variables(self) -> int:
        return len(self.prog.x)

    def cap_moves(self, cap: int) -> None:
        """Every later solve moves at most `cap` ranks (caps only tighten)."""
        self.prog.m.add(self.moves_expr <= cap)

    def hosts_expr(self) -> cp_model.LinearExpr:
        """The hosts that receive a moved rank (built once, on first use)."""
        if not self.host_vars:
            by_host: dict[int, list[cp_model.IntVar]] = defaultdict(list)
            for (u, s), mv in self.move.items():
                if mv:
                    by_host[s].append(self.prog.x[u, s])
            for s, xs in by_host.items():
                z = self.prog.m.new_bool_var(f"moved_to[slot={s}]")
                for xv in xs:
                    self.prog.m.add_implication(xv, z)
                self.host_vars[s] = z
        return sum(self.host_vars.values()) if self.host_vars else cp_model.LinearExpr.constant(0)  # type: ignore[return-value]

    def cap_hosts(self, cap: int) -> None:
        self.prog.m.add(self.hosts_expr() <= cap)

    def _surrogate_objective(self) -> cp_model.LinearExpr:
        """The surrogate first, then the tie-break (fewer moves, spares first): integer weights that fit int64."""
        terms = self.prog.objective
        span = sum(abs(c) for c, _ in terms) + 1
        tie_span = 3 * len(self.current) + 1
        div = max(1, math.ceil(span * tie_span / 1e17))
        scaled = sum((c // div) * tie_span * v for c, v in terms if c // div) + self.tie_expr
        expr: cp_model.LinearExpr = scaled  # type: ignore[assignment]
        return expr

    def solve(
        self, objective: str, time_limit: float, hint: dict[int, int] | None = None, *, presolve: bool = False
    ) -> MoveSolve:
        """`objective`: ``moves`` (then spares), ``hosts`` or ``surrogate`` (then moves and spares)."""
        if self.prog.infeasible:
            return MoveSolve(None, self.prog.infeasible, False)
        if not self.prog.x:
            return MoveSolve(dict(self.fixed), "OPTIMAL", True, 0)
        m = self.prog.m
        if objective == "moves":
            m.minimize(self.moves_expr * 4 + self.tie_expr)
        elif objective == "hosts":
            m.minimize(self.hosts_expr() * (3 * len(self.current) + 1) + self.moves_expr)
        else:
            m.minimize(self._surrogate_objective())
        m.clear_hints()  # type: ignore[no-untyped-call]
        if hint:
            self.prog.add_hint({u: s for u, s in hint.items() if u not in self.fixed})
        solver = cp_model.CpSolver()
        configure(solver, self.p.options, max(0.05, time_limit), presolve=presolve)
        st = run_cpsat(solver, m, self.p.options.stop)
        name = solver.status_name(st)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return MoveSolve(None, name, False)
        assign = {u: s for (u, s), var in self.prog.x.items() if solver.boolean_value(var)}
        moves = sum(self.move[u, s] for u, s in assign.items())
        assign.update(self.fixed)
        return MoveSolve(assign, name, st == cp_model.OPTIMAL, moves)

    def realize(self, assign: dict[int, int]) -> list[int] | None:
        return realize_keeping(self.p, self.units, assign, self.current, self.spare)


def realize_keeping(
    request: PreparedRequest,
    units: Sequence[tuple[int, ...]],
    assign: dict[int, int],
    current: Sequence[int],
    spare: set[int],
) -> list[int] | None:
    """Rank -> device for unit -> host: pinned ranks on their pins, ranks whose current device is on their new
    host keep it, the others take the host's free devices (spares first). None when a host runs out."""
    pool = request.pool
    out = [-1] * request.job.ranks
    taken: set[int] = set()
    for r, d in request.pinned.items():
        out[r] = d
        taken.add(d)
    usable = {h: set(devs) for h, devs in pool.devices.items()}
    movers: list[tuple[int, int]] = []
    for u, h in sorted(assign.items()):
        for r in units[u]:
            if out[r] >= 0:
                continue
            d = current[r]
            if d >= 0 and d in usable.get(h, ()) and d not in taken:
                out[r] = d
                taken.add(d)
            else:
                movers.append((r, h))
    for r, h in movers:
        free = [d for d in pool.devices.get(h, ()) if d not in taken]
        if not free:
            return None
        free.sort(key=lambda d: (d not in spare, d))
        out[r] = free[0]
        taken.add(free[0])
    if any(d < 0 for d in out):
        return None
    return out


def relabel_keeping(
    topology: Topology, job: Job, mapping: Sequence[int], current: Sequence[int]
) -> list[int]:
    """The same placement with fewer moves, where the cost model cannot tell the difference: data-parallel
    replicas of a structured job swapped as wholes (greedily, most ranks back on their current host first), then
    inside each host the ranks that stay on it keep their current device. The caller checks the cost."""
    out = list(mapping)
    host = [d.host_index for d in topology.devices]
    par = job.parallel
    if par is not None and par.size("dp") > 1:
        n = par.size("dp")
        coords = [par.coords(r) for r in range(job.ranks)]

        def moved_rank(r: int, i: int) -> int:
            c = dict(coords[r])
            c["dp"] = i
            return par.rank_of(c)

        gain = [[0] * n for _ in range(n)]  # gain[j][i]: replica j's ranks on the hosts replica i uses now
        for r in range(job.ranks):
            j = coords[r]["dp"]
            for i in range(n):
                if host[mapping[moved_rank(r, i)]] == host[current[r]]:
                    gain[j][i] += 1
        pairs = sorted(((gain[j][i], -abs(i - j), j, i) for j in range(n) for i in range(n)), reverse=True)
        sigma: dict[int, int] = {}
        used: set[int] = set()
        for _, _, j, i in pairs:
            if j not in sigma and i not in used:
                sigma[j] = i
                used.add(i)
        out = [mapping[moved_rank(r, sigma[coords[r]["dp"]])] for r in range(job.ranks)]
    by_host: dict[int, list[int]] = defaultdict(list)
    for r, d in enumerate(out):
        by_host[host[d]].append(r)
    for ranks in by_host.values():
        devs = {out[r] for r in ranks}
        keep = {r for r in ranks if current[r] in devs}
        rest = sorted(devs - {current[r] for r in keep})
        for r in ranks:
            out[r] = current[r] if r in keep else rest.pop(0)
    return out


def greedy_assignment(prog: MoveProgram) -> dict[int, int] | None:
    """A quick answer (and a hint) for a program: each free unit, largest first, to the slot with room that moves
    the fewest of its ranks, then a spare, then the nearest to where it runs now. None when one does not fit."""
    p, units, topo = prog.p, prog.units, prog.p.topology
    room = dict(prog.prog.room)
    out = dict(prog.fixed)
    free = sorted({u for u, _ in prog.prog.x}, key=lambda u: (-len(units[u]), u))
    for u in free:
        size = len(units[u])
        here = prog.current[units[u][0]]
        options = [s for s in prog.prog.by_unit[u] if room.get(s, 0) >= size]
        if not options:
            return None

        def key(s: int, u: int = u, here: int = here) -> tuple[int, int, int, int]:
            spare = sum(1 for d in p.pool.devices[s] if d in prog.spare)
            near = topo.lca_level(here, p.pool.devices[s][0]) if here >= 0 else 0
            return (prog.move[u, s], 0 if spare >= prog.move[u, s] else 1, near, s)

        s = min(options, key=key)
        out[u] = s
        room[s] -= size
    return out
