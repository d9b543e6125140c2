"""Placement strategies behind one interface: `place(topology, state, job, options) -> PlacementResult`.

Strategies: ``first-fit`` and ``topology-greedy`` (baselines, `placement.solve.baselines`) and ``cpsat``
(the optimizer, `placement.solve.cpsat`). Every result is re-scored by `placement.cost.evaluate` and checked by
`placement.validate`, and carries the baselines' cost on the same state.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = ["PlacementResult", "SolveOptions", "SolveStatus", "Strategy"]


class Strategy(StrEnum):
    """How to place."""

    FIRST_FIT = "first-fit"
    """Ranks in order onto free devices in cluster order: what a topology-blind scheduler does."""
    TOPOLOGY_GREEDY = "topology-greedy"
    """Kueue TAS / Slurm tree best fit: the tightest lowest domain that holds the job, ranks in order."""
    CPSAT = "cpsat"
    """The CP-SAT optimizer over a coarsened model, hinted by topology-greedy."""


class SolveStatus(StrEnum):
    """How good the returned answer is known to be."""

    OPTIMAL = "OPTIMAL"
    """Proven optimal for the model (gap 0)."""
    FEASIBLE = "FEASIBLE"
    """Valid, with a gap to the proven lower bound."""
    INFEASIBLE = "INFEASIBLE"
    """No mapping satisfies the hard rules; `explanation` says which rule binds and by how much."""


@dataclass
class SolveOptions:
    """Solver options. `stop` is polled: setting it ends the search with the best answer so far."""

    strategy: Strategy = Strategy.CPSAT
    time_limit_s: float = 10.0
    relative_gap: float = 0.0
    seed: int = 0
    workers: int = 2
    stop: threading.Event | None = None
    log: Callable[[str], None] | None = None
    baselines: bool = True


@dataclass
class PlacementResult:
    """The answer: status, mapping (device index per rank), modeled cost with breakdown, bound and baselines."""

    status: SolveStatus
    strategy: Strategy
    mapping: list[int] | None = None
    report: object | None = None  # placement.cost.CostReport
    lower_bound: float | None = None
    explanation: list[str] = field(default_factory=list)
    stats: dict[str, float | int | str] = field(default_factory=dict)
    baselines: dict[str, float | None] = field(default_factory=dict)

    @property
    def seconds(self) -> float | None:
        rep = self.report
        return None if rep is None else float(rep.seconds)  # type: ignore[attr-defined]

    @property
    def gap(self) -> float | None:
        """Relative gap (seconds - bound) / seconds; 0 when optimal; None without a bound."""
        s = self.seconds
        if s is None or self.lower_bound is None:
            return None
        if s <= 0:
            return 0.0
        return max(0.0, (s - self.lower_bound) / s)


from placement.solve.run import compare, place  # noqa: E402  (re-export; run imports the types above)

__all__ += ["compare", "place"]
