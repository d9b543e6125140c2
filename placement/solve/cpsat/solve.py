"""The ``cpsat`` strategy's search, step by step: the starts, the constructive candidates, the full unit program,
its LNS, the exact device-level model, the in-host refinement and the bound. Owns `solve_cpsat` (the method: see
the package docstring).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.solve.baselines import kueue_tas
from placement.solve.bound import BoundReport, lower_bounds
from placement.solve.construct import best_constructive
from placement.solve.cpsat.lns import lns
from placement.solve.cpsat.model import UnitModel, Units, build_model, build_units
from placement.solve.cpsat.program import Slots, UnitProgram, spread_terms
from placement.solve.cpsat.slots import (
    assignment_from_mapping,
    host_classes,
    host_slots,
    leaf_slots,
    realize,
    sorted_hint,
    symmetry_chains,
)
from placement.solve.exact import exact_applicable, solve_device_level
from placement.solve.prepared import PreparedRequest, SurrogateScore
from placement.solve.qap import solve_on_graph
from placement.solve.refine import refine_hosts
from placement.solve.types import key_better

__all__ = ["CpsatOutcome", "solve_cpsat"]

MAX_FULL_VARS = 25_000
BUILD_S_PER_VAR = 4e-5  # measured: a 16k-variable leaf program takes about 0.6 s to build on this machine


@dataclass
class CpsatOutcome:
    """The best mapping found (by the surrogate), its bound, statistics, and the candidates worth re-scoring."""

    mapping: list[int] | None
    lower_bound: float | None
    stats: dict[str, float | int | str] = field(default_factory=dict)
    explanation: list[str] = field(default_factory=list)
    candidates: list[tuple[str, list[int]]] = field(default_factory=list)


class _Incumbent:
    """The best mapping so far by what `place` picks by (`report_key`: step, exposed comm, surrogate, where the
    request is evaluator-guided; else the surrogate alone), and the least surrogate seen (bounds are clamped to
    it)."""

    def __init__(self, request: PreparedRequest) -> None:
        self.p = request
        self.mapping: list[int] | None = None
        self.key: tuple[float, float, float] = (math.inf, math.inf, math.inf)
        self.min_surrogate = math.inf

    def offer(
        self,
        mapping: list[int],
        surrogate: float | None = None,
        *,
        known: tuple[float, float, float] | None = None,
    ) -> bool:
        """`known`: the mapping's `report_key` when the caller has scored it already."""
        if known is not None:
            key = known if self.p.evaluator_guided else (known[2], known[2], known[2])
        elif self.p.evaluator_guided:
            key = self.p.rank(mapping)
        else:
            sur = self.p.surrogate(mapping) if surrogate is None else surrogate
            key = (sur, sur, sur)
        self.min_surrogate = min(self.min_surrogate, key[2])
        if key_better(key, self.key):
            self.mapping, self.key = list(mapping), key
            return True
        return False

    @property
    def surrogate(self) -> float:
        return self.key[2]


def _hosts_in_one_fault_domain(request: PreparedRequest) -> bool:
    """The unit model assigns fault domains per host; its infeasibility proofs hold only if that is exact."""
    for rule in request.job.constraints.spread:
        fd = request.state.fault_domain_of(rule.kind, request.topology)
        for devs in request.pool.devices.values():
            if len({fd.get(d) for d in devs}) > 1:
                return False
    return True


def _choose_slots(
    request: PreparedRequest, units: Units, model: UnitModel, assign: dict[int, int] | None
) -> tuple[Slots, bool]:
    """The slots of the full model, and whether they lose nothing (a bound on them is a bound on the surrogate)."""
    topo, pool = request.topology, request.pool
    sizes = {len(u) for u in units.ranks}
    max_free = max((pool.free(h) for h in pool.devices), default=0)
    smallest_term = min(
        (sum(len(units.ranks[u]) for u in t.units) for t in model.terms), default=max_free + 1
    )
    n_levels = len(topo.levels)
    if units.split:
        return leaf_slots(topo, pool, max(sizes), len(units.ranks), split=True), False
    if (
        not request.constrained
        and len(sizes) == 1
        and n_levels > 2
        and (smallest_term > max_free or len(units.ranks) > 64)
    ):
        # level-1 domains as slots: exact when no term fits in one host, else a coarse start for the host LNS
        return leaf_slots(topo, pool, sizes.pop(), len(units.ranks), split=False), smallest_term > max_free
    max_size = sum(len(u) for u in units.ranks)
    hosts = (
        sorted(pool.devices)
        if request.constrained
        else host_classes(topo, pool, sorted(pool.devices), max_size, len(units.ranks))
    )
    if assign is not None:
        hosts = sorted(
            set(hosts) | set(assign.values())
        )  # keep the incumbent's hosts: the hint stays feasible
    return host_slots(topo, pool, hosts), True


