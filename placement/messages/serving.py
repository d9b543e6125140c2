"""Serving jobs on the wire: `placement.model.serving.ServingJob` <-> a `Job` message with its `serving` field, the
Place, Evaluate and Compare requests that carry serving jobs, and the serving reports and answers as messages.

The message is read through the native reader (`placement.io.native.serving`), so the wire and the files share one
set of rules and error messages (field paths under ``job.serving``). A serving answer converts both ways
(`serving_result` / `serving_result_from_proto`), so the CLI prints a served answer with the offline tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from placement.cost.serving import ServingReport
from placement.errors import InternalError
from placement.io.native import mapping_from_obj
from placement.messages.decisions import CapacityInputs
from placement.messages.domain import (
    _job,
    _options,
    _Problems,
    _topology,
    assignments,
    message_dict,
    serving_job_of,
)
from placement.messages.serving_job import (
    is_serving_message,
    serving_cost,
    serving_from_proto,
    serving_report_from_proto,
    serving_to_proto,
)
from placement.model.job import Job
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve.serving import ServingResult, serving_traffic_job
from placement.solve.types import SolveOptions
from placement.v1 import placement_pb2 as pb

__all__ = [
    "ServingCompareInputs",
    "ServingEvaluateInputs",
    "ServingPlaceInputs",
    "carries_serving",
    "is_serving_message",
    "serving_capacity_inputs",
    "serving_compare_inputs",
    "serving_cost",
    "serving_evaluate_inputs",
    "serving_evaluate_response",
    "serving_from_proto",
    "serving_job_of",
    "serving_place_inputs",
    "serving_report_from_proto",
    "serving_result",
    "serving_result_from_proto",
    "serving_to_proto",
]


# ---- requests ---------------------------------------------------------------------------------------------------


def carries_serving(req: Any) -> bool:
    """True when a Place or Evaluate request's job, or any of a Compare request's jobs or a Capacity request's
    shapes, is a serving job."""
    if isinstance(req, pb.CompareRequest):
        return any(is_serving_message(j) for j in req.jobs)
    if isinstance(req, pb.CapacityRequest):
        return any(is_serving_message(j) for j in req.shapes)
    return bool(req.HasField("job") and is_serving_message(req.job))


@dataclass
class ServingPlaceInputs:
    """A Place request carrying a serving job, converted."""

    topology: Topology
    state: ClusterState
    job: ServingJob
    options: SolveOptions


@dataclass
class ServingEvaluateInputs:
    """An Evaluate request carrying a serving job, converted (the mapping as device indices)."""

    topology: Topology
    state: ClusterState
    job: ServingJob
    mapping: list[int]


@dataclass
class ServingCompareInputs:
    """A Compare request whose jobs are all serving jobs, converted."""

    topology: Topology
    state: ClusterState
    jobs: list[ServingJob]
    options: SolveOptions


def serving_place_inputs(
    req: pb.PlaceRequest,
    default_time_limit_s: float = 10.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> ServingPlaceInputs:
    """The domain view of a PlaceRequest whose job is a serving job; InputError with every problem."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    job = serving_job_of(req.job, "job", ps, built)
    options = _options(req.options, default_time_limit_s, ps)
    if req.HasField("max_slowdown"):
        ps.add(
            "max_slowdown",
            "place or wait is for training jobs (a step against its ideal); a serving job is placed now "
            "(use serving.load.tpot_bound_ms for a bound on the time per output token)",
        )
    ps.raise_if_any()
    if built is None or job is None:
        raise InternalError("the Place request has no cluster or no serving job, but no problem was recorded")
    return ServingPlaceInputs(built[0], built[1], job, options)


def serving_evaluate_inputs(req: pb.EvaluateRequest) -> ServingEvaluateInputs:
    """The domain view of an EvaluateRequest whose job is a serving job (the mapping as device indices, one per
    rank of the serving job)."""
    ps = _Problems()
    built = _topology(req, ps)
    job = serving_job_of(req.job, "job", ps, built)
    mapping: list[int] | None = None
    if not req.mapping:
        ps.add("mapping", "is required: one {rank, device} entry per rank")
    elif built is not None:
        entries = [message_dict(a) for a in req.mapping]
        mapping = ps.read("mapping", mapping_from_obj, entries, built[0], "mapping")
    if job is not None and mapping is not None and len(mapping) != job.ranks:
        ps.add(
            "mapping", f"{len(mapping)} entries for the serving job's {job.ranks} ranks: give one per rank"
        )
    ps.raise_if_any()
    if built is None or job is None or mapping is None:
        raise InternalError(
            "the Evaluate request has no cluster, job or mapping, but no problem was recorded"
        )
    return ServingEvaluateInputs(built[0], built[1], job, mapping)


