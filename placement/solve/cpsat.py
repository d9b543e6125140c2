"""The CP-SAT optimizer: rank units onto hosts with level indicators per group, exact or by neighbourhoods.

Coarsening: ranks that must (or, for TP, should) share a host become units; groups and edges that touch the
same set of units are summed into one term; interchangeable hosts and leaves are pruned to as many as could be
used. The objective is the linear level form of `placement.cost`: a term whose units share a domain of level
``l`` (and no lower) costs ``c[l]``. Small models are solved whole (proven optimal when the coarsening is
exact); larger ones are improved by large-neighbourhood search, re-solving the units of a few domains at a
time. Hosts with non-uniform intra-node links are refined afterwards (`placement.solve.refine`).
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from placement.cost import Path, collective_seconds, evaluate, p2p_seconds
from placement.job import Job
from placement.solve import SolveOptions
from placement.solve.bound import lower_bound
from placement.solve.construct import HostPool, best_constructive
from placement.solve.units import candidate_devices, required_units
from placement.state import ClusterState
from placement.topology import Topology
from placement.traffic import Traffic, dimension_groups

__all__ = ["CpsatOutcome", "UnitModel", "solve_cpsat"]

SCALE = 1e9  # objective units: nanoseconds per step, unless the costs are too large for 64-bit integers


def solve_with_stop(solver: cp_model.CpSolver, model: cp_model.CpModel, stop: threading.Event | None) -> Any:
    """Solve; a watcher thread ends the search as soon as `stop` is set (cancellation, shutdown)."""
    if stop is None:
        return solver.solve(model)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if stop.wait(0.02):
                solver.stop_search()
                return

    t = threading.Thread(target=watch, name="cpsat-stop", daemon=True)
    t.start()
    try:
        return solver.solve(model)
    finally:
        done.set()
        t.join(timeout=1.0)


def objective_scale(span: float) -> float | None:
    """Integer scale for CP-SAT: nanoseconds, or coarser so the whole objective stays below 1e15; None when the
    costs are not finite (no integer model can hold them)."""
    if not math.isfinite(span):
        return None
    return SCALE if span * SCALE < 1e15 else 1e15 / span
MAX_FULL_VARS = 25_000
MAX_WINDOW_VARS = 4_000  # a large-neighbourhood window: small enough for CP-SAT to finish within ~0.5 s


@dataclass
class CpsatOutcome:
    mapping: list[int] | None
    lower_bound: float | None
    stats: dict[str, float | int | str] = field(default_factory=dict)
    explanation: list[str] = field(default_factory=list)


@dataclass
class Term:
    """Traffic between a set of units, with its cost when their lowest common domain is at each level."""

    units: tuple[int, ...]
    cost: list[float]


@dataclass
class UnitModel:
    """The coarse problem: units (rank tuples) to place on hosts, and the traffic terms between them."""

    units: list[tuple[int, ...]]
    terms: list[Term]
    constant: float
    exact: bool  # True when the linear form equals the evaluator on every mapping of whole units
    units_exact: bool  # True when units come only from required levels (no heuristic grouping)


def _level_paths(topology: Topology) -> list[Path]:
    return [Path(lv.tier.bandwidth_gbps, lv.tier.latency_us, lv.name, li) for li, lv in enumerate(topology.levels)]


def build_units(topology: Topology, job: Job, traffic: Traffic, pool: HostPool) -> tuple[list[tuple[int, ...]], bool]:
    """Units: required host-level groups; else TP groups when enough hosts hold them whole; else single ranks."""
    req = required_units(topology, job, traffic)
    if 0 in req:
        return [u.ranks for u in req[0]], True
    par = job.parallel
    if par is not None and par.tp > 1 and not req:
        tp_groups = dimension_groups(par, ("tp",))
        whole = sum(len(d) // par.tp for d in pool.devices.values())
        if whole >= len(tp_groups):
            return tp_groups, False
    return [(r,) for r in range(job.ranks)], True


def _degradation_touches(topology: Topology, state: ClusterState, candidates: Sequence[int]) -> bool:
    """True when a degraded device, link or uplink can matter for a mapping onto `candidates`."""
    cset = set(candidates)
    if any(d in cset for d in state.device_slowdown):
        return True
    if any(a in cset and b in cset for a, b in list(state.pair_slowdown) + list(state.failed_pairs)):
        return True
    for up in list(state.uplink_slowdown) + list(state.failed_uplinks):
        col = topology.domain_column(up.level)
        if any(col[d] == up.domain for d in cset):
            return True
    return False


def build_model(topology: Topology, state: ClusterState, traffic: Traffic, units: list[tuple[int, ...]], units_exact: bool,
                candidates: Sequence[int] = ()) -> UnitModel:
    unit_of: dict[int, int] = {}
    for i, u in enumerate(units):
        for r in u:
            unit_of[r] = i
    paths = _level_paths(topology)
    n_levels = len(paths)
    acc: dict[tuple[int, ...], list[float]] = {}
    constant = 0.0
    priced: list[tuple[Sequence[int], list[float]]] = [
        (g.members, [collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, p) for p in paths])
        for g in traffic.groups
    ]
    priced += [((e.src, e.dst), [p2p_seconds(e.bytes, e.count, e.exposed, p) for p in paths]) for e in traffic.edges]
    for ranks, costs in priced:
        us = tuple(sorted({unit_of[r] for r in ranks}))
        if len(us) == 1:  # inside one unit: the same cost wherever the unit goes
            constant += costs[0]
            continue
        cur = acc.setdefault(us, [0.0] * n_levels)
        for li in range(n_levels):
            cur[li] += costs[li]
    t0 = topology.levels[0].tier
    # the linear form prices a term by its lowest common level alone: exact when going up never gets faster
    tiers = [lv.tier for lv in topology.levels]
    monotone = all(
        tiers[i + 1].bandwidth_gbps <= tiers[i].bandwidth_gbps and tiers[i + 1].latency_us >= tiers[i].latency_us
        for i in range(n_levels - 1)
    ) and all(tiers[i].bandwidth_gbps <= t0.bandwidth_gbps for i in range(n_levels))
    exact = (
        all(nt.matrix is None for nt in topology.host_types)
        and topology.rail_policy is None
        and monotone
        and topology.pair_paths is None  # a device graph is priced per pair, not per level
        and not _degradation_touches(topology, state, candidates)
    )
    return UnitModel(units, [Term(k, v) for k, v in sorted(acc.items())], constant, exact, units_exact)


def _host_classes(topology: Topology, pool: HostPool, hosts: Sequence[int], max_size: int, keep: int) -> list[int]:
    """Exact symmetry pruning: hosts with the same ancestors and free count are interchangeable; keep `keep`
    of each class. Then leaves (level 1) with the same parent and the same host multiset: keep `keep`."""
    n_levels = len(topology.levels)
    cls: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for h in hosts:
        anc = tuple(topology.domain_of(pool.devices[h][0], li) for li in range(1, n_levels))
        nt = topology.host_types[h]
        key = (anc, min(pool.free(h), max_size), nt.name if nt.matrix is not None else "",
               tuple(topology.devices[d].local_index for d in pool.devices[h]) if nt.matrix is not None or topology.rail_policy else ())
        cls[key].append(h)
    kept = [h for v in cls.values() for h in v[:keep]]
    if n_levels < 3:
        return sorted(kept)
    # leaf-level symmetry
    by_leaf: dict[int, list[int]] = defaultdict(list)
    for h in kept:
        by_leaf[topology.domain_of(pool.devices[h][0], 1)].append(h)
    leaf_cls: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for leaf, hs in by_leaf.items():
        sig = (topology.parent[1][leaf], tuple(sorted((min(pool.free(h), max_size), topology.host_types[h].name) for h in hs)))
        leaf_cls[sig].append(leaf)
    out: list[int] = []
    for leaves in leaf_cls.values():
        for leaf in leaves[:keep]:
            out.extend(by_leaf[leaf])
    return sorted(out)


@dataclass
class SpreadTerm:
    """One spread rule on one scope: units with the number of the scope's ranks they hold, and the slots of
    each fault domain."""

    units: list[tuple[int, int]]
    slots_by_domain: dict[str, set[int]]
    min_domains: int | None
    max_ranks: int | None


def spread_terms(topology: Topology, state: ClusterState, job: Job, traffic: Traffic, units: list[tuple[int, ...]],
                 pool: HostPool) -> list[SpreadTerm]:
    """The job's spread rules over host slots (a host belongs to the fault domain of its first free device)."""
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    out: list[SpreadTerm] = []
    for rule in job.constraints.spread:
        fd = state.fault_domain_of(rule.kind, topology)
        slots: dict[str, set[int]] = defaultdict(set)
        for h, devs in pool.devices.items():
            slots[fd.get(devs[0], "<none>")].add(h)
        scopes = [tuple(range(job.ranks))] if rule.scope == "job" else [g.members for g in traffic.groups if g.label == rule.scope]
        for members in scopes:
            cnt: dict[int, int] = defaultdict(int)
            for r in members:
                cnt[unit_of[r]] += 1
            out.append(SpreadTerm(sorted(cnt.items()), dict(slots), rule.min_domains, rule.max_ranks_per_domain))
    return out


