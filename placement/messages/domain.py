"""Proto <-> domain: request messages into Topology, ClusterState, Job and SolveOptions; results into messages.

The one module that knows both (the server, the CLI offline and request files use it). Inputs go MessageToDict -> the native readers, so validation and field paths
are those of the files; every problem of a request is reported at once, its path prefixed by the request
field (``job.parallel.order``). It imports no grpc: the CLI may use it offline.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from placement.cost.report import Contention, CostReport, JobHarm, PhaseCost
from placement.cost.shared import OBJECTIVES
from placement.errors import InputError, InternalError, Problems
from placement.io.export import baseline_costs
from placement.io.export.document import device_affinity
from placement.io.native import (
    cluster_from_dict,
    job_from_dict,
    mapping_from_obj,
    merge_states,
    state_from_dict,
)
from placement.limits import LimitError, checkpoint
from placement.messages.files import ConversionCache, message_to_dict
from placement.messages.serving_job import serving_from_proto
from placement.model.job import Job
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve import PlacementResult, SolveOptions, SolveStatus, Strategy
from placement.solve.run import request_problems
from placement.solve.serving import serving_rule_problems
from placement.v1 import placement_pb2 as pb

__all__ = [
    "CONVERTED",
    "SOURCE",
    "CompareInputs",
    "EvaluateInputs",
    "PlaceInputs",
    "assignments",
    "breakdown",
    "compare_inputs",
    "evaluate_inputs",
    "evaluate_response",
    "infeasible_result",
    "message_dict",
    "place_inputs",
    "report_from_proto",
    "result_to_proto",
    "serving_job_of",
    "step_cost",
]

SOURCE = "request"
"""The `source` of every InputError this module raises; problem paths start at the request's fields."""

_STATUS = {
    SolveStatus.OPTIMAL: pb.SOLVE_STATUS_OPTIMAL,
    SolveStatus.FEASIBLE: pb.SOLVE_STATUS_FEASIBLE,
    SolveStatus.INFEASIBLE: pb.SOLVE_STATUS_INFEASIBLE,
    SolveStatus.WAIT: pb.SOLVE_STATUS_WAIT,
}
_FORMAT_SPEC_OK = frozenset(string.digits + "<>^=d")


message_dict = message_to_dict
"""A message as the dict its JSON form parses to (proto field names; unset fields absent)."""


def _join(prefix: str, path: str) -> str:
    """A reader's field path under the request field it read: ``job`` + ``parallel.order``, ``mapping`` + ``[3]``."""
    if not path:
        return prefix
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


class _Problems(Problems):
    """Problems of one request, from several readers, with request-level paths."""

    def __init__(self) -> None:
        super().__init__(SOURCE)

    def read(self, prefix: str, fn: Any, *args: Any) -> Any:
        """`fn(*args)`, or None after recording its InputError's problems under `prefix`."""
        try:
            return fn(*args)
        except LimitError:  # RESOURCE_EXHAUSTED, not one problem among others
            raise
        except InputError as e:
            for p in e.problems:
                self.add(_join(prefix, p.path), p.message)
            self.omitted += e.omitted
            return None


# ---- size estimates (before anything is built) ------------------------------------------------------------


# ---- inputs -------------------------------------------------------------------------------------------------


def _host_format_problem(fmt: str) -> str | None:
    """`host_format` goes through str.format in the reader: one `{}` / `{:03d}`-style field only."""
    try:
        fields = [
            (name, spec, conv) for _, name, spec, conv in string.Formatter().parse(fmt) if name is not None
        ]
    except ValueError as e:
        return f"{fmt!r} is not a format: {e}"
    if (
        len(fields) == 1
        and fields[0][0] in ("", "0")
        and fields[0][2] is None
        and set(fields[0][1] or "") <= _FORMAT_SPEC_OK
        and len(fields[0][1] or "") <= 4
    ):
        return None
    return f"{fmt!r}: give one field for the host number, e.g. 'dgx{{:03d}}'"


