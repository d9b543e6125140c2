"""The data of a batch: a queued job (`BatchJob`), one job's outcome in an answer (`JobOutcome`), an answer
(`BatchPlan`), the result with its baselines (`BatchResult`), and `Assign`, the placements a search holds."""

from __future__ import annotations

from dataclasses import dataclass, field

from placement.cost.report import CostReport
from placement.cost.serving import ServingReport
from placement.model.job import Job
from placement.model.serving import ServingJob

__all__ = ["Assign", "BatchJob", "BatchPlan", "BatchResult", "JobOutcome"]

Assign = dict[int, tuple[list[int], CostReport]]
"""Job index -> (its mapping, its report): the admitted jobs of an answer being built."""


@dataclass(frozen=True)
class BatchJob:
    """A queued job: `weight` (> 0) counts toward the admitted weight and multiplies its step seconds;
    `priority` orders the priority baseline and decides which job wins a conflict between equal answers.

    A serving deployment gives `serving` and, as `job`, its explicit job
    (`placement.solve.serving.serving_traffic_job`: ranks, groups and rules); it is placed by the serving
    objective and its step seconds are its time per output token (`placement.decide.serving`)."""

    job: Job
    weight: float = 1.0
    priority: float = 0.0
    serving: ServingJob | None = None


@dataclass
class JobOutcome:
    """One job in one answer: its mapping and modeled step, or why it is not admitted.

    `reason` is ``capacity`` (not enough free devices or whole domains on the state), ``rule`` (its own rules
    cannot hold on the state) or ``conflict`` (it fits alone, but not next to the admitted jobs
    `conflicts_with`); `explanation` gives the numbers. An admitted serving job carries its serving report
    (`serving`: TTFT, TPOT, tokens/s); its `report` is its decode step (`step_seconds` = TPOT)."""

    index: int
    name: str
    admitted: bool
    mapping: list[int] | None = None
    report: CostReport | None = None
    reason: str = ""
    explanation: list[str] = field(default_factory=list)
    conflicts_with: list[str] = field(default_factory=list)
    serving: ServingReport | None = None


@dataclass
class BatchPlan:
    """One answer (the joint one or a baseline): an outcome per job, in queue order."""

    strategy: str
    outcomes: list[JobOutcome]
    weights: list[float]

    @property
    def admitted(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.admitted]

    @property
    def admitted_weight(self) -> float:
        return sum(self.weights[o.index] for o in self.admitted)

    @property
    def weighted_step_seconds(self) -> float:
        return sum(
            self.weights[o.index] * o.report.step_seconds for o in self.admitted if o.report is not None
        )

    @property
    def weighted_comm_seconds(self) -> float:
        return sum(
            self.weights[o.index] * o.report.comm_seconds for o in self.admitted if o.report is not None
        )

    def key(self) -> tuple[float, float, float]:
        """Smaller is better: more admitted weight, then fewer weighted step seconds, then less communication."""
        return (-round(self.admitted_weight, 9), self.weighted_step_seconds, self.weighted_comm_seconds)


@dataclass
class BatchResult:
    """The answer (`plan`, never worse by `BatchPlan.key` than either baseline), the baselines, and the knapsack's
    bound on the admitted weight (`admission_optimal`: the answer reaches it)."""

    plan: BatchPlan
    baselines: dict[str, BatchPlan]
    weight_bound: float | None
    admission_optimal: bool
    stats: dict[str, float | int | str] = field(default_factory=dict)