@dataclass
class SubResult:
    assignment: dict[int, int] | None  # unit -> host
    objective: float | None
    bound: float | None
    status: str
    variables: int


def solve_unit_model(
    topology: Topology,
    pool: HostPool,
    model: UnitModel,
    free_units: Sequence[int],
    hosts: Sequence[int],
    fixed: dict[int, int],
    hint: dict[int, int] | None,
    options: SolveOptions,
    time_limit: float,
    symmetric_chains: Sequence[Sequence[int]] = (),
    aggregate: tuple[dict[int, int], dict[int, list[int]]] | None = None,
    allowed: dict[int, set[int]] | None = None,
    spread: Sequence[SpreadTerm] = (),
) -> SubResult:
    """Place `free_units` on `hosts` (capacity: free devices minus what fixed units hold there).

    With `aggregate = (room, chain)` the slots are level-1 domains instead of hosts: `room[k]` devices usable
    by whole units and `chain[k][l]` the slot's domain at each level (exact when no term fits in one host).
    """
    n_levels = len(topology.levels)
    m = cp_model.CpModel()
    units = model.units
    used: dict[int, int] = defaultdict(int)
    for u, h in fixed.items():
        used[h] += len(units[u])
    min_level = 0 if aggregate is None else 1
    room = {h: pool.free(h) - used[h] for h in hosts} if aggregate is None else {k: aggregate[0][k] - used[k] for k in hosts}
    x: dict[tuple[int, int], cp_model.IntVar] = {}
    by_unit: dict[int, list[int]] = defaultdict(list)
    by_host: dict[int, list[int]] = defaultdict(list)
    for u in free_units:
        size = len(units[u])
        for h in hosts:
            if room[h] >= size and (allowed is None or u not in allowed or h in allowed[u]):
                x[u, h] = m.new_bool_var(f"x{u}_{h}")
                by_unit[u].append(h)
                by_host[h].append(u)
        if not by_unit[u]:
            return SubResult(None, None, None, "INFEASIBLE", len(x))
        m.add_exactly_one(x[u, h] for h in by_unit[u])
    for h, us in by_host.items():
        if sum(len(units[u]) for u in us) > room[h]:
            m.add(sum(len(units[u]) * x[u, h] for u in us) <= room[h])
    dom = [topology.domain_column(li) for li in range(n_levels)]
    if aggregate is None:
        host_dom = {h: [dom[li][pool.devices[h][0]] for li in range(n_levels)] for h in set(hosts) | set(fixed.values())}
    else:
        host_dom = aggregate[1]
    # y[u, l, k]: unit u sits in domain k of level l (channelled from x); level 0 uses x itself
    y: dict[tuple[int, int, int], cp_model.IntVar] = {}
    ydom: dict[tuple[int, int], set[int]] = defaultdict(set)
    for u in free_units:
        for li in range(min_level + 1, n_levels - 1):
            members: dict[int, list[cp_model.IntVar]] = defaultdict(list)
            for h in by_unit[u]:
                members[host_dom[h][li]].append(x[u, h])
            for k, xs in members.items():
                if len(xs) == 1:
                    y[u, li, k] = xs[0]
                else:
                    v = m.new_bool_var("")
                    m.add(sum(xs) == v)
                    y[u, li, k] = v
                    if hint is not None and u in hint:
                        m.add_hint(v, 1 if host_dom[hint[u]][li] == k else 0)
                ydom[u, li].add(k)
        for h in by_unit[u]:
            y[u, min_level, h] = x[u, h]
            ydom[u, min_level].add(h)
    free_set = set(free_units)
    obj: list[tuple[int, cp_model.IntVar]] = []
    const = 0.0
    scale = objective_scale(sum(max(t.cost) - min(t.cost) for t in model.terms))
    if scale is None:
        return SubResult(None, None, None, "COSTS_NOT_FINITE", len(x))
    for t in model.terms:
        tf = [u for u in t.units if u in free_set]
        tx = [u for u in t.units if u not in free_set]
        if not tf:
            continue  # constant for this neighbourhood
        within_prev: cp_model.IntVar | None = None
        const += t.cost[-1]
        size = sum(len(units[u]) for u in tf)
        for li in range(min_level, n_levels - 1):
            delta = t.cost[li + 1] - t.cost[li]
            fixed_doms = {host_dom[fixed[u]][li] for u in tx}
            if len(fixed_doms) > 1:
                continue
            cand_k: set[int] | None = None
            for u in tf:
                ks = ydom[u, li]
                cand_k = set(ks) if cand_k is None else cand_k & ks
            cand_k = cand_k or set()
            if fixed_doms:
                cand_k &= fixed_doms
            if li == min_level:
                cand_k = {h for h in cand_k if room[h] >= size}
            if not cand_k:
                continue
            w = m.new_bool_var("")
            a_vars = []
            hinted_k: int | None = None
            if hint is not None and all(u in hint for u in tf):
                ks = {host_dom[hint[u]][li] for u in tf} | fixed_doms
                hinted_k = ks.pop() if len(ks) == 1 else None
                m.add_hint(w, 1 if hinted_k in cand_k else 0)
            for k in sorted(cand_k):
                a = m.new_bool_var("")
                a_vars.append(a)
                if hint is not None:
                    m.add_hint(a, 1 if k == hinted_k else 0)
                for u in tf:
                    m.add_implication(a, y[u, li, k])
            m.add(sum(a_vars) == w)
            if within_prev is not None:
                m.add_implication(within_prev, w)
            within_prev = w
            coef = round(delta * scale)
            if coef:
                obj.append((coef, w))
    for sp in spread:
        used_vars = []
        for _fd, slots_in in sp.slots_by_domain.items():
            terms = [(wt, x[u, h]) for u, wt in sp.units for h in by_unit.get(u, ()) if h in slots_in]
            if not terms:
                continue
            if sp.max_ranks is not None:
                m.add(sum(wt * v for wt, v in terms) <= sp.max_ranks)
            if sp.min_domains is not None:
                touched = m.new_bool_var("")
                m.add_bool_or([v for _, v in terms]).only_enforce_if(touched)
                used_vars.append(touched)
        if sp.min_domains is not None:
            if len(used_vars) < sp.min_domains:
                return SubResult(None, None, None, "INFEASIBLE", len(x))
            m.add(sum(used_vars) >= sp.min_domains)
    for chain in symmetric_chains:
        pos = [sum(h * x[u, h] for h in by_unit[u]) for u in chain if u in free_set]
        for p1, p2 in itertools.pairwise(pos):
            m.add(p1 <= p2)
    m.minimize(sum(-c * v for c, v in obj))
    if hint:
        for (u, h), var in x.items():
            m.add_hint(var, 1 if hint.get(u) == h else 0)
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = max(0.05, time_limit)
    p.num_workers = max(1, options.workers)
    import os
    p.log_search_progress = bool(os.environ.get("CPSAT_LOG"))
    p.random_seed = options.seed
    p.catch_sigint_signal = False  # Ctrl-C belongs to the caller (CLI, server, sweep), not to CP-SAT
    if options.relative_gap:
        p.relative_gap_limit = options.relative_gap
    if options.workers <= 1:
        p.interleave_search = True
    st = solve_with_stop(solver, m, options.stop)
    name = solver.status_name(st)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SubResult(None, None, None, name, len(x))
    assign = {u: h for (u, h), var in x.items() if solver.boolean_value(var)}
    objective = const + solver.objective_value / scale
    bound = const + solver.best_objective_bound / scale
    return SubResult(assign, objective, bound, name, len(x))


