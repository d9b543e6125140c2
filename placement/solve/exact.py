"""The exact device-level CP-SAT model for small requests: ranks onto individual devices, every pair's path.

It proves optimality where the unit model cannot: non-uniform intra-node matrices (DGX-1 cube mesh, PCIe
pairs), any mix of tiers. A group costs as much as its worst placed member pair, which is exact when slower
paths never have lower latency among the candidate pairs (checked) and no degradation applies. Otherwise every
pair is priced at the smallest latency: a relaxation whose bound stays valid (degradation only adds cost).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from placement.cost.paths import Path
from placement.cost.surrogate import collective_seconds, p2p_seconds
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.params import configure, objective_scale, run_cpsat
from placement.solve.types import SolveOptions

__all__ = ["ExactResult", "exact_applicable", "solve_device_level"]

MAX_RANKS = 16
MAX_DEVICES = 32


@dataclass
class ExactResult:
    """`bound` is a valid lower bound whenever `bound_valid`; `objective` equals the evaluator when `exact`."""

    mapping: list[int] | None
    objective: float | None
    bound: float | None
    status: str
    exact: bool
    bound_valid: bool = True


def _pair_paths(topology: Topology, devices: Sequence[int]) -> dict[tuple[int, int], Path]:
    out = {}
    for a in devices:
        for b in devices:
            if a != b:
                t, name = topology.pair_tier(a, b)
                out[a, b] = Path(t.bandwidth_gbps, t.latency_us, name, topology.lca_level(a, b))
    return out


def exact_applicable(topology: Topology, state: ClusterState, job: Job, candidates: Sequence[int]) -> bool:
    """Small enough to solve at device level, with no rule the device model leaves out."""
    return job.ranks <= MAX_RANKS and len(candidates) <= MAX_DEVICES


def solve_device_level(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    candidates: Sequence[int],
    options: SolveOptions,
    time_limit: float,
    hint: Sequence[int] | None,
) -> ExactResult:
    """Solve the whole request at device level (see the module docstring)."""
    t0 = time.perf_counter()
    cands = list(candidates)
    paths, exact = _priced_paths(topology, state, cands)
    m = cp_model.CpModel()
    x = {(r, d): m.new_bool_var(f"x[rank={r},device={d}]") for r in range(job.ranks) for d in cands}
    for r in range(job.ranks):
        m.add_exactly_one(x[r, d] for d in cands)
    for d in cands:
        m.add_at_most_one(x[r, d] for r in range(job.ranks))
    for r, dev in job.constraints.pins.items():
        di = topology.device_index(dev)
        if di is None or di not in set(cands):
            return ExactResult(None, None, None, "INFEASIBLE", exact)
        m.add(x[r, di] == 1)
    _add_required_levels(m, x, topology, job, traffic, cands)
    terms = _terms(traffic, paths)
    scale = objective_scale(sum(max(c.values()) - min(c.values()) for _, c in terms if c))
    if scale is None:
        return ExactResult(None, None, None, "COSTS_NOT_FINITE", exact)
    objective: list[tuple[int, cp_model.IntVar]] = []
    constant = 0.0
    for ti, (term_members, term_cost) in enumerate(terms):
        constant += _add_term(m, x, cands, ti, term_members, term_cost, scale, objective)
    _add_failures(m, x, topology, state, traffic, cands)
    _add_spread(m, x, topology, state, job, traffic, cands)
    m.minimize(sum(c * z for c, z in objective))
    if hint is not None:
        for (r, d), v in x.items():
            m.add_hint(v, 1 if hint[r] == d else 0)
    solver = cp_model.CpSolver()
    configure(solver, options, time_limit - (time.perf_counter() - t0))
    st = run_cpsat(solver, m, options.stop)
    name = solver.status_name(st)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return ExactResult(None, None, None, name, exact)
    mapping = [next(d for d in cands if solver.boolean_value(x[r, d])) for r in range(job.ranks)]
    # the worst member pair is the group's true bottleneck only when no level is faster than the one below it
    tiers = [lv.tier for lv in topology.levels]
    levels_monotone = all(
        tiers[i + 1].bandwidth_gbps <= tiers[i].bandwidth_gbps for i in range(len(tiers) - 1)
    )
    return ExactResult(
        mapping,
        constant + solver.objective_value / scale,
        constant + solver.best_objective_bound / scale,
        name,
        exact,
        levels_monotone or topology.pair_paths is not None,
    )


_X = dict[tuple[int, int], cp_model.IntVar]
"""x[rank, device]: the rank sits on the device."""


def _priced_paths(
    topology: Topology, state: ClusterState, cands: Sequence[int]
) -> tuple[dict[tuple[int, int], Path], bool]:
    """Every candidate pair's path, and whether the model is exact (a slower pair never has a lower latency,
    nothing degraded is in reach, no rail penalty); when not monotone, every pair at the smallest latency (a
    relaxation: the bound stays valid, the objective is not exact)."""
    paths = _pair_paths(topology, cands)
    plist = sorted(paths.values(), key=lambda p: (-p.bandwidth_gbps, p.latency_us))
    monotone = all(plist[i].latency_us <= plist[i + 1].latency_us + 1e-12 for i in range(len(plist) - 1))
    cset = set(cands)
    degraded = any(d in cset for d in state.device_slowdown) or bool(
        state.pair_slowdown or state.uplink_slowdown
    )
    exact = monotone and not degraded and topology.rail_policy is None  # rail penalties only add cost
    if not monotone:
        lat0 = min(p.latency_us for p in paths.values())
        paths = {ab: Path(p.bandwidth_gbps, lat0, p.tier, p.level) for ab, p in paths.items()}
    return paths, exact


def _add_required_levels(
    m: cp_model.CpModel, x: _X, topology: Topology, job: Job, traffic: Traffic, cands: Sequence[int]
) -> None:
    """Required levels: members of a group (or edge) share one domain of the level."""
    for label, lname in job.constraints.require.items():
        li = topology.level_index(lname)
        col = topology.domain_column(li)
        members_sets = [g.members for g in traffic.groups if g.label == label] + [
            (e.src, e.dst) for e in traffic.edges if e.label == label
        ]
        for members in members_sets:
            first = members[0]
            for other in members[1:]:
                for a in cands:
                    m.add_bool_or([x[other, b] for b in cands if col[b] == col[a]]).only_enforce_if(
                        x[first, a]
                    )


def _terms(
    traffic: Traffic, paths: dict[tuple[int, int], Path]
) -> list[tuple[Sequence[int], dict[tuple[int, int], float]]]:
    """Each group and edge with its cost per ordered device pair its members may sit on."""
    terms: list[tuple[Sequence[int], dict[tuple[int, int], float]]] = []
    for g in traffic.groups:
        n = len(g.members)
        one = {ab: collective_seconds(g.kind, n, g.bytes, g.count, g.exposed, p) for ab, p in paths.items()}
        terms.append((g.members, {(a, b): max(c, one[b, a]) for (a, b), c in one.items()}))  # both directions
    for e in traffic.edges:
        terms.append(
            ((e.src, e.dst), {ab: p2p_seconds(e.bytes, e.count, e.exposed, p) for ab, p in paths.items()})
        )
    return terms


def _add_term(
    m: cp_model.CpModel,
    x: _X,
    cands: Sequence[int],
    ti: int,
    members: Sequence[int],
    cost_of: dict[tuple[int, int], float],
    scale: float,
    objective: list[tuple[int, cp_model.IntVar]],
) -> float:
    """A term's cost as its worst member pair: one indicator per cost step above the cheapest (appended to
    `objective`); returns the cheapest cost (the term's constant)."""
    values = sorted(set(cost_of.values()))
    pairs = [(members[i], members[j]) for i in range(len(members)) for j in range(i + 1, len(members))]
    for k in range(1, len(values)):
        step = values[k] - values[k - 1]
        z = m.new_bool_var(f"costs_above[term={ti},step={k}]")
        for r, s in pairs:
            for a in cands:
                bad = [x[s, b] for b in cands if b != a and cost_of[a, b] >= values[k] - 1e-18]
                if bad:
                    # r on a and s on a device that makes this pair at least values[k] expensive => z
                    m.add(sum(bad) == 0).only_enforce_if([x[r, a], z.Not()])
        objective.append((round(step * scale), z))
    return values[0]


def _add_failures(
    m: cp_model.CpModel,
    x: _X,
    topology: Topology,
    state: ClusterState,
    traffic: Traffic,
    cands: Sequence[int],
) -> None:
    """Failed links: members of one group or edge never sit on the two ends of a failed link, nor across a failed
    uplink."""
    cset = set(cands)
    rank_sets: list[tuple[int, ...]] = [g.members for g in traffic.groups] + [
        (e.src, e.dst) for e in traffic.edges
    ]
    for a, b in state.failed_pairs:
        if a in cset and b in cset:
            for members in rank_sets:
                for r in members:
                    for s in members:
                        if r != s:
                            m.add_bool_or([x[r, a].Not(), x[s, b].Not()])
    for ui, up in enumerate(state.failed_uplinks):
        col = topology.domain_column(up.level)
        inside = [d for d in cands if col[d] == up.domain]
        outside = [d for d in cands if col[d] != up.domain]
        if not inside or not outside:
            continue
        for si, members in enumerate(rank_sets):
            # all members inside the cut-off domain, or all outside
            flag = m.new_bool_var(f"inside[uplink={ui},rank_set={si}]")
            for r in members:
                m.add(sum(x[r, d] for d in inside) == 1).only_enforce_if(flag)
                m.add(sum(x[r, d] for d in inside) == 0).only_enforce_if(flag.Not())


def _add_spread(
    m: cp_model.CpModel,
    x: _X,
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    cands: Sequence[int],
) -> None:
    """Fault-domain spread rules: at most so many ranks of a scope per domain, at least so many domains touched."""
    for i, rule in enumerate(job.constraints.spread):
        fd = state.fault_domain_of(rule.kind, topology)
        names = sorted({fd.get(d, "<none>") for d in cands})
        scopes = (
            [tuple(range(job.ranks))]
            if rule.scope == "job"
            else [g.members for g in traffic.groups if g.label == rule.scope]
        )
        for si, members in enumerate(scopes):
            touched = []
            for name in names:
                devs = [d for d in cands if fd.get(d, "<none>") == name]
                load = sum(x[r, d] for r in members for d in devs)
                if rule.max_ranks_per_domain is not None:
                    m.add(load <= rule.max_ranks_per_domain)
                if rule.min_domains is not None:
                    t = m.new_bool_var(f"touched[rule={i},scope={si},fault_domain={name}]")
                    m.add(load >= 1).only_enforce_if(t)
                    touched.append(t)
            if rule.min_domains is not None:
                m.add(sum(touched) >= rule.min_domains)
