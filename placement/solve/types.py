"""The solver's vocabulary: strategies, statuses, options, the stop signal and the result every strategy returns.

Imported by every strategy module and by `placement.solve.run`; it imports nothing from the solver itself (only
the cost model's report type).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from placement.cost.report import CostReport

__all__ = [
    "PlacementResult",
    "SolveOptions",
    "SolveStatus",
    "StopEvent",
    "Strategy",
    "Verdict",
    "better",
    "gap_of",
    "key_better",
    "report_key",
]


class Strategy(StrEnum):
    """How to place. The first four are the schedulers users run today (`placement.solve.baselines`)."""

    FIRST_FIT = "first-fit"
    """Ranks in order onto free devices in cluster order: what a topology-blind scheduler does."""
    KUEUE_TAS = "kueue-tas"
    """Kueue Topology Aware Scheduling, BestFit profile: the tightest lowest domain that holds the job's slices."""
    SLURM_TREE = "slurm-tree"
    """Slurm topology/tree: the lowest switch that satisfies the request, best-fit leaf switches, then nodes."""
    SLURM_BLOCK = "slurm-block"
    """Slurm topology/block: best-fit blocks of the base block size (clusters with a block level)."""
    CPSAT = "cpsat"
    """The optimizer: every baseline, constructive heuristic and multilevel candidate, then CP-SAT on a coarsened
    model, its LNS and an evaluator-judged polish; the best of all by `report_key`."""
    TOPOLOGY_GREEDY = "topology-greedy"
    """Deprecated alias of ``kueue-tas`` (the strongest topology-level scheduler baseline)."""

    @property
    def canonical(self) -> Strategy:
        """The strategy this name stands for (``topology-greedy`` -> ``kueue-tas``)."""
        return Strategy.KUEUE_TAS if self is Strategy.TOPOLOGY_GREEDY else self


class SolveStatus(StrEnum):
    """How good the returned answer is known to be."""

    OPTIMAL = "OPTIMAL"
    """The evaluator's exposed communication and step are at their proven lower bounds (gap 0 within 1e-9
    relative): no valid mapping is better by `report_key`."""
    FEASIBLE = "FEASIBLE"
    """Valid, with a gap to the proven lower bound."""
    INFEASIBLE = "INFEASIBLE"
    """No mapping satisfies the hard rules; `explanation` says which rule binds and by how much."""
    WAIT = "WAIT"
    """A valid mapping exists now, but its step is more than the request's `max_slowdown` x the job's ideal:
    better to wait (`PlacementResult.verdict` says why and until when). Nothing is reserved."""


class StopEvent(threading.Event):
    """A `threading.Event` that also calls its listeners the moment it is set (CP-SAT's `stop_search`), so a
    cancelled or shut-down request stops the search without a polling delay."""

    def __init__(self) -> None:
        super().__init__()
        self._listeners: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)
        if self.is_set():
            listener()

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def set(self) -> None:
        super().set()
        with self._lock:
            listeners = list(self._listeners)
        for f in listeners:
            f()


@dataclass
class SolveOptions:
    """Solver options.

    - `time_limit_s` covers the whole `place` call (baselines, candidates, search, scoring, validation).
    - `deterministic`: the search budget is CP-SAT's deterministic time and a fixed number of neighbourhoods
      derived from `time_limit_s`, so the answer does not depend on machine load (wall time then may differ).
    - `stop`: setting it ends the search with the best answer so far (a `StopEvent` stops CP-SAT at once).
    - `log`: receives the solver's progress lines (CP-SAT's log and the neighbourhood search's).
    - `objective`: ``own`` ranks answers by the job's step; ``cluster`` by its step plus the harm it does to the
      jobs already running (`placement.cost.shared.cluster_seconds`; the same as ``own`` with no other traffic).
    """

    strategy: Strategy = Strategy.CPSAT
    time_limit_s: float = 10.0
    relative_gap: float = 0.0
    seed: int = 0
    workers: int = 2
    stop: threading.Event | None = None
    log: Callable[[str], None] | None = None
    baselines: bool = True
    deterministic: bool = False
    objective: str = "own"


