"""What the cost model returns or refuses with: the modeled step of a mapping (`CostReport`, one `PhaseCost` per
phase) and `InvalidMappingError`, raised by `check_mapping` for a mapping that breaks a hard rule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from placement.errors import PlacementError
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.model.validate import validate

__all__ = ["Contention", "CostReport", "InvalidMappingError", "JobHarm", "PhaseCost", "check_mapping"]


class InvalidMappingError(PlacementError):
    """`evaluate` refuses a mapping that breaks a hard rule; `violations` lists every broken rule."""

    def __init__(self, violations: Sequence[object]) -> None:
        self.violations = list(violations)
        lines = "".join(f"\n  - {v}" for v in self.violations)
        super().__init__(f"the mapping breaks {len(self.violations)} hard rule(s):{lines}")


@dataclass
class PhaseCost:
    """One phase of a step (TP collectives, CP/EP exchanges, PP sends, DP gradient sync, or an explicit label).

    `seconds` is the phase's wall time per step (its concurrent groups run in parallel; the slowest after
    contention decides), `exposed_seconds` what is left after overlap with compute. `critical` names the
    slowest group, `tier` its bottleneck tier and `algorithm` the collective algorithm chosen for it.
    """

    name: str
    seconds: float
    exposed_seconds: float
    tier: str
    critical: str = ""
    algorithm: str = ""

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "exposed_seconds": self.exposed_seconds,
            "tier": self.tier,
            "critical": self.critical,
            "algorithm": self.algorithm,
        }


@dataclass
class JobHarm:
    """What a new job does to one running job it shares a link with (`placement.cost.shared`): the running job's
    step among the other traffic without the new job, and the seconds per step the new job adds to it."""

    job_id: str
    gpus: int
    step_seconds: float
    added_seconds: float

    def to_dict(self) -> dict[str, object]:
        return {
            "job": self.job_id,
            "gpus": self.gpus,
            "step_seconds": self.step_seconds,
            "added_seconds": self.added_seconds,
        }


@dataclass
class Contention:
    """The shared fabric's part of a step (`placement.cost.shared`), present only when other traffic is on it.

    - `seconds`: the part of the job's own step due to the background (its step minus `alone_step_seconds`);
    - `harm`: per running job sharing a link, the seconds per step the new job adds to it;
    - `harm_gpu_s_per_s`: GPU-seconds per second the running jobs lose, ``sum gpus * added / step``.
    """

    seconds: float
    alone_step_seconds: float
    harm: list[JobHarm] = field(default_factory=list)
    harm_gpu_s_per_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            "contention_seconds": self.seconds,
            "alone_step_seconds": self.alone_step_seconds,
            "harm_gpu_s_per_s": self.harm_gpu_s_per_s,
            "harm": [h.to_dict() for h in self.harm],
        }


@dataclass
class CostReport:
    """A modeled step under a mapping: step time, exposed and total communication, compute, and where it goes.

    - `step_seconds`: compute + pipeline bubble + exposed communication (for jobs with no model shape:
      exposed communication alone);
    - `compute_seconds`: the layers' compute and the optimizer step after the gradient reduce;
    - `straggler_seconds`: the wait for the slowest rank (`placement.cost.step.straggler_seconds`);
    - `comm_seconds`: exposed communication per step (phases in sequence, concurrent groups in parallel);
    - `comm_seconds_total`: communication per step before overlap;
    - `by_label` / `by_tier` / `by_label_tier`: exposed communication per phase label, per bottleneck tier;
    - `surrogate_seconds`: the serial sum of every group's and edge's v1 cost, the solver's linear objective
      (`surrogate_report`); not a time, a ranking;
    - `contention`: with other traffic on the fabric, the part of the step due to it and the harm to running jobs;
    - `objective_seconds`: what answers are ranked by (`placement.solve.types.report_key`): the step, or with
      ``objective: cluster`` the step plus the harm (`placement.cost.shared.cluster_seconds`).

    `seconds` is the deprecated v1 name; it now means `comm_seconds`, the part a placement changes.
    """

    step_seconds: float = 0.0
    comm_seconds: float = 0.0
    comm_seconds_total: float = 0.0
    compute_seconds: float | None = None
    bubble_seconds: float | None = None
    straggler_seconds: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    phases: list[PhaseCost] = field(default_factory=list)
    by_label: dict[str, float] = field(default_factory=dict)
    by_tier: dict[str, float] = field(default_factory=dict)
    by_label_tier: dict[tuple[str, str], float] = field(default_factory=dict)
    preference_misses: dict[str, int] = field(default_factory=dict)
    surrogate_seconds: float = 0.0
    contention: Contention | None = None
    objective_seconds: float | None = None

    @property
    def ranked_seconds(self) -> float:
        """The objective answers are ranked by: `objective_seconds`, or the step when not set."""
        return self.step_seconds if self.objective_seconds is None else self.objective_seconds

    @property
    def seconds(self) -> float:
        """Deprecated: exposed communication seconds per step (`comm_seconds`)."""
        return self.comm_seconds

    def add(self, label: str, tier: str, seconds: float) -> None:
        """Add exposed communication seconds of `label` bottlenecked on `tier`."""
        self.comm_seconds += seconds
        self.by_label[label] = self.by_label.get(label, 0.0) + seconds
        self.by_tier[tier] = self.by_tier.get(tier, 0.0) + seconds
        key = (label, tier)
        self.by_label_tier[key] = self.by_label_tier.get(key, 0.0) + seconds

    def to_dict(self) -> dict[str, object]:
        out = self._to_dict()
        if self.contention is not None:
            out["contention"] = self.contention.to_dict()
        if self.objective_seconds is not None:
            out["objective_seconds"] = self.objective_seconds
        return out

    def _to_dict(self) -> dict[str, object]:
        return {
            "step_seconds": self.step_seconds,
            "comm_seconds": self.comm_seconds,
            "comm_seconds_total": self.comm_seconds_total,
            "compute_seconds": self.compute_seconds,
            "bubble_seconds": self.bubble_seconds,
            "straggler_seconds": self.straggler_seconds,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "seconds_per_step": self.comm_seconds,  # deprecated v1 name of comm_seconds
            "surrogate_seconds": self.surrogate_seconds,
            "phases": [p.to_dict() for p in self.phases],
            "by_label": dict(sorted(self.by_label.items())),
            "by_tier": dict(sorted(self.by_tier.items())),
            "by_label_tier": [
                {"label": k[0], "tier": k[1], "seconds": v} for k, v in sorted(self.by_label_tier.items())
            ],
            "preference_misses": dict(sorted(self.preference_misses.items())),
        }


def check_mapping(
    topology: Topology, state: ClusterState, job: Job, mapping: Sequence[int], traffic: Traffic
) -> None:
    """Refuse `mapping` with `InvalidMappingError` (every broken rule) unless `placement.model.validate` accepts it:
    a cost of an impossible placement is not a number to trust."""
    violations = validate(topology, state, job, mapping, traffic=traffic)
    if violations:
        raise InvalidMappingError(violations)