def _cluster_dict(cluster: pb.Cluster, ps: _Problems) -> dict[str, Any]:
    """The native cluster document of a message. Values the native reader cannot take safely (they would raise
    or allocate without bound) are recorded as problems here and replaced by harmless ones, so the reader still
    reports everything else."""
    d = message_dict(cluster)
    for nt in d.get("node_types", []):
        if "rails" in nt:  # -1 in the message is null (no rail NIC) in the native format
            nt["rails"] = [None if x == -1 else x for x in nt["rails"]]
        # cpu_affinity / numa_affinity pass as they are: the reader takes "" / -1 as unknown (null), and the
        # registry keeps this document, which GetState parses back into a message (null is not a list element)
    for i, g in enumerate(d.get("generate", [])):
        if g.get("nodes", 0) < 1:  # the reader divides by it
            ps.add(
                f"cluster.generate[{i}].nodes",
                f"must be >= 1, got {g['nodes']}" if "nodes" in g else "is required",
            )
            g["nodes"] = 1
        problem = _host_format_problem(g["host_format"]) if "host_format" in g else None
        if problem is not None:
            ps.add(f"cluster.generate[{i}].host_format", problem)
            del g["host_format"]
    return d


CONVERTED = ConversionCache(clusters=8, states=64)
"""The conversion cache of this process (`CONVERTED.clear()` makes the next request cold)."""


def _topology(
    req: Any, ps: _Problems, resolved: tuple[Topology, ClusterState] | None = None
) -> tuple[Topology, ClusterState] | None:
    """The cluster and the state of a request (the cluster's static fault domains merged into the state), or
    `resolved`: what its cluster_id names in the registry (placement.messages.registry.resolve_cluster).
    Conversions are reused by message digest (`CONVERTED`): Topology and ClusterState are immutable."""
    if resolved is not None:
        return resolved
    if not req.HasField("cluster"):
        ps.add("cluster", "is required")
        return None
    guarded = len(ps)
    checkpoint("converting the cluster")
    ckey = CONVERTED.digest(req.cluster)
    built = CONVERTED.cluster(ckey)
    if built is None:
        doc = _cluster_dict(req.cluster, ps)
        built = ps.read("cluster", cluster_from_dict, doc, "cluster")
        if built is None or len(ps) > guarded:
            return None
        CONVERTED.keep_cluster(ckey, built)
    topo, base = built
    checkpoint("converting the state")
    skey = (ckey, CONVERTED.digest(req.state) if req.HasField("state") else b"")
    merged = CONVERTED.state(skey)
    if merged is not None:
        return topo, merged
    state_doc = message_dict(req.state) if req.HasField("state") else {}
    state = ps.read("state", state_from_dict, state_doc, topo, "state")
    if state is None:
        return None
    merged = merge_states(base, state)
    CONVERTED.keep_state(skey, merged)
    return topo, merged


def _job(msg: pb.Job, prefix: str, ps: _Problems) -> Job | None:
    checkpoint(f"converting {prefix}")
    if msg.HasField("serving"):  # every method reads it by `serving_job_of` in its serving form
        ps.add(
            f"{prefix}.serving",
            "a serving job is read in the serving form of its method (Place, Evaluate, Compare, Capacity, "
            "PlaceBatch, Repair, Preempt, Reserve); here a training job was expected (docs/serving.md)",
        )
        return None
    doc = message_dict(msg)
    for g in doc.get("groups", []):
        g.setdefault(
            "members", []
        )  # an empty repeated field is absent in the dict; the reader checks a present one
    job: Job | None = ps.read(prefix, job_from_dict, doc, prefix)
    return job


def serving_job_of(
    msg: pb.Job, prefix: str, ps: _Problems, built: tuple[Topology, ClusterState] | None = None
) -> ServingJob | None:
    """The serving job of the Job message at `prefix` of a request (it carries ``serving``), its problems recorded
    in `ps`. With the request's cluster (`built`), the level and fault domain kind its rules name are checked
    there too (`serving_rule_problems`, at ``prefix.serving.rules``); None when any problem was found."""
    checkpoint(f"converting {prefix}")
    job: ServingJob | None = ps.read(prefix, serving_from_proto, msg, prefix)
    if job is None or built is None:
        return job
    bad = serving_rule_problems(built[0], built[1], job, "rules")
    for p in bad:
        ps.add(f"{prefix}.serving.{p.path}", p.message)
    return None if bad else job


def _required_job(req: pb.PlaceRequest | pb.EvaluateRequest, ps: _Problems) -> Job | None:
    if not req.HasField("job"):
        ps.add("job", "is required")
        return None
    return _job(req.job, "job", ps)