@dataclass
class Verdict:
    """Place or wait (`placement.decide.wait`): the answer's step against the job's ideal step (the same job on
    the cluster with no occupancy), the bound asked for, and, when the answer waits, why and until when.

    `ideal_source`: ``empty cluster`` (the solver on the empty cluster) or ``the answer`` (the answer was faster
    than that short solve, so it is the best known ideal). `earliest_s`: when a placement within the bound is
    expected (the caller's clock, e.g. Unix seconds), None when unknown; `earliest_how` says how it was found."""

    slowdown: float
    ideal_step_s: float
    ideal_source: str
    max_slowdown: float | None = None
    reasons: list[str] = field(default_factory=list)
    earliest_s: float | None = None
    earliest_how: str = ""

    @property
    def wait(self) -> bool:
        return self.max_slowdown is not None and self.slowdown > self.max_slowdown * (1 + 1e-9)


@dataclass
class PlacementResult:
    """The answer: status, mapping (device index per rank), modeled cost with breakdown, bound and baselines.

    `comm_seconds` is the evaluator's exposed communication per step (`CostReport.comm_seconds`), the part a placement
    changes. `lower_bound` and `gap` are in the same number: a valid lower bound on the exposed communication of
    any valid mapping (`placement.solve.bound.comm_bound`); `stats["bound_source"]` names the phase and the
    argument that binds, `stats["stop_reason"]` why the search stopped (``gap_closed``, ``time_limit``,
    ``no_improvement``, ``launcher_blocks``: the free mapping closed its gap, the launcher's contiguous host
    blocks cost the gap left), `stats["surrogate_bound"]` the CP-SAT models' own bound on the v1 surrogate (not a gap).
    `baselines` holds the exposed communication of each scheduler baseline, heuristic and candidate on the same
    state (None: it found no valid mapping); `baseline_reports` their full reports.
    """

    status: SolveStatus
    strategy: Strategy
    mapping: list[int] | None = None
    report: CostReport | None = None
    lower_bound: float | None = None
    explanation: list[str] = field(default_factory=list)
    stats: dict[str, float | int | str] = field(default_factory=dict)
    baselines: dict[str, float | None] = field(default_factory=dict)
    baseline_reports: dict[str, CostReport] = field(default_factory=dict)
    verdict: Verdict | None = None
    """The slowdown against the job's ideal step and the place-or-wait decision (`placement.decide.wait`)."""

    @property
    def comm_seconds(self) -> float | None:
        """The evaluator's exposed communication per step (`CostReport.comm_seconds`); None without a mapping."""
        return None if self.report is None else float(self.report.comm_seconds)

    @property
    def gap(self) -> float | None:
        """Relative gap (exposed comm - bound) / exposed comm; 0 when optimal; None without a bound."""
        rep = self.report
        if rep is None or self.lower_bound is None:
            return None
        return gap_of(rep.comm_seconds, self.lower_bound)


def gap_of(value: float, bound: float) -> float:
    """(value - bound) / value, 0 when value is 0 (or below the bound by rounding)."""
    if value <= 0:
        return 0.0
    return max(0.0, (value - bound) / value)


def report_key(rep: CostReport) -> tuple[float, float, float]:
    """The one order every answer is chosen by: step seconds (with ``objective: cluster``, the step plus the harm
    to running jobs: `CostReport.ranked_seconds`), then exposed communication (the two differ through compute,
    the bubble and degraded devices), then the v1 surrogate as a tie-breaker."""
    return (rep.ranked_seconds, rep.comm_seconds, rep.surrogate_seconds)


def key_better(a: Sequence[float], b: Sequence[float]) -> bool:
    """`a` precedes `b` lexicographically, values within 1e-12 relative counted equal."""
    for x, y in zip(a, b, strict=True):
        eps = 1e-12 * max(1.0, abs(y)) if math.isfinite(y) else 0.0
        if x < y - eps:
            return True
        if x > y + eps:
            return False
    return False


def better(a: CostReport, b: CostReport) -> bool:
    """`a` beats `b` by `report_key`."""
    return key_better(report_key(a), report_key(b))
