"""The PlacementService servicer: each of its RPCs described once (a `server.rpc.Rpc`) and run by the one template.

It only translates: placement.messages converts in and out, placement does the work, server.rpc runs the call (solve
pool, deadline, cancellation, metrics, log line), server.errors gives the status of a failed call. A request that
carries a serving job (`Job.serving`) runs the serving form of its method (`SERVING_RPCS`: Place, Evaluate, Compare,
Capacity), chosen by the request's content here and in a solve process alike.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.cost.serving import ServingReport
from placement.decide.batch.joint import place_batch
from placement.decide.batch.types import BatchResult
from placement.decide.repair.run import RepairResult, repair
from placement.decide.repair.serving import repair_serving
from placement.decide.wait import decide
from placement.limits import checkpoint
from placement.messages import batch as convert_batch
from placement.messages import domain as convert
from placement.messages import repair as convert_repair
from placement.messages import serving as convert_serving
from placement.model.topology import Topology
from placement.solve import PlacementResult, compare, place
from placement.solve.serving import ServingResult, compare_serving, evaluate_serving, place_serving
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server.decisions import CAPACITY, PREEMPT, capacity_rpc
from server.errors import LimitExceeded
from server.memo import AnswerMemo
from server.pool import SolvePool
from server.rpc import Outcome, Resolved, Rpc, RpcRunner, TimeBudget, on_topology
from server.settings import Settings
from server.telemetry import Metrics
from server.workers import REMOTE_WORK

__all__ = [
    "COMPARE",
    "EVALUATE",
    "PLACE_BATCH",
    "REPAIR",
    "SERVING_RPCS",
    "PlaceCall",
    "PlaceMemo",
    "PlacementServicer",
    "place_rpc",
]

_log = logging.getLogger("placement.server")

Req = TypeVar("Req")
Resp = TypeVar("Resp")
CompareRows = list[tuple[Any, PlacementResult | None, str | None]]


# ---- Place ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlaceCall:
    """A Place request converted: the request (the memo keys it), the registry's cluster and state, the inputs."""

    request: pb.PlaceRequest
    resolved: Resolved
    inputs: convert.PlaceInputs

    @property
    def named(self) -> Topology | None:
        """The registry's topology the request names (None: the request carries its cluster): its answers are its
        own."""
        return self.resolved[0] if self.resolved is not None else None


def _place_call(request: pb.PlaceRequest, default_time_limit_s: float, resolved: Resolved) -> PlaceCall:
    return PlaceCall(request, resolved, convert.place_inputs(request, default_time_limit_s, resolved))


class PlaceMemo:
    """The answer memo of this process (`server.memo.AnswerMemo`) as the memo of Place; a hit is counted in the
    memo-hits metric and logged, and it is not counted as a solve."""

    def __init__(self, memo: AnswerMemo, metrics: Metrics) -> None:
        self.memo = memo
        self._metrics = metrics

    def key(self, call: PlaceCall, budget: TimeBudget) -> bytes | None:
        # a deadline-limited call gets a budget of its own: its answer is neither taken from nor kept in the memo
        if budget.deadline_limited or self.memo.entries <= 0:
            return None
        return AnswerMemo.key(call.request, budget.limit_s, call.inputs.options.workers, call.resolved)

    def recall(self, key: bytes, call: PlaceCall) -> pb.PlaceResponse | None:
        t0 = time.perf_counter()
        kept = self.memo.get(key, call.named)
        if kept is None:
            return None
        self._metrics.memo_hits.labels(method="Place").inc()
        fields = {
            "job": call.inputs.job.name,
            "ranks": call.inputs.job.ranks,
            "status": pb.SolveStatus.Name(kept.result.status).removeprefix("SOLVE_STATUS_"),
            "memo": True,
            "solve_s": round(time.perf_counter() - t0, 4),
        }
        _log.info("placed", extra={"fields": fields})
        return kept

    def keep(self, key: bytes, call: PlaceCall, response: pb.PlaceResponse) -> None:
        self.memo.put(key, response, call.named)


