"""The CP-SAT unit program: whole units onto slots (hosts, or level-1 domains), one method per constraint family.

Families: assignment (each unit in one slot), capacity, level indicators with the objective, splits (the leaf
model's units that cannot be whole in a host), fault-domain spread, symmetry, hints. `solve()` returns the
assignment, its objective and CP-SAT's bound, both in seconds of the surrogate.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from placement.errors import InternalError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.construct import HostPool
from placement.solve.cpsat.model import UnitModel
from placement.solve.params import configure, objective_scale, run_cpsat
from placement.solve.types import SolveOptions

__all__ = ["Slots", "SpreadTerm", "SubResult", "UnitProgram", "spread_terms"]


@dataclass
class SpreadTerm:
    """One spread rule on one scope: units with the number of the scope's ranks they hold, and the slots of
    each fault domain."""

    units: list[tuple[int, int]]
    slots_by_domain: dict[str, set[int]]
    min_domains: int | None
    max_ranks: int | None


def spread_terms(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    units: list[tuple[int, ...]],
    pool: HostPool,
) -> list[SpreadTerm]:
    """The job's spread rules over host slots (a host belongs to the fault domain of its first free device)."""
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    out: list[SpreadTerm] = []
    for rule in job.constraints.spread:
        fd = state.fault_domain_of(rule.kind, topology)
        slots: dict[str, set[int]] = defaultdict(set)
        for h, devs in pool.devices.items():
            slots[fd.get(devs[0], "<none>")].add(h)
        scopes = (
            [tuple(range(job.ranks))]
            if rule.scope == "job"
            else [g.members for g in traffic.groups if g.label == rule.scope]
        )
        for members in scopes:
            cnt: dict[int, int] = defaultdict(int)
            for r in members:
                cnt[unit_of[r]] += 1
            out.append(
                SpreadTerm(sorted(cnt.items()), dict(slots), rule.min_domains, rule.max_ranks_per_domain)
            )
    return out


@dataclass
class Slots:
    """Where units go. Host slots: `room[h]` free devices. Leaf slots (`leaf=True`): `room[k]` devices of level-1
    domain k usable by units, `whole[k]` units it holds whole in hosts. `chain[s][l]`: the slot's domain at each
    level (chain[s][min level] == s); it also covers the slots of fixed units outside `room`."""

    room: dict[int, int]
    chain: dict[int, list[int]]
    leaf: bool = False
    whole: dict[int, int] | None = None


@dataclass
class SubResult:
    assignment: dict[int, int] | None  # unit -> slot
    objective: float | None
    bound: float | None
    status: str
    variables: int


