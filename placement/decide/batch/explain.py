"""A batch answer as outcomes per job: why each job left out is not admitted (capacity, a rule such as a balance
rule no free domains can meet, or a conflict with named admitted jobs, with numbers), and the joint validator every
batch answer passes.

Used by `placement.decide.batch.joint`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from placement.cost.report import CostReport
from placement.decide.balance import balance_reasons
from placement.decide.batch.types import BatchPlan, JobOutcome
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.model.validate import validate
from placement.solve.baselines import first_fit, kueue_tas
from placement.solve.run import explain_infeasible
from placement.solve.units import candidate_devices

__all__ = ["Explainer", "classify", "pre_checks", "validate_batch"]

CAPACITY, RULE, CONFLICT = "capacity", "rule", "conflict"


def classify(reasons: Sequence[str]) -> str:
    """``capacity`` when a reason counts free devices or whole domains, else ``rule`` (pins, spread, kind,
    balance)."""
    for r in reasons:
        if r.startswith("the job needs ") or (" requires " in r and " free" in r):
            return CAPACITY
    return RULE


def pre_checks(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[str]:
    """Why the job cannot be placed on `state`, from counts: `explain_infeasible`'s reasons, then, when there
    are none, the balance rule's (`balance_reasons`: no balanced split of its slices fits the free devices)."""
    return explain_infeasible(topology, state, job, traffic) or balance_reasons(topology, state, job)


def validate_batch(
    topology: Topology,
    state: ClusterState,
    jobs: Sequence[Job],
    mappings: Mapping[int, Sequence[int] | None],
    traffic: Sequence[Traffic] | None = None,
) -> list[str]:
    """Every rule a joint answer breaks: each mapping against the state plus the other jobs' devices, and no
    device in two jobs. `mappings`: job index -> mapping (None entries are ignored); `traffic`: each job's
    `job_traffic`, when the caller has it."""
    out: list[str] = []
    owner: dict[int, int] = {}
    for j, m in sorted(mappings.items()):
        if m is None:
            continue
        for d in m:
            if d in owner and owner[d] != j:
                dev = topology.devices[d].id if 0 <= d < topology.num_devices else str(d)
                out.append(f"device {dev} is in jobs {jobs[owner[d]].name!r} and {jobs[j].name!r}")
            owner.setdefault(d, j)
    for j, m in sorted(mappings.items()):
        if m is None:
            continue
        occ = dict(state.occupied)
        for k, mk in mappings.items():
            if k != j and mk is not None:
                for d in mk:
                    occ[d] = jobs[k].name
        tr = None if traffic is None else traffic[j]
        out.extend(
            f"{jobs[j].name}: {v}"
            for v in validate(topology, replace(state, occupied=occ), jobs[j], m, traffic=tr)
        )
    return out


class Explainer:
    """Builds `BatchPlan`s: admitted jobs with their mapping and report, the others with their reason."""

    def __init__(
        self,
        topology: Topology,
        state: ClusterState,
        jobs: Sequence[Job],
        weights: Sequence[float],
        priorities: Sequence[float],
        traffic: Sequence[Traffic],
        solo: Sequence[list[str]],
    ) -> None:
        self.topology, self.state, self.jobs = topology, state, list(jobs)
        self.weights, self.priorities, self.traffic, self.solo = (
            list(weights),
            list(priorities),
            list(traffic),
            list(solo),
        )
        self._alone: dict[int, list[int] | None] = {}

    def alone(self, j: int) -> list[int] | None:
        """Where the job would go on the base state alone (kueue-tas, else first-fit): the devices it contends for."""
        if j not in self._alone:
            job, t = self.jobs[j], self.traffic[j]
            m = kueue_tas(self.topology, self.state, job, t) or first_fit(self.topology, self.state, job, t)
            self._alone[j] = m
        return self._alone[j]

    def plan(self, strategy: str, assign: Mapping[int, tuple[list[int], CostReport]]) -> BatchPlan:
        outcomes: list[JobOutcome] = []
        for j, job in enumerate(self.jobs):
            if j in assign:
                m, rep = assign[j]
                outcomes.append(JobOutcome(j, job.name, True, list(m), rep))
            elif self.solo[j]:
                outcomes.append(
                    JobOutcome(
                        j, job.name, False, reason=classify(self.solo[j]), explanation=list(self.solo[j])
                    )
                )
            else:
                outcomes.append(self._conflict(j, assign))
        return BatchPlan(strategy, outcomes, self.weights)

    def _conflict(self, j: int, assign: Mapping[int, tuple[list[int], CostReport]]) -> JobOutcome:
        job = self.jobs[j]
        owner: dict[int, int] = {d: k for k, (m, _) in assign.items() for d in m}
        occ = dict(self.state.occupied)
        for d, k in owner.items():
            occ[d] = self.jobs[k].name
        left = replace(self.state, occupied=occ)
        cands = candidate_devices(self.topology, left, job)
        mine = self.alone(j)
        held = Counter(owner[d] for d in (mine or []) if d in owner)
        if not held:  # no placement alone to compare with: every admitted job on one of its candidate devices
            base = set(candidate_devices(self.topology, self.state, job))
            held = Counter(owner[d] for d in base if d in owner)
        blockers = sorted(held, key=lambda k: (-self.priorities[k], -self.weights[k], k))
        higher = bool(blockers) and all(self.priorities[k] > self.priorities[j] for k in blockers)
        kind = f" {job.device_kind}" if job.device_kind else ""
        names = ", ".join(
            f"{self.jobs[k].name} (priority {self.priorities[k]:g}, weight {self.weights[k]:g}, "
            f"{held[k]} device(s))"
            for k in blockers[:6]
        )
        more = f" and {len(blockers) - 6} more" if len(blockers) > 6 else ""
        who = "higher-priority job(s)" if higher else "admitted job(s)"
        lines = [
            f"fits alone, but conflicts with {who} {names}{more}"
            + (f"; its placement alone would use {sum(held.values())} of their devices" if mine else "")
        ]
        after = pre_checks(self.topology, left, job, self.traffic[j])
        if after:
            lines += [f"next to the admitted jobs: {r}" for r in after]
        else:
            lines.append(
                f"next to the admitted jobs {len(cands)}{kind} candidate devices are free and it needs "
                f"{job.ranks}, but no valid placement on them was found"
            )
        if not higher and blockers:
            lines.append(
                f"they are kept over it (weight {self.weights[j]:g}, priority {self.priorities[j]:g}): "
                "the answer ranks admitted weight first, then weighted step seconds"
            )
        return JobOutcome(
            j,
            job.name,
            False,
            reason=CONFLICT,
            explanation=lines,
            conflicts_with=[self.jobs[k].name for k in blockers],
        )