def serving_compare_inputs(
    req: pb.CompareRequest,
    default_time_limit_s: float = 10.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> ServingCompareInputs:
    """The domain view of a CompareRequest of serving jobs; a training job among them is a problem (a ranking by
    time per output token and one by step time do not mix)."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    jobs: list[ServingJob] = []
    for i, msg in enumerate(req.jobs):
        if not is_serving_message(msg):
            ps.add(
                f"jobs[{i}]",
                "is a training job, but other jobs of this Compare are serving jobs: Compare ranks jobs of one "
                "kind (serving jobs by time per output token, training jobs by step time)",
            )
            continue
        job = serving_job_of(msg, f"jobs[{i}]", ps, built)
        if job is not None:
            jobs.append(job)
    options = _options(req.options, default_time_limit_s, ps)
    ps.raise_if_any()
    if built is None:
        raise InternalError("the Compare request has no cluster, but no problem was recorded")
    return ServingCompareInputs(built[0], built[1], jobs, options)


def serving_capacity_inputs(
    req: pb.CapacityRequest,
    default_time_limit_s: float = 2.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> CapacityInputs:
    """The domain view of a CapacityRequest with serving shapes: each serving shape counted as the ranks and rules
    it is placed with (`placement.solve.serving.serving_traffic_job`: EP preferred inside a domain, replicas
    spread), so a copy is what Place would place; training shapes as `placement.messages.decisions` reads them.
    ``place_copies`` is refused with serving shapes: a placed copy carries a training step, which a serving job
    does not have (Place gives its TTFT and TPOT)."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    shapes: list[Job] = []
    for i, msg in enumerate(req.shapes):
        if is_serving_message(msg):
            sj = serving_job_of(msg, f"shapes[{i}]", ps, built)
            if sj is not None and built is not None:
                shapes.append(serving_traffic_job(built[0], built[1], sj))
        else:
            job = _job(msg, f"shapes[{i}]", ps)
            if job is not None:
                shapes.append(job)
    options = _options(req.options, default_time_limit_s, ps)
    place_copies = req.place_copies if req.HasField("place_copies") else 0
    if place_copies:
        ps.add(
            "place_copies",
            f"is {place_copies}, but a serving shape's copies are counted, not modeled: a placed copy carries a "
            "training step, which a serving job does not have; give 0 and place one copy with Place for its "
            "TTFT and TPOT",
        )
    ps.raise_if_any()
    if built is None:
        raise InternalError("the Capacity request has no cluster, but no problem was recorded")
    return CapacityInputs(built[0], built[1], shapes, 0, options)


# ---- reports and answers ----------------------------------------------------------------------------------------


def _status(solver_status: str) -> pb.SolveStatus.ValueType:
    known = {name.removeprefix("SOLVE_STATUS_"): value for name, value in pb.SolveStatus.items()}
    return known.get(solver_status, pb.SOLVE_STATUS_FEASIBLE)


def serving_result(
    topo: Topology, job: ServingJob, result: ServingResult, *, time_limit_s: float, deadline_limited: bool
) -> pb.PlacementResult:
    """A placed serving job as a PlacementResult: the mapping, the status of the solver's search, and the serving
    answer (its report and every candidate's) in `serving`."""
    out = pb.PlacementResult(
        job=job.name,
        status=_status(result.status),
        strategy="serving",
        mapping=assignments(topo, result.mapping),
    )
    out.stats.time_limit_s = time_limit_s
    out.stats.deadline_limited = deadline_limited
    answer = out.serving
    answer.cost.CopyFrom(serving_cost(result.report))
    answer.chosen = result.chosen
    answer.solver_status = result.status
    for name, rep in result.candidates.items():
        c = answer.candidates.add(strategy=name, breaks=result.broken.get(name, ""))
        if rep is not None:
            c.cost.CopyFrom(serving_cost(rep))
    answer.notes.extend(result.notes)
    return out


def serving_result_from_proto(msg: pb.PlacementResult, topo: Topology) -> ServingResult:
    """What `serving_result` wrote, back into a ServingResult on `topo` (the mapping's device ids as indices)."""
    index = {d.id: i for i, d in enumerate(topo.devices)}
    a = msg.serving
    return ServingResult(
        mapping=[index[x.device] for x in msg.mapping],
        report=serving_report_from_proto(a.cost),
        chosen=a.chosen,
        candidates={
            c.strategy: (serving_report_from_proto(c.cost) if c.HasField("cost") else None)
            for c in a.candidates
        },
        broken={c.strategy: c.breaks for c in a.candidates if c.breaks},
        status=a.solver_status,
        notes=list(a.notes),
    )


def serving_evaluate_response(
    topo: Topology, job: ServingJob, mapping: Sequence[int], report: ServingReport
) -> pb.EvaluateResponse:
    """The serving report of a given mapping as an EvaluateResponse (`serving` set; no training step)."""
    return pb.EvaluateResponse(job=job.name, mapping=assignments(topo, mapping), serving=serving_cost(report))
