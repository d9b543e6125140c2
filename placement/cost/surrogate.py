"""The v1 cost model, kept as the solver's linear surrogate: each group and edge priced alone on its slowest path
(`placement.cost.paths`) and summed (`surrogate_seconds`, `surrogate_report`).

It ranks mappings like the evaluator (`placement.cost.evaluate`) where one group's placement decides, but adds
concurrent groups up: not a step time, a ranking, and additive, so a move is scored by the terms it touches.

v1 model (alpha-beta): one transfer of S bytes over a path of bandwidth W (GB/s) and latency a (µs) costs
``a + S/W``. A collective over n members costs ``steps * a + volume / W`` where (ring algorithms)
all-reduce moves ``2(n-1)/n * S`` per member in ``2(n-1)`` steps and all-gather, reduce-scatter and
all-to-all move ``(n-1)/n * S`` in ``n-1`` steps. W and a are those of the slowest path the group spans
(`placement.cost.paths.group_path`). The result is multiplied by the count per step and by the exposed
fraction. Failed links that a group needs make the mapping invalid (`placement.model.validate`), never merely
expensive.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.cost.paths import Path, group_path, pair_path
from placement.cost.report import CostReport, check_mapping
from placement.model.job import CollectiveKind, Group, Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic

__all__ = ["collective_seconds", "group_seconds", "p2p_seconds", "surrogate_report", "surrogate_seconds"]


def collective_seconds(
    kind: CollectiveKind, n: int, size: float, count: float, exposed: float, path: Path
) -> float:
    """Seconds per step of `count` collectives of `size` bytes over `n` members on `path`."""
    if n <= 1 or count == 0 or exposed == 0:
        return 0.0
    if kind is CollectiveKind.ALL_REDUCE:
        volume, steps = 2.0 * (n - 1) / n * size, 2 * (n - 1)
    else:
        volume, steps = (n - 1) / n * size, n - 1
    one = steps * path.latency_us * 1e-6 + volume / (path.bandwidth_gbps * 1e9)
    return count * exposed * one


def p2p_seconds(size: float, count: float, exposed: float, path: Path) -> float:
    """Seconds per step of `count` point-to-point transfers of `size` bytes on `path`."""
    if count == 0 or exposed == 0:
        return 0.0
    return count * exposed * (path.latency_us * 1e-6 + size / (path.bandwidth_gbps * 1e9))


def group_seconds(group: Group, path: Path) -> float:
    return collective_seconds(group.kind, len(group.members), group.bytes, group.count, group.exposed, path)


def surrogate_seconds(
    topology: Topology, state: ClusterState, mapping: Sequence[int], traffic: Traffic
) -> float:
    """The solver's linear objective (v1): the serial sum of every group's and edge's cost on its slowest path.

    Not a step time (concurrent groups are added up); it ranks mappings the way the CP-SAT level model does,
    and it is additive, so a move is scored by the terms it touches.
    """
    total = 0.0
    for g in traffic.groups:
        total += group_seconds(g, group_path(topology, state, [mapping[r] for r in g.members]))
    for e in traffic.edges:
        total += p2p_seconds(
            e.bytes, e.count, e.exposed, pair_path(topology, state, mapping[e.src], mapping[e.dst])
        )
    return total


def surrogate_report(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    *,
    traffic: Traffic | None = None,
    check: bool = True,
) -> CostReport:
    """The v1 model as a report: every group and edge priced alone and summed (the solver's surrogate)."""
    traffic = traffic if traffic is not None else job_traffic(job)
    if check:
        check_mapping(topology, state, job, mapping, traffic)
    report = CostReport()
    prefer = job.constraints.prefer
    pref_levels = {lab: topology.level_index(lv) for lab, lv in prefer.items() if lv in topology.level_names}
    for g in traffic.groups:
        devs = [mapping[r] for r in g.members]
        path = group_path(topology, state, devs)
        report.add(g.label, path.tier, group_seconds(g, path))
        if g.label in pref_levels and path.level > pref_levels[g.label]:
            report.preference_misses[g.label] = report.preference_misses.get(g.label, 0) + 1
    for e in traffic.edges:
        path = pair_path(topology, state, mapping[e.src], mapping[e.dst])
        report.add(e.label, path.tier, p2p_seconds(e.bytes, e.count, e.exposed, path))
        if e.label in pref_levels and path.level > pref_levels[e.label]:
            report.preference_misses[e.label] = report.preference_misses.get(e.label, 0) + 1
    report.comm_seconds_total = report.comm_seconds
    report.step_seconds = report.comm_seconds
    report.surrogate_seconds = report.comm_seconds
    return report