def solve_cpsat(
    request: PreparedRequest,
    starts: list[tuple[str, list[int]]],
    scores: Sequence[tuple[float, float, float] | None] = (),
) -> CpsatOutcome:
    """Optimize from `starts` (valid mappings: the baselines and candidates; `scores`, aligned with them, their
    `report_key` where already known); see the module docstring."""
    p, topo, job = request, request.topology, request.job
    run = _Search(p, time.perf_counter())
    for i, (_, m) in enumerate(starts):
        run.inc.offer(m, known=scores[i] if i < len(scores) else None)
    if topo.pair_paths is not None and not p.traffic.groups and not p.pinned and not job.constraints.spread:
        return run.on_graph()
    bounds: BoundReport = lower_bounds(topo, p.state, p.traffic, p.candidates)
    run.stats["analytic_bound"] = bounds.value
    units = build_units(p)
    run.note_units(units)
    if not p.pinned and p.remaining() > 0.1:
        run.constructive(units)
    model = build_model(topo, p.priced_state, p.traffic, units.ranks, units.exact, p.candidates)
    run.stats["terms"] = len(model.terms)
    whole = run.whole_model(units, model)
    if whole.infeasible:
        return CpsatOutcome(
            None,
            None,
            run.stats,
            [
                "the solver proved that no mapping satisfies the hard rules together (each rule alone can be met)"
            ],
            run.candidates,
        )
    run.improve_lns(units, model, whole.solved)
    exact_bound = run.device_level(whole.bound)
    run.refine()
    return run.finish(bounds, units, model, whole.bound, exact_bound)


@dataclass
class _WholeModel:
    """What solving the full unit program gave: its valid bound on the surrogate (None: none), whether it ran,
    and whether it proved the hard rules infeasible together."""

    bound: float | None = None
    solved: bool = False
    infeasible: bool = False


