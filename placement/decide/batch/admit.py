"""The admission model of a batch: a CP-SAT knapsack over the free capacity per domain that says which jobs of a
queue can run together (an upper bound on the admitted weight) and on which hosts their host-level groups fit.

Used by `placement.decide.batch.joint`; it places no rank and scores nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.params import configure, run_cpsat
from placement.solve.types import SolveOptions
from placement.solve.units import required_units

__all__ = ["WEIGHT_SCALE", "Admission", "Demand", "admit"]

WEIGHT_SCALE = 1000
MAX_DETAILED_VARS = 6000
"""Above about this many unit-per-host variables only the aggregate model is solved."""
"""Weights enter the integer model rounded to 1/1000."""


@dataclass
class Demand:
    """What one job needs: its ranks, candidate devices on the base state, and per required level the sizes of
    the rank units that must share one domain of that level (units of one rank left out)."""

    index: int
    job: Job
    weight: float
    tiebreak: int  # higher: preferred among answers of equal weight (priority, then queue position)
    candidates: list[int]
    units: dict[int, Counter[int]] = field(default_factory=dict)  # level -> unit size -> count

    @staticmethod
    def of(
        index: int,
        job: Job,
        weight: float,
        tiebreak: int,
        topology: Topology,
        traffic: Traffic,
        candidates: list[int],
    ) -> Demand:
        units: dict[int, Counter[int]] = {}
        for level, us in required_units(topology, job, traffic).items():
            sizes = Counter(len(u.ranks) for u in us if len(u.ranks) > 1)
            if sizes:
                units[level] = sizes
        return Demand(index, job, weight, tiebreak, candidates, units)


@dataclass
class Admission:
    """The knapsack's answer: the jobs it admits, the proven bound on the admitted weight (None: none), whether
    its answer reaches the bound (`optimal`), and per admitted job with host-level units, host -> devices reserved
    for it there."""

    admitted: list[int]
    bound: float | None
    optimal: bool
    hosts: dict[int, dict[int, int]]
    status: str


def _relaxed(
    m: cp_model.CpModel,
    a: dict[int, cp_model.IntVar],
    topology: Topology,
    free: Sequence[int],
    demands: Sequence[Demand],
) -> None:
    """The aggregate constraints: ranks per kind and in total fit the free devices, and per required level and
    unit size s, the admitted units of >= s ranks fit the room for s-sized groups (sum of floor(free / s))."""
    m.add(sum(d.job.ranks * a[d.index] for d in demands) <= len(free))
    for kind, count in Counter(topology.devices[dv].kind for dv in free).items():
        same = [d for d in demands if d.job.device_kind == kind]
        if same:
            m.add(sum(d.job.ranks * a[d.index] for d in same) <= count)
    for level in sorted({lv for d in demands for lv in d.units}):
        col = topology.domain_column(level)
        per = Counter(col[dv] for dv in free)
        for size in sorted({s for d in demands for s in d.units.get(level, {})}):
            room = sum(v // size for v in per.values())
            need = [
                (sum(c for s2, c in d.units[level].items() if s2 >= size), d.index)
                for d in demands
                if level in d.units
            ]
            m.add(sum(k * a[i] for k, i in need if k) <= room)


def admit(
    topology: Topology,
    state: ClusterState,
    demands: Sequence[Demand],
    options: SolveOptions,
    time_limit_s: float,
) -> Admission:
    """Maximize the admitted weight (ties: the higher `tiebreak`s) subject to, all necessary for a joint placement:

    - per device kind and in total, the admitted ranks fit the free devices (a job's kind or any);
    - per required level l and unit size s >= 2: the admitted units of at least s ranks fit the room for groups of
      s in the domains of l (first alone, a small model solved to optimality: the bound), and then each unit goes
      to a domain of l that holds s of its own candidates, and per domain the units fit its free devices.

    A relaxation (spread rules, pins and failed links are left out), so its optimum bounds the admitted weight.
    """
    n = len(demands)
    big = n * n + 1
    free = [dv for dv in range(topology.num_devices) if state.usable(dv)]
    scaled = {d.index: round(d.weight * WEIGHT_SCALE) * big + d.tiebreak for d in demands}
    # 1. the aggregate model: the bound, and the hint of the detailed model
    m0 = cp_model.CpModel()
    a0 = {d.index: m0.new_bool_var(f"a{d.index}") for d in demands}
    _relaxed(m0, a0, topology, free, demands)
    m0.maximize(sum(scaled[i] * a0[i] for i in a0))
    s0 = cp_model.CpSolver()
    configure(
        s0, options, max(1.0, 0.3 * time_limit_s)
    )  # it solves in milliseconds; the floor is for a loaded machine
    st0 = run_cpsat(s0, m0, options.stop)
    ok0 = st0 in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    bound0 = float(s0.best_objective_bound) if ok0 else math.inf
    chosen0 = [i for i in a0 if s0.boolean_value(a0[i])] if ok0 else []

    def answer(chosen: list[int], bound: float, hosts: dict[int, dict[int, int]], status: str) -> Admission:
        weight_bound = None if not math.isfinite(bound) else (int(bound + 1e-6) // big) / WEIGHT_SCALE
        reached = weight_bound is not None and sum(scaled[i] for i in chosen) // big >= round(
            weight_bound * WEIGHT_SCALE
        )
        return Admission(chosen, weight_bound, reached, hosts, status)

    size = sum(len(sizes) for d in demands for sizes in d.units.values()) * max(
        len(topology.domain_names[0]), 1
    )
    if size > MAX_DETAILED_VARS:  # too large to solve in a share of the limit: the aggregate answer
        return answer(chosen0, bound0, {}, f"aggregate {s0.status_name(st0)}")
    # 2. the detailed model: units per domain
    m = cp_model.CpModel()
    a = {d.index: m.new_bool_var(f"a{d.index}") for d in demands}
    _relaxed(m, a, topology, free, demands)
    if ok0:
        for i, v in a.items():
            m.add_hint(v, s0.boolean_value(a0[i]))
    per_domain: dict[tuple[int, int], list[tuple[int, cp_model.IntVar]]] = {}
    host_vars: dict[int, list[tuple[int, int, cp_model.IntVar]]] = {}
    for d in demands:
        for level, sizes in d.units.items():
            col = topology.domain_column(level)
            cand_per = Counter(col[dv] for dv in d.candidates)
            for size, count in sizes.items():
                terms: list[cp_model.IntVar] = []
                for dom, c in sorted(cand_per.items()):
                    cap = min(count, c // size)
                    if cap <= 0:
                        continue
                    v = m.new_int_var(0, cap, f"c{d.index}_{level}_{size}_{dom}")
                    terms.append(v)
                    per_domain.setdefault((level, dom), []).append((size, v))
                    if level == 0:
                        host_vars.setdefault(d.index, []).append((dom, size, v))
                m.add(sum(terms) == count * a[d.index])
    free_per: dict[int, Counter[int]] = {}
    for (level, dom), sized in per_domain.items():
        if level not in free_per:
            col = topology.domain_column(level)
            free_per[level] = Counter(col[dv] for dv in free)
        m.add(sum(s * v for s, v in sized) <= free_per[level][dom])
    m.maximize(sum(scaled[i] * a[i] for i in a))
    solver = cp_model.CpSolver()
    configure(solver, options, 0.7 * time_limit_s)
    status = run_cpsat(solver, m, options.stop)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return answer(chosen0, bound0, {}, f"aggregate {s0.status_name(st0)}, per domain {name}")
    bound = min(bound0, float(solver.best_objective_bound))
    chosen = [i for i in a if solver.boolean_value(a[i])]
    hosts: dict[int, dict[int, int]] = {}
    for i, vs in host_vars.items():
        if i not in chosen:
            continue
        per_host: dict[int, int] = {}
        for host, size, v in vs:
            k = int(solver.value(v))
            if k:
                per_host[host] = per_host.get(host, 0) + k * size
        hosts[i] = per_host
    return answer(chosen, bound, hosts, name)