def _references(topo: Topology, state: ClusterState, job: Job, prefix: str, ps: _Problems) -> None:
    """Names in the job that must exist in the cluster (the domain's rules), with request field paths."""
    checkpoint(f"checking {prefix}")
    for p in request_problems(topo, state, job):
        ps.add(f"{prefix}.{p.path}", p.message)


def _options(
    msg: pb.Options, default_time_limit_s: float, ps: _Problems, prefix: str = "options"
) -> SolveOptions:
    strategy = Strategy.CPSAT
    if msg.strategy:
        try:
            strategy = Strategy(msg.strategy)
        except ValueError:
            ps.add(
                f"{prefix}.strategy",
                f"unknown strategy {msg.strategy!r}; known: {[s.value for s in Strategy]}",
            )
    limit = default_time_limit_s
    if msg.HasField("time_limit_s"):
        if not (math.isfinite(msg.time_limit_s) and msg.time_limit_s > 0):
            ps.add(f"{prefix}.time_limit_s", f"must be a number > 0, got {msg.time_limit_s}")
        else:
            limit = msg.time_limit_s
    gap = 0.0
    if msg.HasField("relative_gap"):
        if not (math.isfinite(msg.relative_gap) and 0 <= msg.relative_gap < 1):
            ps.add(f"{prefix}.relative_gap", f"must be in [0, 1), got {msg.relative_gap}")
        else:
            gap = msg.relative_gap
    objective = msg.objective or "own"
    if objective not in OBJECTIVES:
        ps.add(f"{prefix}.objective", f"must be one of {', '.join(OBJECTIVES)}, got {msg.objective!r}")
        objective = "own"
    return SolveOptions(
        strategy=strategy,
        time_limit_s=limit,
        relative_gap=gap,
        seed=msg.seed,
        deterministic=msg.deterministic,
        objective=objective,
    )


@dataclass
class PlaceInputs:
    topology: Topology
    state: ClusterState
    job: Job
    options: SolveOptions
    max_slowdown: float | None = None
    """Place or wait (`placement.decide.wait.decide`); None: always place."""


@dataclass
class EvaluateInputs:
    topology: Topology
    state: ClusterState
    job: Job
    mapping: list[int]


@dataclass
class CompareInputs:
    topology: Topology
    state: ClusterState
    jobs: list[Job]
    options: SolveOptions


