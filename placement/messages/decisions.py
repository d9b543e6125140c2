"""Proto <-> domain for the scheduler's decisions: Preempt and Capacity requests into domain inputs, and their
results (`placement.decide.preempt`, `placement.decide.capacity`) into responses. Builds on placement.messages.domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from placement.decide.capacity import CapacityResult
from placement.decide.preempt import PreemptAnswer, PreemptResult, RunningJob
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
from placement.model.job import Job
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve import SolveOptions
from placement.solve.serving import serving_traffic_job
from placement.v1 import placement_pb2 as pb

__all__ = [
    "CapacityInputs",
    "PreemptInputs",
    "capacity_inputs",
    "capacity_response",
    "preempt_answer",
    "preempt_inputs",
    "preempt_response",
]


@dataclass
class PreemptInputs:
    topology: Topology
    state: ClusterState
    job: Job
    priority: float
    running: list[RunningJob]
    max_step_seconds: float | None
    max_slowdown: float | None
    objective: str
    options: SolveOptions
    max_checks: int
    serving: ServingJob | None = None
    """An incoming serving deployment (``job.serving``): `job` is its explicit job (`serving_traffic_job`)."""


@dataclass
class CapacityInputs:
    topology: Topology
    state: ClusterState
    shapes: list[Job]
    place_copies: int
    options: SolveOptions


def preempt_inputs(
    req: pb.PreemptRequest,
    default_time_limit_s: float = 10.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> PreemptInputs:
    """The domain view of a PreemptRequest; InputError (source "request") with every problem of the message.
    The rules on the running jobs, the bound and the objective are checked by `placement.decide.preempt.preempt`
    (with the same field paths)."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    job = None
    serving = None
    if not req.HasField("job"):
        ps.add("job", "is required: the incoming job")
    elif is_serving_message(req.job):
        serving = serving_job_of(req.job, "job", ps, built)
        if serving is not None and built is not None:
            job = serving_traffic_job(built[0], built[1], serving)
    else:
        job = _job(req.job, "job", ps)
    running = [
        RunningJob(
            r.job,
            r.priority if r.HasField("priority") else 0.0,
            r.checkpoint_age_s if r.HasField("checkpoint_age_s") else None,
            r.gpu_hours if r.HasField("gpu_hours") else None,
        )
        for r in req.running
    ]
    for i, r in enumerate(req.running):
        if not r.job:
            ps.add(f"running[{i}].job", "is required: the job's name in state.occupied")
    options = _options(req.options, default_time_limit_s, ps)
    ps.raise_if_any()
    if built is None or job is None:
        raise InternalError("the Preempt request has no cluster or job, but no problem was recorded")
    return PreemptInputs(
        built[0],
        built[1],
        job,
        req.priority if req.HasField("priority") else 0.0,
        running,
        req.max_step_seconds if req.HasField("max_step_seconds") else None,
        req.max_slowdown if req.HasField("max_slowdown") else None,
        req.objective or "fewest",
        options,
        req.max_checks if req.HasField("max_checks") else 64,
        serving,
    )


def preempt_answer(topo: Topology, a: PreemptAnswer, ideal_step_s: float | None) -> pb.PreemptAnswer:
    out = pb.PreemptAnswer(name=a.name, gpu_hours=a.gpu_hours, within_bound=a.within_bound, domain=a.domain)
    for v in a.victims:
        m = out.victims.add(
            job=v.job,
            priority=v.priority,
            devices=[topo.devices[d].id for d in v.devices],
            gpu_hours=v.gpu_hours,
            domain_devices=v.domain_devices,
            used_devices=v.used_devices,
            explanation=v.explanation,
            clears=list(v.clears),
        )
        if v.checkpoint_age_s is not None:
            m.checkpoint_age_s = v.checkpoint_age_s
    out.mapping.extend(assignments(topo, a.mapping))
    out.cost.CopyFrom(step_cost(a.report))
    if ideal_step_s:
        out.slowdown = a.report.step_seconds / ideal_step_s
    if a.serving is not None:
        out.serving.CopyFrom(serving_cost(a.serving))
    return out


def preempt_response(
    topo: Topology, res: PreemptResult, *, time_limit_s: float, deadline_limited: bool
) -> pb.PreemptResponse:
    ideal_s = res.ideal.step_seconds if res.ideal is not None else None
    out = pb.PreemptResponse(
        recommended=res.recommended, objective=res.objective.value, proven=res.proven, protected=res.protected
    )
    for a in res.answers:
        out.answers.append(preempt_answer(topo, a, ideal_s))
    if res.bound_s != float("inf"):
        out.bound_step_seconds = res.bound_s
    if res.ideal is not None:
        out.ideal.CopyFrom(step_cost(res.ideal))
    if res.ideal_serving is not None:
        out.ideal_serving.CopyFrom(serving_cost(res.ideal_serving))
    out.stats.CopyFrom(_stats(res.stats, time_limit_s, deadline_limited))
    return out


def capacity_inputs(
    req: pb.CapacityRequest,
    default_time_limit_s: float = 2.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> CapacityInputs:
    """The domain view of a CapacityRequest; problems of shape i are under ``shapes[i]``. The rules on the
    shapes' names and `place_copies` are checked by `placement.decide.capacity.capacity`."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    shapes = [_job(j, f"shapes[{i}]", ps) for i, j in enumerate(req.shapes)]
    options = _options(req.options, default_time_limit_s, ps)
    ps.raise_if_any()
    if built is None:
        raise InternalError("the Capacity request has no cluster, but no problem was recorded")
    return CapacityInputs(
        built[0],
        built[1],
        [j for j in shapes if j is not None],
        req.place_copies if req.HasField("place_copies") else 0,
        options,
    )


def capacity_response(
    topo: Topology, res: CapacityResult, *, time_limit_s: float, deadline_limited: bool
) -> pb.CapacityResponse:
    out = pb.CapacityResponse()
    for i, s in enumerate(res.shapes):
        m = out.shapes.add(
            shape_index=i,
            job=s.job.name,
            ranks=s.job.ranks,
            usable_devices=s.usable,
            copies=s.copies,
            upper_bound=s.upper_bound,
            method=s.method,
            notes=s.notes,
        )
        for d in s.domains:
            m.domains.add(level=d.level, domain=d.domain, copies=d.copies, free_devices=d.free)
        for p in s.placed:
            pc = m.placed.add(index=p.index)
            pc.mapping.extend(assignments(topo, p.mapping))
            pc.cost.CopyFrom(step_cost(p.report))
    for f in res.fragmentation:
        out.fragmentation.add(
            level=f.level,
            fragmentation=f.fragmentation,
            free_devices=f.free,
            domains_with_free=f.domains_with_free,
            largest_free_block=f.largest_free_block,
        )
    out.stats.CopyFrom(_stats(res.stats, time_limit_s, deadline_limited))
    return out
