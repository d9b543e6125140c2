"""The generic path on non-tree device graphs: a quadratic assignment of ranks to devices.

Robust tabu search (Taillard 1991) over swaps with an O(n^2) delta matrix, CP-SAT with element constraints to
prove small instances, and the Gilmore-Lawler bound. Costs are ``sum F1*L + F2*W`` over rank pairs: F1 transfer
counts times latency, F2 bytes times seconds per byte, exactly as `placement.cost.surrogate.p2p_seconds` adds them.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import numpy as np
from ortools.graph.python import linear_sum_assignment
from ortools.sat.python import cp_model

from placement.errors import InternalError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.params import configure
from placement.solve.types import SolveOptions

__all__ = ["PairwiseProblem", "gilmore_lawler", "solve_exact", "solve_on_graph", "tabu_search"]


@dataclass
class PairwiseProblem:
    """m locations (devices) for n <= m facilities (ranks); flows f[k] (n x n) meet distances d[k] (m x m)."""

    flows: list[np.ndarray]
    dists: list[np.ndarray]

    @property
    def n(self) -> int:
        return int(self.flows[0].shape[0])

    @property
    def m(self) -> int:
        return int(self.dists[0].shape[0])

    def padded(self) -> PairwiseProblem:
        """Dummy ranks with no traffic, so that ranks and devices are as many (a permutation problem)."""
        n, m = self.n, self.m
        if n == m:
            return self
        out = []
        for f in self.flows:
            g = np.zeros((m, m))
            g[:n, :n] = f
            out.append(g)
        return PairwiseProblem(out, self.dists)

    def cost(self, perm: np.ndarray) -> float:
        return float(
            sum((f * d[np.ix_(perm, perm)]).sum() for f, d in zip(self.flows, self.dists, strict=True))
        )


def _delta_all(p: PairwiseProblem, perm: np.ndarray) -> np.ndarray:
    """delta[r, s]: exact cost change of swapping the locations of facilities r and s (all pairs at once).

    With D[i, j] the distance between the locations of i and j, a swap changes the terms of rows and columns
    r and s: sum over k not in {r, s} of f[r,k](D[s,k]-D[r,k]) + f[s,k](D[r,k]-D[s,k]) + f[k,r](D[k,s]-D[k,r])
    + f[k,s](D[k,r]-D[k,s]), plus the 2x2 block of r and s.
    """
    n = len(perm)
    total = np.zeros((n, n))
    for f, dist in zip(p.flows, p.dists, strict=True):
        D = dist[np.ix_(perm, perm)]
        fD = f * D
        R, C = fD.sum(axis=1), fD.sum(axis=0)
        FR = f @ D.T  # FR[r, s] = sum_k f[r,k] D[s,k]
        FC = f.T @ D  # FC[r, s] = sum_k f[k,r] D[k,s]
        frr, fss = np.diag(f)[:, None], np.diag(f)[None, :]
        Drr, Dss = np.diag(D)[:, None], np.diag(D)[None, :]
        frs, fsr, Drs, Dsr = f, f.T, D, D.T
        t1 = (FR - R[:, None]) - frr * (Dsr - Drr) - frs * (Dss - Drs)
        t2 = (FR.T - R[None, :]) - fsr * (Drr - Dsr) - fss * (Drs - Dss)
        t3 = (FC - C[:, None]) - frr * (Drs - Drr) - fsr * (Dss - Dsr)
        t4 = (FC.T - C[None, :]) - frs * (Drr - Drs) - fss * (Dsr - Dss)
        block = frr * (Dss - Drr) + fss * (Drr - Dss) + frs * (Dsr - Drs) + fsr * (Drs - Dsr)
        total += t1 + t2 + t3 + t4 + block
    np.fill_diagonal(total, 0.0)
    return total


def tabu_search(
    problem: PairwiseProblem,
    start: np.ndarray,
    *,
    time_limit: float,
    seed: int = 0,
    stop: threading.Event | None = None,
    target: float | None = None,
) -> tuple[np.ndarray, float, int]:
    """Robust tabu search over swaps from `start` (a permutation of range(m)); returns (best, cost, iterations)."""
    p = problem.padded()
    rng = random.Random(seed)
    n = len(start)
    perm = start.copy()
    cur = p.cost(perm)
    best, best_cost = perm.copy(), cur
    tabu = np.zeros((n, n), dtype=np.int64)  # tabu[i, loc]: iteration until which i may not go back to loc
    t_end = time.perf_counter() + time_limit
    it = 0
    tmin, tmax = max(2, int(0.9 * n)), max(3, int(1.1 * n))
    tenure = rng.randint(tmin, tmax)
    aspiration_free = 2 * n * n
    last_move = np.zeros((n, n), dtype=np.int64)
    iu = np.triu_indices(n, 1)
    last_gain = 0
    patience = max(2000, 100 * n)
    while True:
        if it % 32 == 0:
            if time.perf_counter() > t_end or (stop is not None and stop.is_set()):
                break
            if target is not None and best_cost <= target + 1e-9:
                break
            tenure = rng.randint(tmin, tmax)
        it += 1
        delta = _delta_all(p, perm)
        d = delta[iu]
        r_idx, s_idx = iu
        loc_r, loc_s = perm[r_idx], perm[s_idx]
        forbidden = (tabu[r_idx, loc_s] >= it) & (tabu[s_idx, loc_r] >= it)
        aspire = cur + d < best_cost - 1e-9
        allowed = ~forbidden | aspire
        # diversification: a pair not moved for a long time is taken at once
        stale = (it - last_move[r_idx, s_idx]) > aspiration_free
        if stale.any():
            k = int(np.flatnonzero(stale)[0])
        elif allowed.any():
            cand = np.where(allowed, d, np.inf)
            k = int(np.argmin(cand))
        else:
            k = int(np.argmin(d))
        r, s = int(r_idx[k]), int(s_idx[k])
        tabu[r, perm[r]] = it + tenure
        tabu[s, perm[s]] = it + tenure
        last_move[r, s] = it
        perm[r], perm[s] = perm[s], perm[r]
        cur += float(d[k])
        if cur < best_cost - 1e-9:
            best, best_cost = perm.copy(), cur
            last_gain = it
        elif it - last_gain > patience:
            # iterated restart: perturb the best permutation with random swaps and go on searching
            perm = best.copy()
            for _ in range(max(2, n // 4)):
                a, b = rng.sample(range(n), 2)
                perm[a], perm[b] = perm[b], perm[a]
            cur = p.cost(perm)
            tabu[:] = 0
            last_gain = it
    return best, problem.padded().cost(best), it


def gilmore_lawler(problem: PairwiseProblem) -> float:
    """Gilmore-Lawler lower bound: for rank i on device k, the outgoing costs are at least the minimal scalar
    product of i's sorted flows and k's sorted distances; a linear assignment over (i, k) bounds the total."""
    p = problem.padded()
    m = p.m
    lmat = np.zeros((m, m))
    for f, d in zip(p.flows, p.dists, strict=True):
        for i in range(m):
            fi = np.sort(np.delete(f[i], i))  # ascending
            for k in range(m):
                dk = np.sort(np.delete(d[k], k))[::-1]  # descending
                lmat[i, k] += f[i, i] * d[k, k] + float(fi @ dk)
    scale = 1e6 / max(1e-300, float(np.abs(lmat).max()))
    lsa = linear_sum_assignment.SimpleLinearSumAssignment()
    ints = np.floor(lmat * scale).astype(np.int64)
    for i in range(m):
        for k in range(m):
            lsa.add_arc_with_cost(i, k, int(ints[i, k]))
    if lsa.solve() != lsa.OPTIMAL:
        return 0.0
    # floor() keeps the integer LAP a lower bound; undo the scale
    return max(0.0, float(lsa.optimal_cost()) / scale - m / scale)


def solve_exact(
    problem: PairwiseProblem,
    *,
    time_limit: float,
    hint: np.ndarray | None,
    seed: int,
    workers: int,
    stop: threading.Event | None = None,
) -> tuple[np.ndarray | None, float | None, float | None, str]:
    """CP-SAT: loc[i] in devices, all different, pair cost through element constraints on the flattened
    (integer-scaled) distance table. Exact when the costs are integers (QAPLIB) or scale without loss."""
    p = problem
    n, m = p.n, p.m
    combined_scale = 1.0
    tables = []
    for f, d in zip(p.flows, p.dists, strict=True):
        tables.append((f, d))
    # one integer table per flow matrix: weights must be integral for an exact model
    model = cp_model.CpModel()
    loc = [model.new_int_var(0, m - 1, f"loc{i}") for i in range(n)]
    model.add_all_different(loc)
    terms = []
    for f, d in tables:
        if not np.allclose(d, np.round(d)) or not np.allclose(f, np.round(f)):
            return None, None, None, "NOT_INTEGRAL"
        flat = [int(x) for x in np.round(d).flatten()]
        lo, hi = min(flat), max(flat)
        for i in range(n):
            for j in range(n):
                if i == j or f[i, j] == 0:
                    continue
                idx = model.new_int_var(0, m * m - 1, f"pair[{i},{j}]")
                model.add(idx == loc[i] * m + loc[j])
                dv = model.new_int_var(lo, hi, f"distance[{i},{j}]")
                model.add_element(idx, flat, dv)
                terms.append(round(f[i, j]) * dv)
    model.minimize(sum(terms))
    if hint is not None:
        for i in range(n):
            model.add_hint(loc[i], int(hint[i]))
    solver = cp_model.CpSolver()
    configure(solver, SolveOptions(seed=seed, workers=workers), time_limit)
    st = solver.solve(model)
    name = solver.status_name(st)
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, None, name
    perm = np.array([solver.value(v) for v in loc])
    return perm, solver.objective_value * combined_scale, solver.best_objective_bound * combined_scale, name


def solve_on_graph(
    topology: Topology,
    state: ClusterState,
    job: Job,
    traffic: Traffic,
    candidates: list[int],
    time_limit: float,
    seed: int,
    stop: threading.Event | None,
    hint: list[int] | None,
) -> tuple[list[int] | None, float | None, dict[str, float | int | str]]:
    """Edges-only jobs on a pair-path topology as a QAP over the candidate devices: tabu search from the hint
    (or a seeded random start), Gilmore-Lawler bound. Returns (mapping, lower bound, stats)."""
    n, m = job.ranks, len(candidates)
    if m < n:
        return None, None, {}
    pp = topology.pair_paths
    if pp is None:
        raise InternalError("the QAP search needs a topology given as all-pairs paths (pair_paths)")
    f_lat, f_bytes = np.zeros((n, n)), np.zeros((n, n))
    for e in traffic.edges:
        f_lat[e.src, e.dst] += e.count * e.exposed
        f_bytes[e.src, e.dst] += e.count * e.exposed * e.bytes
    lat, per_byte = np.zeros((m, m)), np.zeros((m, m))
    for i, a in enumerate(candidates):
        for j, b in enumerate(candidates):
            if i != j:
                t = pp[a][b]
                slow = max(state.device_slowdown.get(a, 1.0), state.device_slowdown.get(b, 1.0))
                lat[i, j] = t.latency_us * 1e-6
                per_byte[i, j] = slow / (t.bandwidth_gbps * 1e9)
    flows, dists = [f_bytes], [per_byte]
    if lat.any() and f_lat.any():
        flows.append(f_lat)
        dists.append(lat)
    prob = PairwiseProblem(flows, dists)
    pos = {d: i for i, d in enumerate(candidates)}
    if hint is not None and all(d in pos for d in hint):
        used = [pos[d] for d in hint]
        rest = [i for i in range(m) if i not in set(used)]
        start = np.array(used + rest)
    else:
        start = np.random.default_rng(seed).permutation(m)
    t0 = time.perf_counter()
    bound = gilmore_lawler(prob) if m <= 128 else 0.0
    perm, _, iters = tabu_search(
        prob, start, time_limit=max(0.05, time_limit - (time.perf_counter() - t0)), seed=seed, stop=stop
    )
    mapping = [candidates[int(perm[r])] for r in range(n)]
    return mapping, bound, {"tabu_iterations": iters, "gilmore_lawler_bound": bound}