def _placed(call: PlaceCall, res: PlacementResult) -> dict[str, Any]:
    job, topology = call.inputs.job, call.inputs.topology
    step = res.report.step_seconds if isinstance(res.report, CostReport) else None
    return {
        "job": job.name,
        "ranks": job.ranks,
        "devices": topology.num_devices,
        "status": res.status.value,
        "step_seconds": step,
        "comm_seconds": res.comm_seconds,
        "gap": res.gap,
    }


def _place_response(call: PlaceCall, res: PlacementResult, budget: TimeBudget) -> pb.PlaceResponse:
    i = call.inputs
    return pb.PlaceResponse(
        result=convert.result_to_proto(
            i.topology, i.job, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
        )
    )


def place_rpc(
    memo: PlaceMemo | None, ends: Callable[[str], list[tuple[float, list[int]]]]
) -> Rpc[pb.PlaceRequest, PlaceCall, PlacementResult, pb.PlaceResponse]:
    """Place (place or wait, `placement.decide.wait.decide`), answered from `memo` when it holds the answer;
    `ends(cluster_id)` gives the expected ends of a registry cluster's live claims."""

    def work(call: PlaceCall) -> PlacementResult:
        i, cluster_id = call.inputs, call.request.cluster_id
        # the arguments grouped by meaning: what is placed, then how
        return decide(
            i.topology, i.state, i.job, i.options,
            max_slowdown=i.max_slowdown, ends=lambda: ends(cluster_id) if cluster_id else [],
            solve=place,  # looked up at each call: tests replace it
        )  # fmt: skip

    return Rpc(
        "Place",
        parse=_place_call,
        options=lambda call: call.inputs.options,
        work=work,
        outcomes=lambda _call, res: [(res.status.value, res.gap)],
        render=_place_response,
        log="placed",
        log_fields=_placed,
        log_budget=("time_limit_s", "deadline_limited"),
        memo=memo,
        nothing_by_deadline=True,
    )


# ---- Evaluate, Compare, PlaceBatch, Repair ----------------------------------------------------------------------


def _evaluate(i: convert.EvaluateInputs) -> CostReport:
    report = evaluate(i.topology, i.state, i.job, i.mapping)  # InvalidMappingError
    checkpoint("evaluating the mapping")
    return report


EVALUATE: Rpc[pb.EvaluateRequest, convert.EvaluateInputs, CostReport, pb.EvaluateResponse] = Rpc(
    "Evaluate",
    parse=lambda request, _default_s, _resolved: convert.evaluate_inputs(request),
    options=None,
    work=_evaluate,
    render=lambda i, report, _budget: convert.evaluate_response(i.topology, i.job, i.mapping, report),
)
"""Evaluate: the cost of a given mapping; no search, so no time budget and no solves counted."""


def _compare_outcomes(_i: convert.CompareInputs, rows: CompareRows) -> list[Outcome]:
    return [("INFEASIBLE", None) if res is None else (res.status.value, res.gap) for _job, res, _ in rows]


def _compare_response(i: convert.CompareInputs, rows: CompareRows, budget: TimeBudget) -> pb.CompareResponse:
    index = {id(job): k for k, job in enumerate(i.jobs)}
    out = pb.CompareResponse()
    for job, res, reason in rows:
        if res is None:
            result = convert.infeasible_result(
                job, [reason or "no placement satisfies the hard rules"], i.options.strategy
            )
        else:
            result = convert.result_to_proto(
                i.topology, job, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
            )
        out.ranking.add(job_index=index[id(job)], result=result)
    return out