def _hosts_in_one_fault_domain(state: ClusterState, topology: Topology, pool: HostPool, job: Job) -> bool:
    """The unit model assigns fault domains per host; its infeasibility proofs hold only if that is exact."""
    for rule in job.constraints.spread:
        fd = state.fault_domain_of(rule.kind, topology)
        for devs in pool.devices.values():
            if len({fd.get(d) for d in devs}) > 1:
                return False
    return True


def _min_tp_step(topology: Topology, traffic: Traffic) -> float:
    from placement.solve.bound import level_paths

    paths = level_paths(topology)
    if len(paths) < 2:
        return 0.0
    steps = [
        collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, paths[1])
        - collective_seconds(g.kind, len(g.members), g.bytes, g.count, g.exposed, paths[0])
        for g in traffic.groups
        if g.label == "tp"
    ]
    return max(0.0, min(steps)) if steps else 0.0


def _aggregate_leaves(topology: Topology, pool: HostPool, usize: int, keep: int) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Level-1 domains as slots: room for whole units and the domain chain; interchangeable ones pruned."""
    n_levels = len(topology.levels)
    room: dict[int, int] = defaultdict(int)
    for _h, devs in pool.devices.items():
        room[topology.domain_of(devs[0], 1)] += (len(devs) // usize) * usize
    chain: dict[int, list[int]] = {}
    classes: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for k, r in sorted(room.items()):
        if r <= 0:
            continue
        c = [-1, k]
        for li in range(2, n_levels):
            c.append(topology.parent[li - 1][c[-1]])
        chain[k] = c
        classes[(r, *c[2:])].append(k)
    kept = {k for ks in classes.values() for k in ks[:keep]}
    return {k: room[k] for k in sorted(kept)}, chain


def _hosts_of(topology: Topology, pool: HostPool, units: list[tuple[int, ...]], slot_assign: dict[int, int]) -> dict[int, int]:
    """Units per level-1 domain -> hosts inside it, whole units, hosts with the most room first."""
    left: dict[int, list[int]] = defaultdict(list)  # leaf -> host slots (one entry per whole unit it holds)
    for h in sorted(pool.devices, key=lambda h: (-pool.free(h), h)):
        leaf = topology.domain_of(pool.devices[h][0], 1)
        left[leaf].extend([h] * (pool.free(h) // len(units[0])))
    out: dict[int, int] = {}
    for u in sorted(slot_assign):
        out[u] = left[slot_assign[u]].pop(0)
    return out


def _sorted_hint(job: Job, units: list[tuple[int, ...]], chain: list[int], assign: dict[int, int]) -> dict[int, int]:
    """Relabel one symmetric dimension of a hint so that the chain's representatives are in slot order."""
    par = job.parallel
    assert par is not None
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    c0 = [par.coords(units[u][0]) for u in chain]
    dim = next(d for d in ("dp", "cp", "ep") if par.size(d) == len(chain) and len({c[d] for c in c0}) == len(chain))
    order = sorted(range(len(chain)), key=lambda i: (assign[chain[i]], i))  # new index j takes old index order[j]
    out: dict[int, int] = {}
    for u, slot in assign.items():
        c = par.coords(units[u][0])
        new_index = order.index(c[dim])
        c[dim] = new_index
        out[unit_of[par.rank_of(c)]] = slot
    return out


