"""The admission model of a batch: a CP-SAT knapsack over the free capacity per domain that says which jobs of a
queue can run together (an upper bound on the admitted weight) and on which hosts their host-level groups fit.

Used by `placement.solve.batch`; it places no rank and scores nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from placement.job import Job
from placement.solve.params import configure, run_cpsat
from placement.solve.types import SolveOptions
from placement.solve.units import required_units
from placement.state import ClusterState
from placement.topology import Topology
from placement.traffic import Traffic

__all__ = ["WEIGHT_SCALE", "Admission", "Demand", "admit"]

WEIGHT_SCALE = 1000
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
    def of(index: int, job: Job, weight: float, tiebreak: int, topology: Topology, traffic: Traffic,
           candidates: list[int]) -> Demand:
        units: dict[int, Counter[int]] = {}
        for level, us in required_units(topology, job, traffic).items():
            sizes = Counter(len(u.ranks) for u in us if len(u.ranks) > 1)
            if sizes:
                units[level] = sizes
        return Demand(index, job, weight, tiebreak, candidates, units)


@dataclass
class Admission:
    """The knapsack's answer: the jobs it admits, the bound on the admitted weight (None: no bound proven), and
    per admitted job with host-level units, host -> devices reserved for it there."""

    admitted: list[int]
    bound: float | None
    optimal: bool
    hosts: dict[int, dict[int, int]]
    status: str


def admit(topology: Topology, state: ClusterState, demands: Sequence[Demand], options: SolveOptions,
          time_limit_s: float) -> Admission:
    """Maximize the admitted weight (ties: the higher `tiebreak`s) subject to, all necessary for a joint placement:

    - per device kind and in total, the admitted ranks fit the free devices (a job's kind or any);
    - per required level l and unit size s >= 2 of a job, its units go to domains of l that hold s of its own
      candidates each, and per domain the units of all admitted jobs fit its free devices.

    A relaxation (spread rules, pins and failed links are left out), so its optimum bounds the admitted weight.
    """
    m = cp_model.CpModel()
    n = len(demands)
    big = n * n + 1
    a = {d.index: m.new_bool_var(f"a{d.index}") for d in demands}
    free = [dv for dv in range(topology.num_devices) if state.usable(dv)]
    kinds = Counter(topology.devices[dv].kind for dv in free)
    m.add(sum(d.job.ranks * a[d.index] for d in demands) <= len(free))
    for kind, count in kinds.items():
        same = [d for d in demands if d.job.device_kind == kind]
        if same:
            m.add(sum(d.job.ranks * a[d.index] for d in same) <= count)
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
    scaled = {d.index: round(d.weight * WEIGHT_SCALE) * big + d.tiebreak for d in demands}
    m.maximize(sum(scaled[i] * a[i] for i in a))
    solver = cp_model.CpSolver()
    configure(solver, options, time_limit_s)
    status = run_cpsat(solver, m, options.stop)
    name = solver.status_name(status)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return Admission([], None, False, {}, name)
    chosen = [i for i in a if solver.boolean_value(a[i])]
    weight_bound = (int(float(solver.best_objective_bound) + 1e-6) // big) / WEIGHT_SCALE
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
    return Admission(chosen, weight_bound, status == cp_model.OPTIMAL, hosts, name)
