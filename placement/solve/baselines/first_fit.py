"""The first-fit baseline: the job's slices in order onto hosts in cluster order, blind to the topology.

What a scheduler without topology awareness does (Slurm's topology/flat with ``--distribution=block``).
"""

from __future__ import annotations

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.solve.baselines.common import prepare

__all__ = ["first_fit"]


def first_fit(
    topology: Topology, state: ClusterState, job: Job, traffic: Traffic | None = None
) -> list[int] | None:
    """Slices (`placement.solve.baselines.common.job_slices`) in order onto hosts in cluster order, each host
    taking as many whole slices as its free devices hold; pins kept; None when the hosts cannot hold them.

    With single-rank slices this is ranks in order onto usable devices in cluster order. `traffic` defaults
    to the job's own (`placement.model.traffic.job_traffic`).
    """
    prep = prepare(topology, state, job, traffic if traffic is not None else job_traffic(job))
    if prep is None:
        return None
    plan: list[tuple[int, int]] = []
    left = len(prep.slices)
    for h in sorted(prep.free):
        if left <= 0:
            break
        n = min(prep.capacity(h), left)
        if n > 0:
            plan.append((h, n))
            left -= n
    return prep.fill(plan) if left <= 0 else None