def _symmetry_chains(job: Job, units: list[tuple[int, ...]]) -> list[list[int]]:
    """Units whose order can be fixed without losing optimality: structured jobs are symmetric under any
    permutation of the indices of one collective dimension (dp, cp or ep) applied to every rank at once, so
    the representatives (all other coordinates 0) may be taken in non-decreasing host order."""
    par = job.parallel
    if par is None or job.constraints.pins or job.constraints.spread:
        return []
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    dims = [d for d in ("dp", "cp", "ep") if par.size(d) > 1]
    if not dims:
        return []
    dim = max(dims, key=lambda d: (par.size(d), d))
    reps: list[int] = []
    for i in range(par.size(dim)):
        c = {d: 0 for d in ("tp", "cp", "ep", "dp", "pp")}
        c[dim] = i
        reps.append(unit_of[par.rank_of(c)])
    if len(set(reps)) != len(reps):
        return []  # the dimension lives inside units
    # the symmetry must map units to units: every unit must be a union of whole coordinate lines of tp only
    return [reps]


def _mapping_from_assignment(topology: Topology, pool: HostPool, units: list[tuple[int, ...]], assign: dict[int, int],
                             n_ranks: int, pins: dict[int, int] | None = None) -> list[int]:
    out = [-1] * n_ranks
    pins = pins or {}
    taken = set(pins.values())
    left = {h: [d for d in devs if d not in taken] for h, devs in pool.devices.items()}
    for r, d in pins.items():
        out[r] = d
    for u in sorted(assign):
        h = assign[u]
        for r in units[u]:
            if r not in pins:
                out[r] = left[h].pop(0)
    return out