def place_inputs(
    req: pb.PlaceRequest,
    default_time_limit_s: float = 10.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> PlaceInputs:
    """The domain view of a PlaceRequest; InputError (source "request") with every problem."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    job = _required_job(req, ps)
    options = _options(req.options, default_time_limit_s, ps)
    if built is not None and job is not None:
        _references(*built, job, "job", ps)
    max_slowdown = max_slowdown_of(req, ps)
    ps.raise_if_any()
    if built is None or job is None:
        raise InternalError("the Place request has no cluster or no job, but no problem was recorded")
    return PlaceInputs(built[0], built[1], job, options, max_slowdown)


def max_slowdown_of(req: Any, ps: _Problems) -> float | None:
    """A Place or Reserve request's `max_slowdown` (None when unset); a problem unless it is a number >= 1."""
    if not req.HasField("max_slowdown"):
        return None
    v = float(req.max_slowdown)
    if not (math.isfinite(v) and v >= 1):
        ps.add("max_slowdown", f"must be a number >= 1 (1: the ideal step), got {v:g}")
        return None
    return v


def evaluate_inputs(req: pb.EvaluateRequest) -> EvaluateInputs:
    """The domain view of an EvaluateRequest (the mapping as device indices)."""
    ps = _Problems()
    built = _topology(req, ps)
    job = _required_job(req, ps)
    mapping: list[int] | None = None
    if not req.mapping:
        ps.add("mapping", "is required: one {rank, device} entry per rank")
    elif built is not None:
        entries = [message_dict(a) for a in req.mapping]
        mapping = ps.read("mapping", mapping_from_obj, entries, built[0], "mapping")
    if built is not None and job is not None:
        _references(*built, job, "job", ps)
    ps.raise_if_any()
    if built is None or job is None or mapping is None:
        raise InternalError(
            "the Evaluate request has no cluster, job or mapping, but no problem was recorded"
        )
    return EvaluateInputs(built[0], built[1], job, mapping)


def compare_inputs(
    req: pb.CompareRequest,
    default_time_limit_s: float = 10.0,
    resolved: tuple[Topology, ClusterState] | None = None,
) -> CompareInputs:
    """The domain view of a CompareRequest; problems of job i are under ``jobs[i]``."""
    ps = _Problems()
    built = _topology(req, ps, resolved)
    if not req.jobs:
        ps.add("jobs", "give at least one job")
    jobs = [_job(j, f"jobs[{i}]", ps) for i, j in enumerate(req.jobs)]
    options = _options(req.options, default_time_limit_s, ps)
    if built is not None:
        for i, job in enumerate(jobs):
            if job is not None:
                _references(*built, job, f"jobs[{i}]", ps)
    ps.raise_if_any()
    if built is None:
        raise InternalError("the Compare request has no cluster, but no problem was recorded")
    return CompareInputs(built[0], built[1], [j for j in jobs if j is not None], options)


# ---- results ------------------------------------------------------------------------------------------------


def assignments(topo: Topology, mapping: Sequence[int]) -> list[pb.Assignment]:
    """One Assignment per rank, in rank order, with the device's kind and CPU/NUMA affinity where known."""
    devs = topo.devices
    out = []
    for r, d in enumerate(mapping):
        a = pb.Assignment(rank=r, device=devs[d].id, host=devs[d].host, kind=devs[d].kind)
        cpus, numa = device_affinity(topo, d)
        if cpus is not None:
            a.cpus = cpus
        if numa is not None:
            a.numa_node = numa
        out.append(a)
    return out


def breakdown(report: CostReport) -> pb.Breakdown:
    return pb.Breakdown(
        by_label_s=dict(report.by_label),
        by_tier_s=dict(report.by_tier),
        by_label_tier=[
            pb.LabelTier(label=k[0], tier=k[1], seconds=v) for k, v in sorted(report.by_label_tier.items())
        ],
        preference_misses=dict(report.preference_misses),
    )


def _opt(value: float | None) -> float | None:
    """A number for an optional field: None (unset) when missing or not finite."""
    return None if value is None or not math.isfinite(value) else float(value)


def step_cost(report: CostReport) -> pb.StepCost:
    """The modeled step of a CostReport as a message (field for field; the model is `placement.cost.evaluate`)."""
    out = pb.StepCost(
        step_seconds=report.step_seconds,
        comm_seconds=report.comm_seconds,
        comm_seconds_total=report.comm_seconds_total,
        surrogate_seconds=report.surrogate_seconds,
        phases=[
            pb.Phase(
                name=p.name,
                seconds=p.seconds,
                exposed_seconds=p.exposed_seconds,
                tier=p.tier,
                critical=p.critical,
                algorithm=p.algorithm,
            )
            for p in report.phases
        ],
    )
    for name in ("compute_seconds", "bubble_seconds", "straggler_seconds", "tokens_per_s", "mfu"):
        value = _opt(getattr(report, name))
        if value is not None:
            setattr(out, name, value)
    c = report.contention
    if c is not None:
        out.contention.CopyFrom(
            pb.Contention(
                contention_seconds=c.seconds,
                alone_step_seconds=c.alone_step_seconds,
                harm_gpu_s_per_s=c.harm_gpu_s_per_s,
                harm=[
                    pb.JobHarm(
                        job=h.job_id, gpus=h.gpus, step_seconds=h.step_seconds, added_seconds=h.added_seconds
                    )
                    for h in c.harm
                ],
            )
        )
    if report.objective_seconds is not None:
        out.objective_seconds = report.objective_seconds
    return out


def _contention(cost: pb.StepCost) -> Contention | None:
    if not cost.HasField("contention"):
        return None
    c = cost.contention
    harm = [JobHarm(h.job, h.gpus, h.step_seconds, h.added_seconds) for h in c.harm]
    return Contention(c.contention_seconds, c.alone_step_seconds, harm, c.harm_gpu_s_per_s)


def report_from_proto(cost: pb.StepCost, bd: pb.Breakdown) -> CostReport:
    """A StepCost and its Breakdown back into a CostReport (what `step_cost` and `breakdown` wrote); the CLI
    prints a remote answer with the same tables as a local one."""
    opt = {
        name: getattr(cost, name) if cost.HasField(name) else None
        for name in ("compute_seconds", "bubble_seconds", "straggler_seconds", "tokens_per_s", "mfu")
    }
    return CostReport(
        step_seconds=cost.step_seconds,
        comm_seconds=cost.comm_seconds,
        comm_seconds_total=cost.comm_seconds_total,
        compute_seconds=opt["compute_seconds"],
        bubble_seconds=opt["bubble_seconds"],
        straggler_seconds=opt["straggler_seconds"],
        tokens_per_s=opt["tokens_per_s"],
        mfu=opt["mfu"],
        surrogate_seconds=cost.surrogate_seconds,
        phases=[
            PhaseCost(p.name, p.seconds, p.exposed_seconds, p.tier, p.critical, p.algorithm)
            for p in cost.phases
        ],
        by_label=dict(bd.by_label_s),
        by_tier=dict(bd.by_tier_s),
        by_label_tier={(lt.label, lt.tier): lt.seconds for lt in bd.by_label_tier},
        preference_misses=dict(bd.preference_misses),
        contention=_contention(cost),
        objective_seconds=cost.objective_seconds if cost.HasField("objective_seconds") else None,
    )


def _stats(stats: dict[str, float | int | str], time_limit_s: float, deadline_limited: bool) -> pb.SolveStats:
    out = pb.SolveStats(time_limit_s=time_limit_s, deadline_limited=deadline_limited)
    for k, v in sorted(stats.items()):
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v)):
            if k == "wall_s":
                out.wall_s = float(v)
            else:
                out.values[k] = float(v)
        else:
            out.notes[k] = str(v)
    return out