COMPARE: Rpc[pb.CompareRequest, convert.CompareInputs, CompareRows, pb.CompareResponse] = Rpc(
    "Compare",
    parse=convert.compare_inputs,
    jobs=lambda i: len(i.jobs),  # the time limit is per job
    work=lambda i: compare(i.topology, i.state, i.jobs, i.options),
    outcomes=_compare_outcomes,
    render=_compare_response,
    log="compared",
    log_fields=lambda i, _rows: {"jobs": len(i.jobs)},
)
"""Compare: each job placed alone on the same cluster and state, ranked."""


PLACE_BATCH: Rpc[pb.PlaceBatchRequest, convert_batch.BatchInputs, BatchResult, pb.PlaceBatchResponse] = Rpc(
    "PlaceBatch",
    parse=convert_batch.batch_inputs,
    # one search (`jobs` 1): the time limit covers the whole batch
    work=lambda i: place_batch(i.topology, i.state, i.jobs, i.options),
    outcomes=lambda _i, res: [("OPTIMAL" if res.admission_optimal else "FEASIBLE", None)],
    render=on_topology(convert_batch.batch_response),
    log="placed batch",
    log_fields=lambda i, res: {
        "jobs": len(i.jobs),
        "admitted": len(res.plan.admitted),
        "chosen": res.plan.strategy,
        "admitted_weight": res.plan.admitted_weight,
        "weighted_step_seconds": res.plan.weighted_step_seconds,
    },
    log_budget=("time_limit_s", "deadline_limited"),
)
"""PlaceBatch: which jobs of a queue to admit together, and where."""


def _repair(i: convert_repair.RepairInputs) -> RepairResult:
    # the arguments grouped by meaning: what is repaired, then how
    if i.serving is not None:  # a serving deployment: its answers priced by TPOT
        return repair_serving(
            i.topology, i.state, i.serving, i.current,
            drain=i.drain, spares=i.spares, spares_only=i.spares_only, budget=i.budget, options=i.options,
        )  # fmt: skip
    return repair(
        i.topology, i.state, i.job, i.current,
        drain=i.drain, spares=i.spares, spares_only=i.spares_only, budget=i.budget, options=i.options,
    )  # fmt: skip


REPAIR: Rpc[pb.RepairRequest, convert_repair.RepairInputs, RepairResult, pb.RepairResponse] = Rpc(
    "Repair",
    parse=convert_repair.repair_inputs,
    # one search (`jobs` 1): the time limit covers the whole repair
    work=_repair,
    outcomes=lambda _i, _res: [("FEASIBLE", None)],
    render=on_topology(convert_repair.repair_response),
    log="repaired",
    log_fields=lambda i, res: {
        "job": i.job.name,
        "ranks": i.job.ranks,
        "forced": len(res.forced),
        "min_moves": res.min_moves,
        "answers": len(res.answers),
    },
    log_budget=("time_limit_s",),
)
"""Repair: move a running job off failed or drained devices, fewest moves first."""


# ---- serving jobs: Place, Evaluate and Compare of requests that carry them ---------------------------------------

ServingRows = list[tuple[Any, ServingResult | None, str | None]]


def _place_serving(i: convert_serving.ServingPlaceInputs) -> ServingResult:
    return place_serving(i.topology, i.state, i.job, i.options)


def _placed_serving(i: convert_serving.ServingPlaceInputs, res: ServingResult) -> dict[str, Any]:
    return {
        "job": i.job.name,
        "ranks": i.job.ranks,
        "devices": i.topology.num_devices,
        "serving": True,
        "chosen": res.chosen,
        "tpot_s": res.report.tpot_seconds,
        "ttft_s": res.report.ttft_seconds,
    }


PLACE_SERVING: Rpc[pb.PlaceRequest, convert_serving.ServingPlaceInputs, ServingResult, pb.PlaceResponse] = (
    Rpc(
        "Place",
        parse=convert_serving.serving_place_inputs,
        work=_place_serving,
        outcomes=lambda _i, res: [(res.status or "FEASIBLE", None)],
        render=lambda i, res, budget: pb.PlaceResponse(
            result=convert_serving.serving_result(
                i.topology, i.job, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
            )
        ),
        log="placed",
        log_fields=_placed_serving,
        log_budget=("time_limit_s", "deadline_limited"),
        nothing_by_deadline=True,
    )
)
"""Place of a serving job (`placement.solve.serving.place_serving`): the answer by the serving objective among the
solver's, the baselines' and the serving-aware packing's mappings."""