def _assignment_from_mapping(topology: Topology, units: list[tuple[int, ...]], mapping: Sequence[int]) -> dict[int, int] | None:
    out: dict[int, int] = {}
    for i, u in enumerate(units):
        hosts = {topology.devices[mapping[r]].host_index for r in u}
        if len(hosts) != 1:
            return None
        out[i] = hosts.pop()
    return out


def solve_cpsat(topology: Topology, state: ClusterState, job: Job, traffic: Traffic, options: SolveOptions,
                hint: list[int] | None = None) -> CpsatOutcome:
    """Optimize the mapping; see the module docstring. `hint` is a valid mapping to start from, if any."""
    from placement.solve.refine import refine_hosts  # local import: refine uses cost helpers only

    t0 = time.perf_counter()
    deadline = t0 + options.time_limit_s
    stats: dict[str, float | int | str] = {}
    cands = candidate_devices(topology, state, job)
    pinned: dict[int, int] = {}
    for r, dev_id in job.constraints.pins.items():
        di = topology.device_index(dev_id)
        if di is not None:
            pinned[r] = di
    pool = HostPool.of(topology, cands)
    if topology.pair_paths is not None and not traffic.groups and not pinned and not job.constraints.spread:
        from placement.solve.qap import solve_on_graph

        mp, qb, qstats = solve_on_graph(topology, state, job, traffic, cands, options.time_limit_s, options.seed, options.stop, hint)
        stats.update(qstats)
        return CpsatOutcome(mp, qb, stats)

    def score(mp: list[int]) -> float:
        return evaluate(topology, state, job, mp, traffic=traffic, check=False).seconds

    from placement.validate import validate

    def valid(mp: list[int] | None) -> bool:
        return mp is not None and not validate(topology, state, job, mp, traffic=traffic)

    best = hint if valid(hint) else None
    best_cost = score(best) if best is not None else math.inf
    lb = lower_bound(topology, state, traffic, cands)
    stats["analytic_bound"] = lb
    units, units_exact = build_units(topology, job, traffic, pool)
    stats["units"] = len(units)
    # constructive candidates (they ignore pins; spread is checked by `valid`)
    if not pinned:
        cons, cons_cost, tried = best_constructive(topology, pool, job, units, score, t0 + 0.35 * options.time_limit_s)
        stats["constructive_tried"] = tried
        if cons is not None and cons_cost < best_cost and valid(cons):
            best, best_cost = cons, cons_cost
    model = build_model(topology, state, traffic, units, units_exact, cands)
    stats["terms"] = len(model.terms)
    model_bound: float | None = None
    constrained = bool(pinned or job.constraints.spread)
    allowed: dict[int, set[int]] = {}
    unit_of = {r: i for i, u in enumerate(units) for r in u}
    for r, d in pinned.items():
        h = topology.devices[d].host_index
        u = unit_of[r]
        allowed[u] = allowed.get(u, {h}) & {h}
    assign = _assignment_from_mapping(topology, units, best) if best is not None else None
    max_size = sum(len(u) for u in units)
    sizes = {len(u) for u in units}
    max_free = max((pool.free(h) for h in pool.devices), default=0)
    smallest_term = min((sum(len(units[u]) for u in t.units) for t in model.terms), default=max_free + 1)
    aggregate = None
    if not constrained and len(sizes) == 1 and smallest_term > max_free and len(topology.levels) > 2:
        usize = sizes.pop()
        aggregate = _aggregate_leaves(topology, pool, usize, len(units))
        slots = sorted(aggregate[0])
        slot_assign = {u: topology.domain_of(pool.devices[h][0], 1) for u, h in assign.items()} if assign else None
    else:
        keep = len(units)
        slots = sorted(pool.devices) if constrained else _host_classes(topology, pool, sorted(pool.devices), max_size, keep)
        if assign is not None:
            slots = sorted(set(slots) | set(assign.values()))  # keep the incumbent's hosts: the hint stays feasible
        slot_assign = assign
    from collections import Counter

    slot_room = Counter(aggregate[0][h] if aggregate else pool.free(h) for h in slots)
    n_vars = sum(cnt * sum(v for r, v in slot_room.items() if r >= size) for size, cnt in Counter(len(u) for u in units).items())
    stats["model_vars"] = n_vars
    stats["model_slots"] = "level-1 domains" if aggregate else "hosts"
    remaining = deadline - time.perf_counter()
    if (n_vars <= MAX_FULL_VARS or (constrained and best is None)) and remaining > 0.05:
        chains = [] if constrained else _symmetry_chains(job, units)
        if chains and slot_assign is not None:
            slot_assign = _sorted_hint(job, units, chains[0], slot_assign)
        sp = spread_terms(topology, state, job, traffic, units, pool) if job.constraints.spread else []
        res = solve_unit_model(topology, pool, model, list(range(len(units))), slots, {}, slot_assign, options,
                               remaining * 0.9, chains, aggregate, allowed or None, sp)
        stats["cpsat_status"] = res.status
        if res.assignment is not None:
            host_assign = _hosts_of(topology, pool, units, res.assignment) if aggregate else res.assignment
            mp = _mapping_from_assignment(topology, pool, units, host_assign, job.ranks, pinned)
            c = score(mp)
            stats["model_objective"] = (res.objective or 0.0) + model.constant
            if c < best_cost and valid(mp):
                best, best_cost = mp, c
            if res.bound is not None and model.exact and res.status in ("OPTIMAL", "FEASIBLE"):
                model_bound = res.bound + model.constant
        elif res.status == "INFEASIBLE" and units_exact and aggregate is None and not state.failed_pairs and _hosts_in_one_fault_domain(state, topology, pool, job):
            return CpsatOutcome(None, None, stats, ["the solver proved that no mapping satisfies the hard rules together (each rule alone can be met)"])
    elif assign is not None and best is not None and not constrained:
        best, best_cost, lns_stats = _lns(topology, state, job, traffic, pool, model, assign, best, best_cost, score, valid, options, deadline)
        stats.update(lns_stats)
    from placement.solve.exact import exact_applicable, solve_device_level

    exact_bound: float | None = None
    remaining = deadline - time.perf_counter()
    if exact_applicable(topology, state, job, cands) and remaining > 0.05 and not (model_bound is not None and best_cost <= model_bound + 1e-12):
        ex = solve_device_level(topology, state, job, traffic, cands, options, remaining, best)
        stats["exact_status"] = ex.status
        if ex.mapping is not None:
            c = score(ex.mapping)
            if c < best_cost - 1e-15 and valid(ex.mapping):
                best, best_cost = ex.mapping, c
            if ex.bound_valid and ex.bound is not None:
                exact_bound = ex.bound
                stats["exact_objective"] = ex.objective or 0.0
    if best is not None and any(nt.matrix is not None for nt in topology.host_types):
        refined = refine_hosts(topology, state, job, traffic, best, cands, deadline)
        rc = score(refined)
        if rc < best_cost and valid(refined):
            best, best_cost = refined, rc
    if model_bound is not None and not units_exact:
        # units are whole TP groups by choice, not by rule: any mapping that splits a TP group costs at least
        # the analytic bound plus the cheapest TP group's step from level 0 to level 1.
        split_bound = lb + _min_tp_step(topology, traffic)
        stats["split_bound"] = split_bound
        model_bound = min(model_bound, split_bound)
    bound = max(lb, model_bound) if model_bound is not None else lb
    if exact_bound is not None:
        bound = max(bound, exact_bound)
    if best is not None:
        bound = min(bound, best_cost)
    stats["cpsat_wall_s"] = time.perf_counter() - t0
    return CpsatOutcome(best, bound, stats)


