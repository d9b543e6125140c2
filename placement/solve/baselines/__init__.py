"""The scheduler baselines: what the schedulers users run today would do with the same job on the same state.

Each baseline is ``(topology, state, job, traffic) -> list[int] | None`` (None: that scheduler would not admit
or cannot place the job, or keeps it pending). All honour occupancy, failures, device kind, exclusions and
pins; they ignore traffic volumes and spread rules, as the schedulers do, and keep slices whole: a slice is
the job's TP group or the unit it requires on one host, whatever the rank order (`job_slices`).

- ``first-fit``: `first_fit`, topology-blind, slices in host order.
- ``kueue-tas``: `kueue_tas`, Kueue Topology Aware Scheduling, BestFit profile.
- ``slurm-tree``: `slurm_tree`, Slurm's topology/tree plugin (22.05, checked against a live Slurm by
  tests/test_baselines_slurm_golden.py); exactly the ``--nodes`` of `SlurmRequest`, or pending.
- ``slurm-block``: `slurm_block`, Slurm's topology/block plugin (None without a ``block`` level).

`topology_greedy` is kept as an alias of `kueue_tas` for callers of the old name.
"""

from __future__ import annotations

from collections.abc import Callable

from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic
from placement.solve.baselines.common import candidates_of, job_slices, prepare, slice_size
from placement.solve.baselines.first_fit import first_fit
from placement.solve.baselines.kueue_tas import kueue_tas
from placement.solve.baselines.slurm_block import BLOCK_LEVEL, slurm_block
from placement.solve.baselines.slurm_select import SlurmRequest, slurm_request
from placement.solve.baselines.slurm_tree import slurm_tree

__all__ = [
    "BASELINES",
    "Baseline",
    "SlurmRequest",
    "first_fit",
    "job_slices",
    "kueue_tas",
    "slice_size",
    "slurm_block",
    "slurm_request",
    "slurm_tree",
    "topology_greedy",
    "why_none",
]

Baseline = Callable[[Topology, ClusterState, Job, Traffic], list[int] | None]

BASELINES: dict[str, Baseline] = {
    "first-fit": first_fit,
    "kueue-tas": kueue_tas,
    "slurm-tree": slurm_tree,
    "slurm-block": slurm_block,
}
"""The baselines by strategy name, in the order results list them."""


def topology_greedy(topology: Topology, state: ClusterState, job: Job, traffic: Traffic) -> list[int] | None:
    """Alias of `kueue_tas`, kept for callers of the old ``topology-greedy`` name (its single-rank best fit is
    retired: it split TP groups over host fragments, which Kueue and Slurm do not do when a job asks for pods or
    tasks of a TP group's size)."""
    return kueue_tas(topology, state, job, traffic)


def why_none(topology: Topology, state: ClusterState, job: Job, traffic: Traffic, name: str) -> str:
    """Why the baseline `name` (or a heuristic) found no mapping for the job on this state, in a few words: the
    free devices, a pin, the level it needs, or how the scheduler would keep the job pending."""
    if name == "slurm-block" and BLOCK_LEVEL not in topology.level_names:  # first: the cheapest, and common
        return f"no {BLOCK_LEVEL} level in the cluster (Slurm's topology/block needs one)"
    cands = candidates_of(topology, state, job)
    if len(cands) < job.ranks:
        return f"only {len(cands)} usable free devices for {job.ranks} ranks"
    prep = prepare(topology, state, job, traffic)
    if prep is None:
        return "a pinned rank's device is not usable, or its required unit does not fit that host"
    size = prep.size
    if name in ("slurm-tree", "slurm-block"):
        req = slurm_request(topology, job, prep)
        if req is None:
            return f"no host holds a slice of {size} devices"
        return (
            f"Slurm keeps it pending: {' '.join(req.options)} finds no {req.nodes} node(s) with room "
            f"under one {'block' if name == 'slurm-block' else 'switch tree'}"
        )
    if name == "kueue-tas":
        return f"Kueue keeps it pending: no domain has room for its slices of {size} devices"
    if name == "first-fit":
        return f"its slices of {size} devices do not fit the free devices host by host"
    return "its layout does not apply to this job's shape or this cluster"
