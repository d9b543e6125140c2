"""The first-fit baseline: ranks in order onto usable devices in cluster order, blind to the topology.

What a scheduler without topology awareness does (Slurm's topology/flat with ``--distribution=block``).
"""

from __future__ import annotations

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.baselines.common import apply_pins
from placement.solve.units import candidate_devices

__all__ = ["first_fit"]


def first_fit(
    topology: Topology, state: ClusterState, job: Job, traffic: Traffic | None = None
) -> list[int] | None:
    """Ranks in order onto usable devices in cluster order; pins kept; None when there are too few devices.

    `traffic` is accepted for the uniform baseline signature and not used.
    """
    cands = candidate_devices(topology, state, job)
    pins = apply_pins(topology, job, cands)
    if pins is None:
        return None
    pinned, rest = pins
    free_ranks = [r for r in range(job.ranks) if r not in pinned]
    if len(rest) < len(free_ranks):
        return None
    out = [-1] * job.ranks
    for r, d in pinned.items():
        out[r] = d
    for r, d in zip(free_ranks, rest, strict=False):
        out[r] = d
    return out