def _evaluate_serving(i: convert_serving.ServingEvaluateInputs) -> ServingReport:
    report = evaluate_serving(i.topology, i.state, i.job, i.mapping)  # InvalidMappingError
    checkpoint("evaluating the mapping")
    return report


EVALUATE_SERVING: Rpc[
    pb.EvaluateRequest, convert_serving.ServingEvaluateInputs, ServingReport, pb.EvaluateResponse
] = Rpc(
    "Evaluate",
    parse=lambda request, _default_s, _resolved: convert_serving.serving_evaluate_inputs(request),
    options=None,
    work=_evaluate_serving,
    render=lambda i, report, _budget: convert_serving.serving_evaluate_response(
        i.topology, i.job, i.mapping, report
    ),
)
"""Evaluate of a serving job: the serving report of the given mapping, validated first against the job's rules."""


def _compare_serving_response(
    i: convert_serving.ServingCompareInputs, rows: ServingRows, budget: TimeBudget
) -> pb.CompareResponse:
    index = {id(job): k for k, job in enumerate(i.jobs)}
    out = pb.CompareResponse()
    for job, res, reason in rows:
        if res is None:
            result = pb.PlacementResult(
                job=job.name,
                status=pb.SOLVE_STATUS_INFEASIBLE,
                strategy="serving",
                explanation=[reason or "no placement satisfies the hard rules"],
            )
        else:
            result = convert_serving.serving_result(
                i.topology, job, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
            )
        out.ranking.add(job_index=index[id(job)], result=result)
    return out


COMPARE_SERVING: Rpc[
    pb.CompareRequest, convert_serving.ServingCompareInputs, ServingRows, pb.CompareResponse
] = Rpc(
    "Compare",
    parse=convert_serving.serving_compare_inputs,
    jobs=lambda i: len(i.jobs),  # the time limit is per job
    work=lambda i: compare_serving(i.topology, i.state, i.jobs, i.options),
    outcomes=lambda _i, rows: [
        ("INFEASIBLE", None) if res is None else (res.status or "FEASIBLE", None) for _job, res, _ in rows
    ],
    render=_compare_serving_response,
    log="compared",
    log_fields=lambda i, _rows: {"jobs": len(i.jobs), "serving": True},
)
"""Compare of serving jobs: each placed alone on the same cluster and state, ranked by the serving objective."""

SERVING_RPCS: dict[str, Rpc[Any, Any, Any, Any]] = {
    r.method: r
    for r in (
        PLACE_SERVING,
        EVALUATE_SERVING,
        COMPARE_SERVING,
        capacity_rpc(
            convert_serving.serving_capacity_inputs
        ),  # serving shapes counted as their ranks and rules
    )
}
"""The methods that serve a request carrying a serving job (`placement.messages.serving.carries_serving`) with
their serving form; the other methods (PlaceBatch, Repair, Preempt) refuse a serving job at its field
(docs/serving.md)."""


# ---- the servicer -----------------------------------------------------------------------------------------------