class UnitProgram:
    """Place `free_units` on `slots` given `fixed` units (unit -> slot); build, then `solve()`."""

    def __init__(
        self,
        topology: Topology,
        model: UnitModel,
        free_units: Sequence[int],
        slots: Slots,
        fixed: dict[int, int] | None = None,
        *,
        allowed: dict[int, set[int]] | None = None,
        bottleneck: bool = False,
    ) -> None:
        self.topology, self.model, self.slots = topology, model, slots
        self.free_units = list(free_units)
        self.free_set = set(free_units)
        self.fixed = dict(fixed or {})
        self.allowed = allowed or {}
        self.n_levels = len(topology.levels)
        self.min_level = 1 if slots.leaf else 0
        self.m = cp_model.CpModel()
        self.x: dict[tuple[int, int], cp_model.IntVar] = {}
        self.by_unit: dict[int, list[int]] = defaultdict(list)
        self.by_slot: dict[int, list[int]] = defaultdict(list)
        self.y_dom: dict[tuple[int, int], set[int]] = defaultdict(set)
        self.y: dict[tuple[int, int, int], cp_model.IntVar] = {}
        self.objective: list[tuple[int, cp_model.IntVar]] = []
        self.const = 0.0
        span = sum(max(t.cost) - min(t.cost) for t in model.terms) + model.split_cost * len(model.units)
        if bottleneck:
            span += sum(
                n * max((max(t.peak.get(label, [0.0])) for t in model.terms), default=0.0)
                for label, n in model.label_items.items()
            )
        self.scale = objective_scale(span)
        self.infeasible = ""
        self.bottleneck = bottleneck
        self._peaks: dict[str, list[tuple[float, list[tuple[float, cp_model.IntVar]]]]] = defaultdict(list)
        self._levels: list[tuple[cp_model.IntVar, dict[int, cp_model.IntVar], int, list[int]]] = []
        self._splits: list[tuple[cp_model.IntVar, int, int]] = []
        used: dict[int, int] = defaultdict(int)
        for u, s in self.fixed.items():
            used[s] += len(model.units[u])
        self.room = {s: slots.room[s] - used.get(s, 0) for s in slots.room}
        if self.scale is None:
            self.infeasible = "COSTS_NOT_FINITE"
            return
        self._add_assignment()
        if not self.infeasible:
            self._add_capacity()
            self._add_levels()
            if slots.leaf and slots.whole is not None and model.split_cost > 0:
                self._add_splits()

    def _scale(self) -> float:
        """The objective's integer scale; a program whose costs are not finite has none and is never built on."""
        if self.scale is None:
            raise InternalError("the unit program has no objective scale (its costs are not finite)")
        return self.scale

    # ---- constraint families ------------------------------------------------------------------------------

    def _add_assignment(self) -> None:
        """Each free unit in exactly one slot with room for it (and, if pinned, the pinned host)."""
        for u in self.free_units:
            size = len(self.model.units[u])
            for s in self.slots.room:
                if self.room[s] >= size and (u not in self.allowed or s in self.allowed[u]):
                    self.x[u, s] = self.m.new_bool_var(f"x[unit={u},slot={s}]")
                    self.by_unit[u].append(s)
                    self.by_slot[s].append(u)
            if not self.by_unit[u]:
                self.infeasible = "INFEASIBLE"
                return
            self.m.add_exactly_one(self.x[u, s] for s in self.by_unit[u])

    def _add_capacity(self) -> None:
        units = self.model.units
        for s, us in self.by_slot.items():
            if sum(len(units[u]) for u in us) > self.room[s]:
                self.m.add(sum(len(units[u]) * self.x[u, s] for u in us) <= self.room[s])

    def _domain(self, slot: int, level: int) -> int:
        return self.slots.chain[slot][level]

    def _add_levels(self) -> None:
        """y[u, l, k]: unit u in domain k of level l (channelled from x); per term, w_l: all its units share one
        domain of level l. The objective pays each term's cost at the top level minus its savings below."""
        m, x = self.m, self.x
        for u in self.free_units:
            for li in range(self.min_level + 1, self.n_levels - 1):
                members: dict[int, list[cp_model.IntVar]] = defaultdict(list)
                for s in self.by_unit[u]:
                    members[self._domain(s, li)].append(x[u, s])
                for k, xs in members.items():
                    if len(xs) == 1:
                        self.y[u, li, k] = xs[0]
                    else:
                        v = m.new_bool_var(f"y[unit={u},level={li},domain={k}]")
                        m.add(sum(xs) == v)
                        self.y[u, li, k] = v
                    self.y_dom[u, li].add(k)
            for s in self.by_unit[u]:
                self.y[u, self.min_level, s] = x[u, s]
                self.y_dom[u, self.min_level].add(s)
        scale = self._scale()
        for ti, t in enumerate(self.model.terms):
            tf = [u for u in t.units if u in self.free_set]
            tx = [u for u in t.units if u not in self.free_set]
            if not tf or any(u not in self.fixed for u in tx):
                continue  # constant for this neighbourhood (or it touches a unit that spans hosts: left out)
            self.const += t.cost[-1]
            savings: list[tuple[int, cp_model.IntVar]] = []
            size = sum(len(self.model.units[u]) for u in tf)
            within_prev: cp_model.IntVar | None = None
            for li in range(self.min_level, self.n_levels - 1):
                fixed_doms = {
                    self._domain(self.fixed[u], li) if li > self.min_level else self.fixed[u] for u in tx
                }
                if len(fixed_doms) > 1:
                    continue
                cand: set[int] | None = None
                for u in tf:
                    ks = self.y_dom[u, li]
                    cand = set(ks) if cand is None else cand & ks
                cand = cand or set()
                if fixed_doms:
                    cand &= fixed_doms
                if li == self.min_level:
                    cand = {s for s in cand if self.room[s] >= size}
                if not cand:
                    continue
                w = m.new_bool_var(f"within[term={ti},level={li}]")
                a_vars: dict[int, cp_model.IntVar] = {}
                for k in sorted(cand):
                    a = m.new_bool_var(f"within[term={ti},level={li},domain={k}]")
                    a_vars[k] = a
                    for u in tf:
                        m.add_implication(a, self.y[u, li, k])
                m.add(sum(a_vars.values()) == w)
                self._levels.append((w, a_vars, li, tf))
                if within_prev is not None:
                    m.add_implication(within_prev, w)
                within_prev = w
                coef = round((t.cost[li + 1] - t.cost[li]) * scale)
                if coef:
                    self.objective.append((-coef, w))
                savings.append((li, w))
            if self.bottleneck:
                for label, peak in t.peak.items():
                    self._peaks[label].append((peak[-1], [(peak[li + 1] - peak[li], w) for li, w in savings]))

    def _add_splits(self) -> None:
        """Leaf slots: beyond `whole[k]` units, the units of slot k span hosts and pay `split_cost` each."""
        whole_in = self.slots.whole
        if whole_in is None:
            raise InternalError("split costs need leaf slots that count the units each holds whole")
        scale = self._scale()
        coef = round(self.model.split_cost * scale)
        if coef <= 0:
            return
        fixed_in: dict[int, int] = defaultdict(int)
        for s in self.fixed.values():
            fixed_in[s] += 1
        for s, us in self.by_slot.items():
            whole = whole_in.get(s, 0) - fixed_in[s]
            if len(us) <= whole:
                continue
            split = self.m.new_int_var(0, len(us), f"split[slot={s}]")
            self.m.add(split >= sum(self.x[u, s] for u in us) - whole)
            self._splits.append((split, whole, s))
            self.objective.append((coef, split))

    def add_spread(self, spread: Sequence[SpreadTerm]) -> None:
        """Fault-domain spread: at most m ranks of a scope per domain; at least k domains touched."""
        for si, sp in enumerate(spread):
            used_vars = []
            for fd, slots_in in sp.slots_by_domain.items():
                terms = [
                    (wt, self.x[u, s]) for u, wt in sp.units for s in self.by_unit.get(u, ()) if s in slots_in
                ]
                if not terms:
                    continue
                if sp.max_ranks is not None:
                    self.m.add(sum(wt * v for wt, v in terms) <= sp.max_ranks)
                if sp.min_domains is not None:
                    touched = self.m.new_bool_var(f"touched[spread={si},fault_domain={fd}]")
                    self.m.add_bool_or([v for _, v in terms]).only_enforce_if(touched)
                    used_vars.append(touched)
            if sp.min_domains is not None:
                if len(used_vars) < sp.min_domains:
                    self.infeasible = "INFEASIBLE"
                    return
                self.m.add(sum(used_vars) >= sp.min_domains)

    def add_symmetry(self, chains: Sequence[Sequence[int]]) -> None:
        """Interchangeable units of a chain take slots in non-decreasing order (see `slots.symmetry_chains`)."""
        for chain in chains:
            pos = [sum(s * self.x[u, s] for s in self.by_unit[u]) for u in chain if u in self.free_set]
            for p1, p2 in itertools.pairwise(pos):
                self.m.add(p1 <= p2)

    def add_hint(self, hint: dict[int, int]) -> None:
        """Start from a known assignment (unit -> slot), with the level indicators and splits it implies, so that
        CP-SAT has a complete first solution (units missing from `hint` leave their terms unhinted). Each variable
        is hinted once (CP-SAT refuses a model that hints one variable twice)."""
        done: set[int] = set()

        def put(var: cp_model.IntVar, value: int) -> None:
            if var.index not in done:
                done.add(var.index)
                self.m.add_hint(var, value)

        for (u, s), var in self.x.items():
            put(var, 1 if hint.get(u) == s else 0)
        for (u, li, k), var in self.y.items():
            if li > self.min_level and u in hint and (u, hint[u]) in self.x:
                put(var, 1 if self._domain(hint[u], li) == k else 0)
        for w, a_vars, li, tf in self._levels:
            if not all(u in hint and (u, hint[u]) in self.x for u in tf):
                continue
            doms = {self._domain(hint[u], li) for u in tf}
            common = doms.pop() if len(doms) == 1 else None
            for kk, a in a_vars.items():
                put(a, 1 if kk == common else 0)
            put(w, 1 if common in a_vars else 0)
        slot_count: dict[int, int] = defaultdict(int)
        for u in self.free_units:
            if u in hint:
                slot_count[hint[u]] += 1
        for split, whole, slot in self._splits:
            put(split, max(0, slot_count[slot] - whole))

    # ---- solve --------------------------------------------------------------------------------------------

    @property
    def variables(self) -> int:
        return len(self.x)

    def _add_bottlenecks(self) -> list[tuple[int, cp_model.IntVar]]:
        """Concurrency: a phase lasts as long as its costliest group. Per label, M >= each term's costliest item
        at the level its units share; the objective pays M once per item of the label (as if every item were
        the slowest), so the search lowers the worst group first and the sum breaks ties."""
        scale = self._scale()
        out: list[tuple[int, cp_model.IntVar]] = []
        for label, rows in self._peaks.items():
            top = max(round(p * scale) for p, _ in rows)
            if top <= 0:
                continue
            peak = self.m.new_int_var(0, top, f"peak[label={label}]")
            for p_top, steps in rows:
                self.m.add(
                    peak
                    >= round(p_top * scale) - sum(round(d * scale) * w for d, w in steps if round(d * scale))
                )
            out.append((self.model.label_items.get(label, 1), peak))
        return out

    def solve(self, options: SolveOptions, time_limit: float, *, presolve: bool = True) -> SubResult:
        """Minimize the surrogate (plus, with `bottleneck`, each label's costliest item once per item); the
        returned objective and bound are the surrogate's only when `bottleneck` is off."""
        if self.infeasible:
            return SubResult(None, None, None, self.infeasible, len(self.x))
        scale = self._scale()
        terms = list(self.objective)
        if self.bottleneck:
            terms += self._add_bottlenecks()
        self.m.minimize(sum(c * v for c, v in terms))
        solver = cp_model.CpSolver()
        configure(solver, options, time_limit, presolve=presolve)
        st = run_cpsat(solver, self.m, options.stop)
        name = solver.status_name(st)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return SubResult(None, None, None, name, len(self.x))
        assign = {u: s for (u, s), var in self.x.items() if solver.boolean_value(var)}
        if self.bottleneck:
            return SubResult(assign, None, None, name, len(self.x))
        objective = self.const + solver.objective_value / scale
        bound = self.const + solver.best_objective_bound / scale
        return SubResult(assign, objective, bound, name, len(self.x))
