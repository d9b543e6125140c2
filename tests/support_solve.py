"""Shared helpers of the solver tests: fragmented states, rank orders, the evaluator's key of a mapping, every
baseline's and heuristic's mapping computed outside `place`, and the brute-force optimum of tiny cases."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.cost.surrogate import surrogate_seconds
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import validate
from placement.sim.scenarios import (
    explicit_twin,
    p2p_ring_job,
)
from placement.solve.baselines import BASELINES
from placement.solve.heuristics import HEURISTICS

ORDERS = ("tp-cp-ep-dp-pp", "dp-tp-pp-cp-ep", "pp-dp-tp-cp-ep", "tp-pp-dp-cp-ep")

FORM = {"structured": lambda j: j, "explicit": explicit_twin, "p2p-ring": p2p_ring_job}
"""The forms of one job: its parallel spec, the explicit groups and edges it stands for, and a ring of edges."""


def fragmented(topology: Topology, busy: float, seed: int) -> ClusterState:
    """About `busy` of the devices taken by other jobs: each busy node wholly busy or 1..n-1 of its GPUs (half
    and half), the fragments a busy cluster leaves."""
    rng = random.Random(seed)
    occupied: dict[int, str] = {}
    hosts = list(range(len(topology.host_names)))
    rng.shuffle(hosts)
    target = round(busy * topology.num_devices)
    for i, h in enumerate(hosts):
        if len(occupied) >= target:
            break
        devs = list(topology.devices_in_domain[0][h])
        k = len(devs) if i % 2 == 0 else rng.randint(1, len(devs) - 1)
        for d in rng.sample(devs, min(k, target - len(occupied))):
            occupied[d] = f"other-{h}"
    return ClusterState(occupied=occupied)


def with_order(job: Job, order: str) -> Job:
    assert job.parallel is not None
    return dataclasses.replace(job, parallel=dataclasses.replace(job.parallel, order=order))


def key(topology: Topology, state: ClusterState, job: Job, mapping: list[int]) -> tuple[float, float]:
    rep = evaluate(topology, state, job, mapping)
    return rep.step_seconds, rep.comm_seconds


def peers(topology: Topology, state: ClusterState, job: Job) -> dict[str, list[int]]:
    """Every scheduler baseline's and heuristic's valid mapping, computed here, not by `place`."""
    traffic = job_traffic(job)
    out: dict[str, list[int]] = {}
    for name, f in {**BASELINES, **HEURISTICS}.items():
        m = f(topology, state, job, traffic)
        if m is not None and not validate(topology, state, job, m, traffic=traffic):
            out[name] = m
    return out


def brute_force(topo: Topology, state: ClusterState, job) -> float:  # type: ignore[no-untyped-def]
    best = math.inf
    for perm in itertools.permutations(range(topo.num_devices), job.ranks):
        if validate(topo, state, job, list(perm)):
            continue
        best = min(best, surrogate_seconds(topo, state, list(perm), job_traffic(job)))
    return best


def host_assignments(free: list[int], ranks: int) -> list[tuple[int, ...]]:
    """Every assignment of `ranks` ranks to hosts with `free` devices each (rank -> host index)."""
    out: list[tuple[int, ...]] = []
    left = list(free)

    def extend(prefix: list[int]) -> None:
        if len(prefix) == ranks:
            out.append(tuple(prefix))
            return
        for h in range(len(left)):
            if left[h]:
                left[h] -= 1
                extend([*prefix, h])
                left[h] += 1

    extend([])
    return out


def valid_reports(
    topo: Topology, state: ClusterState, job: Job, traffic: Traffic, free: list[int]
) -> list[CostReport]:
    """The evaluator's report of every valid mapping of `job` onto the devices `free` (brute force, for bounds)."""
    return [
        evaluate(topo, state, job, list(p), traffic=traffic, check=False)
        for p in itertools.permutations(free, job.ranks)
        if not validate(topo, state, job, list(p), traffic=traffic)
    ]