class PlacementServicer(pb_grpc.PlacementServiceServicer):
    """Each method runs its `Rpc` through the template (`RpcRunner.serve`) on the solve pool; the gRPC thread
    waits for it."""

    def __init__(
        self,
        settings: Settings,
        pool: SolvePool | None,
        metrics: Metrics,
        resolve: Callable[[Any], Resolved] | None = None,
        ends: Callable[[str], list[tuple[float, list[int]]]] | None = None,
    ) -> None:
        self.settings = settings
        self._metrics = metrics
        self.runner = RpcRunner(settings, metrics, pool, resolve)
        self.memo = AnswerMemo(settings.answer_memo)  # per process: each solve process has its own
        self._place = place_rpc(PlaceMemo(self.memo, metrics), ends or (lambda _cluster_id: []))
        self.rpcs: dict[str, Rpc[Any, Any, Any, Any]] = {
            r.method: r for r in (self._place, EVALUATE, COMPARE, PLACE_BATCH, REPAIR, PREEMPT, CAPACITY)
        }

    # ---- rpc methods --------------------------------------------------------------------------------------

    def Place(self, request: pb.PlaceRequest, context: grpc.ServicerContext) -> pb.PlaceResponse:
        spec: Rpc[pb.PlaceRequest, Any, Any, pb.PlaceResponse] = self._rpc_for("Place", request)
        return self._serve(spec, request, context)

    def Evaluate(self, request: pb.EvaluateRequest, context: grpc.ServicerContext) -> pb.EvaluateResponse:
        spec: Rpc[pb.EvaluateRequest, Any, Any, pb.EvaluateResponse] = self._rpc_for("Evaluate", request)
        return self._serve(spec, request, context)

    def Compare(self, request: pb.CompareRequest, context: grpc.ServicerContext) -> pb.CompareResponse:
        spec: Rpc[pb.CompareRequest, Any, Any, pb.CompareResponse] = self._rpc_for("Compare", request)
        return self._serve(spec, request, context)

    def PlaceBatch(
        self, request: pb.PlaceBatchRequest, context: grpc.ServicerContext
    ) -> pb.PlaceBatchResponse:
        return self._serve(PLACE_BATCH, request, context)

    def Repair(self, request: pb.RepairRequest, context: grpc.ServicerContext) -> pb.RepairResponse:
        return self._serve(REPAIR, request, context)

    def Preempt(self, request: pb.PreemptRequest, context: grpc.ServicerContext) -> pb.PreemptResponse:
        return self._serve(PREEMPT, request, context)

    def Capacity(self, request: pb.CapacityRequest, context: grpc.ServicerContext) -> pb.CapacityResponse:
        spec: Rpc[pb.CapacityRequest, Any, Any, pb.CapacityResponse] = self._rpc_for("Capacity", request)
        return self._serve(spec, request, context)

    def serve_here(self, method: str, request: Any, context: Any, stop: threading.Event) -> Any:
        """The response of RPC `method` computed in this thread (what a solve process does with its work item)."""
        return self.runner.serve(self._rpc_for(method, request), request, context, stop)

    def _rpc_for(self, method: str, request: Any) -> Rpc[Any, Any, Any, Any]:
        """The description of `method` for this request: its serving form when the request carries a serving job
        (`SERVING_RPCS`), else its own."""
        if method in SERVING_RPCS and convert_serving.carries_serving(request):
            return SERVING_RPCS[method]
        return self.rpcs[method]

    def stop_all(self) -> None:
        """Ask every running solve to return its best answer now (shutdown)."""
        self.runner.stop_all()

    def _serve(self, spec: Rpc[Req, Any, Any, Resp], request: Req, context: grpc.ServicerContext) -> Resp:
        remote = spec.method if spec.method in REMOTE_WORK else None

        def work(req: Req, ctx: Any, stop: threading.Event) -> Resp:
            return self.runner.serve(spec, req, ctx, stop)

        return self.runner.run(request, context, work, remote, self._check_limits)

    def _check_limits(self, request: object) -> None:
        """Limits of this servicer beyond the generic budget (server.budget, run by the interceptor)."""
        s = self.settings
        if isinstance(request, pb.CompareRequest | pb.PlaceBatchRequest) and len(request.jobs) > s.max_jobs:
            self._metrics.rejected.labels(limit="jobs").inc()
            raise LimitExceeded(
                "jobs", f"{len(request.jobs)} jobs in the request; this server accepts at most {s.max_jobs}"
            )
