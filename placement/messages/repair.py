"""Proto <-> domain for Repair: a RepairRequest into the topology, state, job, current mapping, budget and options,
and a `RepairResult` into a RepairResponse. Builds on placement.messages.domain (the same readers and field paths).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placement.decide.repair.input import RepairBudget, resolve_current
from placement.decide.repair.run import RepairAnswer, RepairResult
from placement.errors import InternalError
from placement.messages.domain import (
    _job,
    _options,
    _Problems,
    _references,
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

__all__ = ["RepairInputs", "answer_to_proto", "repair_inputs", "repair_response"]


@dataclass
class RepairInputs:
    topology: Topology
    state: ClusterState
    job: Job
    current: list[int]
    options: SolveOptions
    budget: RepairBudget
    drain: list[str] = field(default_factory=list)
    spares: list[str] = field(default_factory=list)
    spares_only: bool = False
    serving: ServingJob | None = None
    """A serving deployment (``job.serving``): `job` is its explicit job (`serving_traffic_job`)."""


def repair_inputs(
    req: pb.RepairRequest,
    default_time_limit_s: float = 5.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> RepairInputs:
    """The domain view of a RepairRequest; InputError (source "request") with every problem, the current
    mapping's under ``current[i]`` (a list in rank order) or ``current.R`` (entries with ranks)."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    job = None
    serving = None
    if not req.HasField("job"):
        ps.add("job", "is required: the running job")
    elif is_serving_message(req.job):
        serving = serving_job_of(req.job, "job", ps, built)
        if serving is not None and built is not None:
            job = serving_traffic_job(built[0], built[1], serving)
    else:
        job = _job(req.job, "job", ps)
    current: list[int] | None = None
    if not req.current:
        ps.add("current", "is required: one {rank, device} entry per rank of the running job")
    elif built is not None and job is not None:
        if any(a.HasField("rank") for a in req.current):
            entries: dict[str | int, str | int] = {}
            for i, a in enumerate(req.current):
                r = a.rank if a.HasField("rank") else i
                if r in entries:
                    ps.add(f"current[{i}].rank", f"rank {r} is given twice")
                entries[r] = a.device
            current = ps.read("current", resolve_current, built[0], job, entries, "")
        else:
            current = ps.read("current", resolve_current, built[0], job, [a.device for a in req.current], "")
    b = req.budget
    budget = RepairBudget(
        b.max_moved_ranks if b.HasField("max_moved_ranks") else None,
        b.max_moved_hosts if b.HasField("max_moved_hosts") else None,
        b.move_cost_s if b.HasField("move_cost_s") else 0.0,
        b.horizon_steps if b.HasField("horizon_steps") else 1000.0,
    )
    if budget.horizon_steps <= 0:
        ps.add("budget.horizon_steps", f"must be > 0, got {budget.horizon_steps:g}")
    options = _options(req.options, default_time_limit_s, ps)
    if built is not None and job is not None:
        _references(*built, job, "job", ps)
    ps.raise_if_any()
    if built is None or job is None or current is None:
        raise InternalError(
            "the Repair request has no cluster, job or current mapping, but no problem was recorded"
        )
    return RepairInputs(
        built[0],
        built[1],
        job,
        current,
        options,
        budget,
        list(req.drain),
        list(req.spares),
        req.spares_only,
        serving,
    )


def answer_to_proto(topo: Topology, a: RepairAnswer) -> pb.RepairAnswer:
    out = pb.RepairAnswer(
        name=a.name,
        moved_ranks=a.moved_ranks,
        moved_hosts=a.moved_hosts,
        optimal=a.optimal,
        within_budget=a.within_budget,
    )
    for m in a.moves:
        out.moves.add(rank=m.rank, from_device=topo.devices[m.src].id, to_device=topo.devices[m.dst].id)
    out.mapping.extend(assignments(topo, a.mapping))
    out.cost.CopyFrom(step_cost(a.report))
    if a.serving is not None:
        out.serving.CopyFrom(serving_cost(a.serving))
    return out


def repair_response(
    topo: Topology, res: RepairResult, *, time_limit_s: float, deadline_limited: bool
) -> pb.RepairResponse:
    out = pb.RepairResponse(recommended=res.recommended, forced_ranks=res.forced, min_moves=res.min_moves)
    for a in res.answers:
        out.answers.append(answer_to_proto(topo, a))
    out.before.CopyFrom(step_cost(res.before))
    if res.before_serving is not None:
        out.before_serving.CopyFrom(serving_cost(res.before_serving))
    if res.replace is not None:
        out.replace.CopyFrom(answer_to_proto(topo, res.replace))
    out.stats.CopyFrom(_stats(res.stats, time_limit_s, deadline_limited))
    return out
