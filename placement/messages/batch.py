"""Proto <-> domain for PlaceBatch: a PlaceBatchRequest into the topology, state and queue of `BatchJob`s, and a
`BatchResult` into a PlaceBatchResponse. Builds on placement.messages.domain (the same readers and field paths).
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.decide.batch.joint import batch_problems
from placement.decide.batch.types import BatchJob, BatchPlan, BatchResult
from placement.errors import InternalError
from placement.messages.domain import (
    _job,
    _options,
    _Problems,
    _stats,
    _topology,
    assignments,
    serving_job_of,
    step_cost,
)
from placement.messages.serving_job import is_serving_message, serving_cost
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve import SolveOptions
from placement.solve.serving import serving_traffic_job
from placement.v1 import placement_pb2 as pb

__all__ = ["BatchInputs", "batch_inputs", "batch_response", "plan_to_proto"]


@dataclass
class BatchInputs:
    topology: Topology
    state: ClusterState
    jobs: list[BatchJob]
    options: SolveOptions


def batch_inputs(
    req: pb.PlaceBatchRequest,
    default_time_limit_s: float = 10.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> BatchInputs:
    """The domain view of a PlaceBatchRequest; InputError (source "request") with every problem, paths under
    ``jobs[i]`` (``jobs[i].weight``, ``jobs[i].job.name``, ``jobs[i].job.parallel.tp``...). A serving job
    (``jobs[i].job.serving``) joins the queue as its explicit job with its serving job beside
    (`placement.decide.batch.types.BatchJob`)."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    if not req.jobs:
        ps.add("jobs", "give at least one job")
    queue: list[BatchJob] = []
    complete = True
    for i, bj in enumerate(req.jobs):
        if not bj.HasField("job"):
            ps.add(f"jobs[{i}].job", "is required")
            complete = False
            continue
        weight = bj.weight if bj.HasField("weight") else 1.0
        priority = bj.priority if bj.HasField("priority") else 0.0
        if is_serving_message(bj.job):
            sj = serving_job_of(bj.job, f"jobs[{i}].job", ps, built)
            if sj is None or built is None:
                complete = False
                continue
            queue.append(BatchJob(serving_traffic_job(built[0], built[1], sj), weight, priority, sj))
            continue
        job = _job(bj.job, f"jobs[{i}].job", ps)
        if job is None:
            complete = False
            continue
        queue.append(BatchJob(job, weight, priority))
    options = _options(req.options, default_time_limit_s, ps)
    if built is not None and complete:
        for p in batch_problems(built[0], built[1], queue):
            ps.add(p.path, p.message)
    ps.raise_if_any()
    if built is None:
        raise InternalError("the PlaceBatch request has no cluster, but no problem was recorded")
    return BatchInputs(built[0], built[1], queue, options)


def plan_to_proto(topo: Topology, plan: BatchPlan, *, mappings: bool) -> pb.BatchPlan:
    """A BatchPlan as a message; `mappings=False` leaves the rank lists out (the baselines)."""
    out = pb.BatchPlan(
        strategy=plan.strategy,
        admitted=len(plan.admitted),
        admitted_weight=plan.admitted_weight,
        weighted_step_seconds=plan.weighted_step_seconds,
        weighted_comm_seconds=plan.weighted_comm_seconds,
    )
    for o in plan.outcomes:
        r = out.jobs.add(
            job_index=o.index,
            job=o.name,
            admitted=o.admitted,
            reason=o.reason,
            explanation=list(o.explanation),
            conflicts_with=list(o.conflicts_with),
        )
        if mappings and o.mapping is not None:
            r.mapping.extend(assignments(topo, o.mapping))
        if o.report is not None:
            r.cost.CopyFrom(step_cost(o.report))
        if o.serving is not None:
            r.serving.CopyFrom(serving_cost(o.serving))
    return out


def batch_response(
    topo: Topology, res: BatchResult, *, time_limit_s: float, deadline_limited: bool
) -> pb.PlaceBatchResponse:
    out = pb.PlaceBatchResponse(
        plan=plan_to_proto(topo, res.plan, mappings=True), admission_optimal=res.admission_optimal
    )
    for plan in res.baselines.values():
        out.baselines.append(plan_to_proto(topo, plan, mappings=False))
    if res.weight_bound is not None:
        out.admitted_weight_bound = res.weight_bound
    out.stats.CopyFrom(_stats(res.stats, time_limit_s, deadline_limited))
    return out
