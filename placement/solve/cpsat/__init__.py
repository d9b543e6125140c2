"""The ``cpsat`` strategy: CP-SAT on a coarsened unit model, from the best baseline or candidate, then LNS.

Coarsening: ranks that must (or, for the heaviest label such as TP, should) share a host become units; groups and
edges that touch the same units are summed into one term; interchangeable hosts and level-1 domains are pruned.
The objective is the linear level form of the surrogate (`placement.cost.surrogate.surrogate_seconds`). Small models are
solved whole (proven optimal when the coarsening is exact); when units cannot all be whole, level-1 domains are
the slots and a unit beyond a domain's whole-host capacity pays its split; large models are improved by
large-neighbourhood search (`placement.solve.cpsat.lns`). Hosts with non-uniform links are refined last.
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
    p, topo, job, opts = request, request.topology, request.job, request.options
    t0 = time.perf_counter()
    stats: dict[str, float | int | str] = {}
    candidates: list[tuple[str, list[int]]] = []
    inc = _Incumbent(p)
    for i, (_, m) in enumerate(starts):
        inc.offer(m, known=scores[i] if i < len(scores) else None)
    best = inc.mapping
    if topo.pair_paths is not None and not p.traffic.groups and not p.pinned and not job.constraints.spread:
        mp, qb, qstats = solve_on_graph(
            topo, p.state, job, p.traffic, p.candidates, p.remaining(), opts.seed, opts.stop, best
        )
        stats.update(qstats)
        if mp is not None and p.valid(mp):
            candidates.append(("cpsat", mp))
            stats["surrogate_best"] = p.surrogate(mp)
        return CpsatOutcome(mp, qb, stats, [], candidates)
    bounds: BoundReport = lower_bounds(topo, p.state, p.traffic, p.candidates)
    stats["analytic_bound"] = bounds.value
    units = build_units(p)
    stats["units"] = len(units.ranks)
    stats["units_kind"] = units.label or ("required" if units.ranks and len(units.ranks[0]) > 1 else "ranks")
    if units.split:
        stats["units_split"] = "leaf model"
    if not p.pinned and p.remaining() > 0.1:
        share = 0.15 if job.ranks > 4096 else 0.3
        cons_deadline = p.until(share)
        cons, cons_cost, tried = best_constructive(topo, p.pool, job, units.ranks, p.surrogate, cons_deadline)
        stats["constructive_tried"] = tried
        if cons is not None and p.valid(cons):
            candidates.append(("constructive", cons))
            inc.offer(cons, cons_cost)
        if p.evaluator_guided and p.remaining() > 0.1:
            # the evaluator sees what the surrogate cannot (hierarchical collectives, shared NICs): its favourite
            # unit order is a candidate of its own
            ev, _, _ = best_constructive(
                topo, p.pool, job, units.ranks, lambda m: p.rank(m)[0], p.until(share / 2)
            )
            if ev is not None and ev != cons and p.valid(ev):
                candidates.append(("constructive", ev))
                inc.offer(ev)
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
                candidates.append(("constructive", kq))
                inc.offer(kq)
        best = inc.mapping
    model = build_model(topo, p.priced_state, p.traffic, units.ranks, units.exact, p.candidates)
    stats["terms"] = len(model.terms)
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
    stats["model_vars"] = n_vars
    stats["model_slots"] = "level-1 domains" if slots.leaf else "hosts"
    model_bound: float | None = None
    solved_whole = False
    build_s = n_vars * BUILD_S_PER_VAR  # building the program in Python is not covered by CP-SAT's limit
    if (n_vars <= MAX_FULL_VARS or (p.constrained and best is None)) and p.remaining() > max(
        0.1, 3 * build_s
    ):
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
        res = prog.solve(opts, max(0.05, p.remaining() * share - 0.02 - job.ranks * 2e-5))
        stats["cpsat_status"] = res.status
        solved_whole = True
        if res.assignment is not None:
            mp = realize(topo, p.pool, units.ranks, slots, res.assignment, job.ranks, p.pinned)
            if res.objective is not None:
                stats["model_objective"] = res.objective + model.constant
            if mp is not None and p.valid(mp):
                candidates.append(("cpsat-model", mp))
                inc.offer(mp)
            if (
                res.bound is not None
                and model.exact
                and slots_exact
                and res.status in ("OPTIMAL", "FEASIBLE")
            ):
                model_bound = res.bound + model.constant
        elif (
            res.status == "INFEASIBLE"
            and units.exact
            and not slots.leaf
            and not p.state.failed_pairs
            and _hosts_in_one_fault_domain(p)
        ):
            return CpsatOutcome(
                None,
                None,
                stats,
                [
                    "the solver proved that no mapping satisfies the hard rules together "
                    "(each rule alone can be met)"
                ],
                candidates,
            )
    best = inc.mapping
    if (
        best is not None
        and not p.constrained
        and p.remaining() > 0.15
        and not (solved_whole and stats.get("cpsat_status") == "OPTIMAL")
        # the LNS moves units between the pool's hosts: an incumbent on devices outside the pool (a heuristic
        # that used a degraded device the pool leaves out) is kept as it is
        and all(topo.devices[d].host_index in p.pool.devices for d in best)
    ):
        host_assign = assignment_from_mapping(topo, units.ranks, best, partial=True) or {}
        score = SurrogateScore(p, best)
        full_hosts = host_slots(topo, p.pool, sorted(p.pool.devices))
        # leave time to score and validate the answer afterwards (about 50 µs a rank)
        ls = lns(p, model, full_hosts, host_assign, score, p.until(1.0) - 0.05 - job.ranks * 5e-5)
        stats.update(ls.as_stats())
        if ls.improved and p.valid(score.mapping) and inc.offer(score.mapping, score.total):
            candidates.append(("cpsat-lns", list(score.mapping)))
    exact_bound: float | None = None
    best = inc.mapping
    if (
        exact_applicable(topo, p.state, job, p.candidates)
        and p.remaining() > 0.05
        and not (model_bound is not None and inc.min_surrogate <= model_bound + 1e-12)
    ):
        ex = solve_device_level(topo, p.state, job, p.traffic, p.candidates, opts, p.remaining(), best)
        stats["exact_status"] = ex.status
        if ex.mapping is not None and p.valid(ex.mapping):
            candidates.append(("cpsat-exact", ex.mapping))
            inc.offer(ex.mapping)
        if ex.bound_valid and ex.bound is not None:
            exact_bound = ex.bound
            stats["exact_objective"] = ex.objective or 0.0
    best = inc.mapping
    if best is not None and any(nt.matrix is not None for nt in topo.host_types):
        refined = refine_hosts(topo, p.state, job, p.traffic, best, p.candidates, p.until(1.0))
        if p.valid(refined) and inc.offer(refined):
            candidates.append(("cpsat-refined", refined))
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
    stats["cpsat_wall_s"] = time.perf_counter() - t0
    if best is not None:
        candidates.append(("cpsat", best))
    return CpsatOutcome(best, bound, stats, [], candidates)
