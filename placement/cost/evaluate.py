"""The cost model's entry point: `evaluate`, the modeled step of a mapping (the step model v3) and the single source of
truth for every number reported, with the v1 surrogate and the preference misses alongside.

`evaluate` returns `placement.cost.step.model_step` (phases, NCCL algorithms over shared links, compute; see
`placement.cost.step` and `placement.cost.collectives`) in a `placement.cost.report.CostReport`, with the solver's
linear surrogate (`placement.cost.surrogate.surrogate_seconds`) and the groups that leave their preferred level.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.cost.report import CostReport, check_mapping
from placement.cost.shared import background_for, cluster_seconds, contention
from placement.cost.step import model_step
from placement.cost.surrogate import surrogate_seconds
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic

__all__ = ["evaluate", "preference_misses"]


def evaluate(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    *,
    traffic: Traffic | None = None,
    check: bool = True,
    objective: str = "own",
) -> CostReport:
    """The modeled step of `job` when rank r runs on device `mapping[r]` (the single source of truth).

    Step model v3 (`placement.cost.step`): phases in sequence, concurrent groups in parallel on shared links, NCCL's
    algorithms (`placement.cost.collectives`) and compute (`placement.cost.compute`). `surrogate_seconds` carries the v1
    serial sum the solver optimizes. With `check` (the default) the mapping is first validated against every
    hard rule and refused with `InvalidMappingError` if it breaks any: a cost of an impossible placement is not
    a number to trust.

    With other traffic on the fabric (`ClusterState.background`, `ClusterState.link_load`) every phase shares its
    links with it (`placement.cost.shared`) and `CostReport.contention` says what it costs the job and what the job
    costs the running ones; `objective` ``cluster`` ranks the report by its step plus that harm
    (`CostReport.objective_seconds`).
    """
    traffic = traffic if traffic is not None else job_traffic(job)
    if check:
        check_mapping(topology, state, job, mapping, traffic)
    bg = background_for(topology, state, exclude=job.name)
    report = model_step(topology, state, job, mapping, traffic, background=bg)
    if bg is not None:
        alone = model_step(topology, state, job, mapping, traffic)
        report.contention = contention(topology, state, job, mapping, traffic, report, alone)
        if objective == "cluster":
            report.objective_seconds = cluster_seconds(
                report.step_seconds, report.contention.harm_gpu_s_per_s, len(mapping)
            )
    report.surrogate_seconds = surrogate_seconds(topology, state, mapping, traffic)
    report.preference_misses = preference_misses(topology, job, mapping, traffic)
    return report


def preference_misses(
    topology: Topology, job: Job, mapping: Sequence[int], traffic: Traffic
) -> dict[str, int]:
    """Groups and edges per label that leave the level the job prefers for that label (`Constraints.prefer`)."""
    prefer = job.constraints.prefer
    pref_levels = {lab: topology.level_index(lv) for lab, lv in prefer.items() if lv in topology.level_names}
    out: dict[str, int] = {}
    if not pref_levels:
        return out
    for g in traffic.groups:
        if (
            g.label in pref_levels
            and topology.group_lca_level([mapping[r] for r in g.members]) > pref_levels[g.label]
        ):
            out[g.label] = out.get(g.label, 0) + 1
    for e in traffic.edges:
        if (
            e.label in pref_levels
            and topology.lca_level(mapping[e.src], mapping[e.dst]) > pref_levels[e.label]
        ):
            out[e.label] = out.get(e.label, 0) + 1
    return out
