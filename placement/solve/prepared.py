"""The request prepared once for every strategy: traffic, candidate devices, hosts, pins, units and the deadline,
plus the solver's surrogate objective with delta scoring (a move is priced by the groups and edges it touches).

Built by `placement.solve.run.place`; strategies read it and never re-derive what it holds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from placement.cost.evaluate import evaluate
from placement.cost.paths import group_path, pair_path
from placement.cost.report import CostReport
from placement.cost.shared import surrogate_state
from placement.cost.surrogate import group_seconds, p2p_seconds
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import validate
from placement.solve.construct import HostPool
from placement.solve.types import SolveOptions, report_key
from placement.solve.units import candidate_devices

__all__ = ["EVALUATOR_GUIDED_RANKS", "MovedMapping", "PreparedRequest", "SurrogateScore"]

EVALUATOR_GUIDED_RANKS = 8192


@dataclass
class PreparedRequest:
    """One placement request, prepared once. `deadline` is a `time.perf_counter()` value."""

    topology: Topology
    state: ClusterState
    job: Job
    traffic: Traffic
    options: SolveOptions
    candidates: list[int]  # every device a rank may use
    pool: HostPool  # the devices the coarse models place on (healthy ones first; see `_preferred`)
    pinned: dict[int, int]
    t0: float
    deadline: float
    rank_groups: list[list[int]] = field(default_factory=list)
    rank_edges: list[list[int]] = field(default_factory=list)
    reports: dict[tuple[int, ...], CostReport] = field(default_factory=dict)  # evaluator reports already made
    path_state: ClusterState | None = None
    """The state the surrogate prices paths on: other jobs' traffic as uplink slowdowns
    (`placement.cost.shared.surrogate_state`); None: `state`."""

    @staticmethod
    def prepare(
        topology: Topology,
        state: ClusterState,
        job: Job,
        options: SolveOptions,
        *,
        traffic: Traffic | None = None,
        t0: float | None = None,
        candidates: list[int] | None = None,
    ) -> PreparedRequest:
        start = time.perf_counter() if t0 is None else t0
        traffic = traffic if traffic is not None else job_traffic(job)
        cands = list(candidates) if candidates is not None else candidate_devices(topology, state, job)
        pinned: dict[int, int] = {}
        for r, dev_id in job.constraints.pins.items():
            di = topology.device_index(dev_id)
            if di is not None:
                pinned[r] = di
        rank_groups: list[list[int]] = [[] for _ in range(job.ranks)]
        for gi, g in enumerate(traffic.groups):
            for r in g.members:
                rank_groups[r].append(gi)
        rank_edges: list[list[int]] = [[] for _ in range(job.ranks)]
        for ei, e in enumerate(traffic.edges):
            rank_edges[e.src].append(ei)
            if e.dst != e.src:
                rank_edges[e.dst].append(ei)
        return PreparedRequest(
            topology,
            state,
            job,
            traffic,
            options,
            cands,
            HostPool.of(topology, _preferred(topology, state, job, cands, pinned)),
            pinned,
            start,
            start + options.time_limit_s,
            rank_groups,
            rank_edges,
            path_state=surrogate_state(topology, state, job.name) if state.has_background else None,
        )

    @property
    def priced_state(self) -> ClusterState:
        """What the surrogate prices paths on (`path_state`, else `state`)."""
        return self.state if self.path_state is None else self.path_state

    @property
    def constrained(self) -> bool:
        """Pins or spread rules: the coarse models must keep every host as a slot."""
        return bool(self.pinned or self.job.constraints.spread)

    def remaining(self) -> float:
        """Seconds left; with deterministic options, the whole limit always (budgets then never read the clock)."""
        if self.options.deterministic:
            return self.options.time_limit_s
        return self.deadline - time.perf_counter()

    def until(self, share: float) -> float:
        """A wall-clock deadline `share` of the remaining time from now (never, with deterministic options)."""
        if self.options.deterministic:
            return math.inf
        return time.perf_counter() + share * self.remaining()

    def stopped(self) -> bool:
        stop = self.options.stop
        return stop is not None and stop.is_set()

    def surrogate(self, mapping: Sequence[int]) -> float:
        """The solver's objective (`placement.cost.surrogate.surrogate_seconds`) of a full mapping."""
        return SurrogateScore(self, mapping).total

    @property
    def evaluator_guided(self) -> bool:
        """Small enough to ask the evaluator about every candidate and every accepted move (it is O(ranks))."""
        return self.job.ranks <= EVALUATOR_GUIDED_RANKS

    def rank(self, mapping: Sequence[int]) -> tuple[float, float, float]:
        """What `place` picks by (`placement.solve.types.report_key`): the evaluator's step seconds, exposed
        communication, then the surrogate (reports are kept, so the answer is never evaluated twice)."""
        key = tuple(mapping)
        rep = self.reports.get(key)
        if rep is None:
            rep = evaluate(
                self.topology,
                self.state,
                self.job,
                mapping,
                traffic=self.traffic,
                check=False,
                objective=self.options.objective,
            )
            if len(self.reports) < 64:
                self.reports[key] = rep
        return report_key(rep)

    def valid(self, mapping: Sequence[int] | None) -> bool:
        return mapping is not None and not validate(
            self.topology, self.state, self.job, mapping, traffic=self.traffic
        )