def result_to_proto(
    topo: Topology, job: Job, res: PlacementResult, *, time_limit_s: float, deadline_limited: bool
) -> pb.PlacementResult:
    """A domain PlacementResult as a message."""
    out = pb.PlacementResult(
        job=job.name,
        status=_STATUS[res.status],
        strategy=res.strategy.value,
        explanation=list(res.explanation),
    )
    if res.mapping is not None:
        out.mapping.extend(assignments(topo, res.mapping))
    report = res.report
    if isinstance(report, CostReport):
        out.seconds_per_step = report.comm_seconds  # deprecated v1 name
        out.breakdown.CopyFrom(breakdown(report))
        out.cost.CopyFrom(step_cost(report))
    if res.lower_bound is not None and math.isfinite(res.lower_bound):
        out.lower_bound_s = res.lower_bound
    gap = res.gap
    if gap is not None and math.isfinite(gap):
        out.gap = gap
    costs = (
        baseline_costs(report, res.baselines, res.baseline_reports)
        if isinstance(report, CostReport)
        else {name: {"step_seconds": None, "comm_seconds": comm} for name, comm in res.baselines.items()}
    )
    for name, cost in sorted(costs.items()):
        b = out.baselines.add(strategy=name)
        comm, step = _opt(cost["comm_seconds"]), _opt(cost["step_seconds"])
        if comm is not None:
            b.seconds_per_step = comm  # deprecated v1 name
            b.comm_seconds = comm
        if step is not None:
            b.step_seconds = step
    out.stats.CopyFrom(_stats(res.stats, time_limit_s, deadline_limited))
    v = res.verdict
    if v is not None:
        out.slowdown = v.slowdown
        out.ideal_step_s = v.ideal_step_s
        out.ideal_source = v.ideal_source
        if res.status is SolveStatus.WAIT:
            out.wait.max_slowdown = v.max_slowdown or 0.0
            out.wait.reasons.extend(v.reasons)
            out.wait.earliest_how = v.earliest_how
            if v.earliest_s is not None:
                out.wait.earliest_start_unix_s = v.earliest_s
    return out


def infeasible_result(job: Job, reasons: Iterable[str], strategy: Strategy) -> pb.PlacementResult:
    """A Compare entry for a job no placement fits: status INFEASIBLE with the reasons."""
    return pb.PlacementResult(
        job=job.name, status=pb.SOLVE_STATUS_INFEASIBLE, strategy=strategy.value, explanation=list(reasons)
    )


def evaluate_response(
    topo: Topology, job: Job, mapping: Sequence[int], report: CostReport
) -> pb.EvaluateResponse:
    return pb.EvaluateResponse(
        job=job.name,
        seconds_per_step=report.comm_seconds,
        breakdown=breakdown(report),
        mapping=assignments(topo, mapping),
        cost=step_cost(report),
    )