def _lns(topology: Topology, state: ClusterState, job: Job, traffic: Traffic, pool: HostPool, model: UnitModel,
         assign: dict[int, int], best: list[int], best_cost: float, score: Callable[[list[int]], float],
         valid: Callable[[list[int] | None], bool], options: SolveOptions, deadline: float) -> tuple[list[int], float, dict[str, float | int | str]]:
    """Large-neighbourhood search: free the units of two level-1 domains (plus spare hosts there), re-solve."""
    rng = random.Random(options.seed)
    n_levels = len(topology.levels)
    li = 1 if n_levels > 2 else 0
    col = topology.domain_column(li)
    dom_hosts: dict[int, list[int]] = defaultdict(list)
    for h, devs in pool.devices.items():
        dom_hosts[col[devs[0]]].append(h)
    used_doms = sorted({col[pool.devices[h][0]] for h in assign.values()})
    rounds = improved = 0
    deadline -= 0.1 + job.ranks * 5e-5  # leave time to score, validate and return the answer
    while time.perf_counter() < deadline - 0.05 and used_doms:
        if options.stop is not None and options.stop.is_set():
            break
        rounds += 1
        pick = set(rng.sample(used_doms, min(2, len(used_doms))))
        others = [k for k in dom_hosts if k not in pick]
        if others:
            pick.add(rng.choice(others))
        hosts = sorted(h for k in pick for h in dom_hosts[k])
        hset = set(hosts)
        free_units = [u for u, h in assign.items() if h in hset]
        if len(free_units) < 2:
            continue
        if len(free_units) * len(hosts) > MAX_WINDOW_VARS:
            # keep the neighbourhood small enough to solve within its budget: free a random subset
            free_units = sorted(rng.sample(free_units, max(2, MAX_WINDOW_VARS // len(hosts))))
        free_set = set(free_units)
        fixed = {u: h for u, h in assign.items() if u not in free_set}
        budget = min(1.0, deadline - time.perf_counter() - 0.05)
        if budget <= 0.05:
            break
        res = solve_unit_model(topology, pool, model, free_units, hosts, fixed, assign, options, budget)
        if res.assignment is None:
            continue
        cand = dict(fixed) | res.assignment
        mp = _mapping_from_assignment(topology, pool, model.units, cand, job.ranks)
        c = score(mp)
        if c < best_cost - 1e-12 and valid(mp):
            best, best_cost, assign = mp, c, cand
            used_doms = sorted({col[pool.devices[h][0]] for h in assign.values()})
            improved += 1
    return best, best_cost, {"lns_rounds": rounds, "lns_improved": improved}