def _preferred(
    topology: Topology, state: ClusterState, job: Job, candidates: list[int], pinned: dict[int, int]
) -> list[int]:
    """The devices the coarse models place on: degraded devices, and hosts behind a degraded NIC path, are left
    out while the healthy ones hold the job (they stay candidates for the bound, the exact model and pins).
    The unit models price hosts, not devices, so they could not otherwise tell a 1000x slower GPU apart."""
    slow_hosts = {up.domain for up, f in state.uplink_slowdown.items() if up.level == 0 and f > 1.0}
    keep = set(pinned.values())
    avoid = {
        d
        for d in candidates
        if d not in keep
        and (state.device_slowdown.get(d, 1.0) > 1.0 or topology.devices[d].host_index in slow_hosts)
    }
    if not avoid or len(candidates) - len(avoid) < job.ranks:
        return candidates
    return [d for d in candidates if d not in avoid]


class SurrogateScore:
    """The surrogate of one mapping, kept per group and per edge so that a move is scored by its delta."""

    def __init__(self, request: PreparedRequest, mapping: Sequence[int]) -> None:
        self.p = request
        self.mapping = list(mapping)
        self.group_cost = [self._group(gi) for gi in range(len(request.traffic.groups))]
        self.edge_cost = [self._edge(ei) for ei in range(len(request.traffic.edges))]
        self.total = sum(self.group_cost) + sum(self.edge_cost)

    def _group(self, gi: int, mapping: Sequence[int] | Mapping[int, int] | None = None) -> float:
        g = self.p.traffic.groups[gi]
        mp = self.mapping if mapping is None else mapping
        return group_seconds(g, group_path(self.p.topology, self.p.priced_state, [mp[r] for r in g.members]))

    def _edge(self, ei: int, mapping: Sequence[int] | Mapping[int, int] | None = None) -> float:
        e = self.p.traffic.edges[ei]
        mp = self.mapping if mapping is None else mapping
        return p2p_seconds(
            e.bytes, e.count, e.exposed, pair_path(self.p.topology, self.p.priced_state, mp[e.src], mp[e.dst])
        )

    def delta(self, moves: Mapping[int, int]) -> tuple[float, dict[int, float], dict[int, float]]:
        """Change of the total if rank r moved to device moves[r]; with the new costs of the touched terms."""
        view = MovedMapping(self.mapping, moves)
        groups = {gi for r in moves for gi in self.p.rank_groups[r]}
        edges = {ei for r in moves for ei in self.p.rank_edges[r]}
        new_g = {gi: self._group(gi, view) for gi in groups}
        new_e = {ei: self._edge(ei, view) for ei in edges}
        d = sum(v - self.group_cost[gi] for gi, v in new_g.items()) + sum(
            v - self.edge_cost[ei] for ei, v in new_e.items()
        )
        return d, new_g, new_e

    def apply(self, moves: Mapping[int, int], new_g: Mapping[int, float], new_e: Mapping[int, float]) -> None:
        for r, d in moves.items():
            self.mapping[r] = d
        for gi, v in new_g.items():
            self.total += v - self.group_cost[gi]
            self.group_cost[gi] = v
        for ei, v in new_e.items():
            self.total += v - self.edge_cost[ei]
            self.edge_cost[ei] = v


class MovedMapping(Mapping[int, int]):
    """A mapping with a few ranks moved, without copying it."""

    def __init__(self, base: Sequence[int], moves: Mapping[int, int]) -> None:
        self.base, self.moves = base, moves

    def __getitem__(self, r: int) -> int:
        return self.moves.get(r, self.base[r])

    def __len__(self) -> int:
        return len(self.base)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(len(self.base)))