class _Search:
    """One `solve_cpsat` call's steps, sharing the incumbent, the statistics and the candidates found."""

    def __init__(self, request: PreparedRequest, t0: float) -> None:
        self.p = request
        self.t0 = t0
        self.inc = _Incumbent(request)
        self.stats: dict[str, float | int | str] = {}
        self.candidates: list[tuple[str, list[int]]] = []

    def found(self, source: str, mapping: list[int], surrogate: float | None = None) -> None:
        """A valid mapping from `source`: kept as a candidate and offered to the incumbent."""
        self.candidates.append((source, mapping))
        self.inc.offer(mapping, surrogate)

    def on_graph(self) -> CpsatOutcome:
        """Pairwise-path topologies with p2p traffic only: the QAP search on the graph instead of the unit model."""
        p, opts = self.p, self.p.options
        mp, qb, qstats = solve_on_graph(
            p.topology,
            p.state,
            p.job,
            p.traffic,
            p.candidates,
            p.remaining(),
            opts.seed,
            opts.stop,
            self.inc.mapping,
        )
        self.stats.update(qstats)
        if mp is not None and p.valid(mp):
            self.candidates.append(("cpsat", mp))
            self.stats["surrogate_best"] = p.surrogate(mp)
        return CpsatOutcome(mp, qb, self.stats, [], self.candidates)

    def note_units(self, units: Units) -> None:
        self.stats["units"] = len(units.ranks)
        self.stats["units_kind"] = units.label or (
            "required" if units.ranks and len(units.ranks[0]) > 1 else "ranks"
        )
        if units.split:
            self.stats["units_split"] = "leaf model"

    def constructive(self, units: Units) -> None:
        """Starts of our own: the best constructive unit order by the surrogate (and by the evaluator, where it
        guides), and Kueue's fill with the job's heaviest groups as its slices (explicit jobs)."""
        p, topo, job = self.p, self.p.topology, self.p.job
        share = 0.15 if job.ranks > 4096 else 0.3
        cons_deadline = p.until(share)
        cons, cons_cost, tried = best_constructive(topo, p.pool, job, units.ranks, p.surrogate, cons_deadline)
        self.stats["constructive_tried"] = tried
        if cons is not None and p.valid(cons):
            self.found("constructive", cons, cons_cost)
        if p.evaluator_guided and p.remaining() > 0.1:
            # the evaluator sees what the surrogate cannot (hierarchical collectives, shared NICs): its favourite
            # unit order is a candidate of its own
            ev, _, _ = best_constructive(
                topo, p.pool, job, units.ranks, lambda m: p.rank(m)[0], p.until(share / 2)
            )
            if ev is not None and ev != cons and p.valid(ev):
                self.found("constructive", ev)
        if units.label and not units.split and not job.structured and p.remaining() > 0.1:
            # Kueue's fill with the job's heaviest groups as its slices: what a user would ask of Kueue had the
            # explicit job said which ranks form a pod
            sliced = dataclasses.replace(
                job,
                constraints=dataclasses.replace(
                    job.constraints, require={**job.constraints.require, units.label: topo.levels[0].name}
                ),
            )
            kq = kueue_tas(topo, p.state, sliced, p.traffic)
            if kq is not None and p.valid(kq):
                self.found("constructive", kq)

    def whole_model(self, units: Units, model: UnitModel) -> _WholeModel:
        """The full unit program on the chosen slots, when it is small enough for the time left (or the only
        way to find a mapping under hard rules)."""
        p, topo = self.p, self.p.topology
        best = self.inc.mapping
        allowed: dict[int, set[int]] = {}
        unit_of = {r: i for i, u in enumerate(units.ranks) for r in u}
        for r, d in p.pinned.items():
            h = topo.devices[d].host_index
            allowed[unit_of[r]] = allowed.get(unit_of[r], {h}) & {h}
        assign = assignment_from_mapping(topo, units.ranks, best) if best is not None else None
        slots, slots_exact = _choose_slots(p, units, model, assign)
        slot_assign = (
            assignment_from_mapping(topo, units.ranks, best, leaf=True, partial=units.split)
            if slots.leaf and best is not None
            else assign
        )
        room = Counter(slots.room.values())
        n_vars = sum(
            cnt * sum(v for r, v in room.items() if r >= size)
            for size, cnt in Counter(len(u) for u in units.ranks).items()
        )
        self.stats["model_vars"] = n_vars
        self.stats["model_slots"] = "level-1 domains" if slots.leaf else "hosts"
        build_s = n_vars * BUILD_S_PER_VAR  # building the program in Python is not covered by CP-SAT's limit
        if (n_vars <= MAX_FULL_VARS or (p.constrained and best is None)) and p.remaining() > max(
            0.1, 3 * build_s
        ):
            return self.solve_program(units, model, slots, slots_exact, slot_assign, allowed)
        return _WholeModel()

    def solve_program(
        self,
        units: Units,
        model: UnitModel,
        slots: Slots,
        slots_exact: bool,
        slot_assign: dict[int, int] | None,
        allowed: dict[int, set[int]],
    ) -> _WholeModel:
        p, topo, job = self.p, self.p.topology, self.p.job
        chains = [] if p.constrained or units.split else symmetry_chains(job, units.ranks)
        if chains and slot_assign is not None and len(slot_assign) == len(units.ranks):
            slot_assign = sorted_hint(job, units.ranks, chains[0], slot_assign)
        exact = model.exact and slots_exact
        # where the model cannot prove anything, aim it at the step model's concurrency too (phase = its slowest group)
        prog = UnitProgram(
            topo,
            model,
            list(range(len(units.ranks))),
            slots,
            allowed=allowed or None,
            bottleneck=p.evaluator_guided and not exact,
        )
        if job.constraints.spread:
            prog.add_spread(spread_terms(topo, p.state, job, p.traffic, units.ranks, p.pool))
        prog.add_symmetry(chains)
        if slot_assign:
            prog.add_hint(slot_assign)
        share = 0.85 if exact else 0.6  # leave the LNS time where the model is coarse
        res = prog.solve(p.options, max(0.05, p.remaining() * share - 0.02 - job.ranks * 2e-5))
        self.stats["cpsat_status"] = res.status
        out = _WholeModel(solved=True)
        if res.assignment is not None:
            mp = realize(topo, p.pool, units.ranks, slots, res.assignment, job.ranks, p.pinned)
            if res.objective is not None:
                self.stats["model_objective"] = res.objective + model.constant
            if mp is not None and p.valid(mp):
                self.found("cpsat-model", mp)
            if (
                res.bound is not None
                and model.exact
                and slots_exact
                and res.status in ("OPTIMAL", "FEASIBLE")
            ):
                out.bound = res.bound + model.constant
        elif (
            res.status == "INFEASIBLE"
            and units.exact
            and not slots.leaf
            and not p.state.failed_pairs
            and _hosts_in_one_fault_domain(p)
        ):
            out.infeasible = True
        return out

    def improve_lns(self, units: Units, model: UnitModel, solved_whole: bool) -> None:
        """Large-neighbourhood search over the pool's hosts from the incumbent, unless the whole model proved it
        optimal."""
        p, topo, job = self.p, self.p.topology, self.p.job
        best = self.inc.mapping
        if (
            best is not None
            and not p.constrained
            and p.remaining() > 0.15
            and not (solved_whole and self.stats.get("cpsat_status") == "OPTIMAL")
            # the LNS moves units between the pool's hosts: an incumbent on devices outside the pool (a heuristic
            # that used a degraded device the pool leaves out) is kept as it is
            and all(topo.devices[d].host_index in p.pool.devices for d in best)
        ):
            host_assign = assignment_from_mapping(topo, units.ranks, best, partial=True) or {}
            score = SurrogateScore(p, best)
            full_hosts = host_slots(topo, p.pool, sorted(p.pool.devices))
            # leave time to score and validate the answer afterwards (about 50 µs a rank)
            ls = lns(p, model, full_hosts, host_assign, score, p.until(1.0) - 0.05 - job.ranks * 5e-5)
            self.stats.update(ls.as_stats())
            if ls.improved and p.valid(score.mapping) and self.inc.offer(score.mapping, score.total):
                self.candidates.append(("cpsat-lns", list(score.mapping)))

    def device_level(self, model_bound: float | None) -> float | None:
        """The exact device-level model where it applies (small, non-uniform hosts) and the unit model has not
        already met the incumbent; returns its valid bound (None: none)."""
        p, topo, job = self.p, self.p.topology, self.p.job
        if not (
            exact_applicable(topo, p.state, job, p.candidates)
            and p.remaining() > 0.05
            and not (model_bound is not None and self.inc.min_surrogate <= model_bound + 1e-12)
        ):
            return None
        ex = solve_device_level(
            topo, p.state, job, p.traffic, p.candidates, p.options, p.remaining(), self.inc.mapping
        )
        self.stats["exact_status"] = ex.status
        if ex.mapping is not None and p.valid(ex.mapping):
            self.found("cpsat-exact", ex.mapping)
        if ex.bound_valid and ex.bound is not None:
            self.stats["exact_objective"] = ex.objective or 0.0
            return ex.bound
        return None

    def refine(self) -> None:
        """Hosts with non-uniform links: the incumbent's ranks re-seated inside their hosts."""
        p, topo = self.p, self.p.topology
        best = self.inc.mapping
        if best is not None and any(nt.matrix is not None for nt in topo.host_types):
            refined = refine_hosts(topo, p.state, p.job, p.traffic, best, p.candidates, p.until(1.0))
            if p.valid(refined) and self.inc.offer(refined):
                self.candidates.append(("cpsat-refined", refined))

    def finish(
        self,
        bounds: BoundReport,
        units: Units,
        model: UnitModel,
        model_bound: float | None,
        exact_bound: float | None,
    ) -> CpsatOutcome:
        """The outcome: the incumbent and the best valid bound (analytic, unit model, device level), clamped to the
        least surrogate seen."""
        stats, inc = self.stats, self.inc
        bound, source = bounds.value, bounds.source
        if model_bound is not None and not units.exact:
            # units are chosen, not required: a mapping that splits one costs at least the analytic bound plus the
            # cheapest unit's step from level 0 to level 1
            split_bound = bounds.value + model.split_step
            stats["split_bound"] = split_bound
            model_bound = min(model_bound, split_bound)
        if model_bound is not None and model_bound > bound:
            bound, source = model_bound, "cpsat-model"
        if exact_bound is not None and exact_bound > bound:
            bound, source = exact_bound, "cpsat-exact"
        best = inc.mapping
        if bound > inc.min_surrogate:
            bound = inc.min_surrogate
        stats["bound_source"] = source
        stats["surrogate_best"] = inc.min_surrogate
        stats["cpsat_wall_s"] = time.perf_counter() - self.t0
        if best is not None:
            self.candidates.append(("cpsat", best))
        return CpsatOutcome(best, bound, stats, [], self.candidates)
