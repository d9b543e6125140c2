"""The PlacementService servicer: limits, the solve pool, deadline and cancellation around `placement.solve`.

It only translates: placement.messages.domain builds the domain inputs, placement does the work, server.errors the status.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from placement.cost.evaluate import evaluate
from placement.cost.report import CostReport
from placement.decide.batch.joint import place_batch
from placement.decide.repair.run import repair
from placement.decide.wait import decide
from placement.errors import InfeasibleError
from placement.limits import checkpoint, current_call
from placement.messages import batch as convert_batch
from placement.messages import domain as convert
from placement.messages import repair as convert_repair
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve import PlacementResult, SolveOptions, StopEvent, compare, place
from placement.v1 import placement_pb2 as pb
from placement.v1 import placement_pb2_grpc as pb_grpc
from server.decisions import DecisionsMixin
from server.errors import Cancelled, DeadlineError, LimitExceeded, status_for
from server.memo import AnswerMemo
from server.pool import SolvePool
from server.settings import Settings
from server.telemetry import Metrics
from server.workers import REMOTE_WORK

__all__ = ["PlacementServicer"]

_log = logging.getLogger("placement.server")

_NO_DEADLINE_S = 1e7  # time_remaining() beyond this: the call has no deadline
_DEADLINE_SHARE = 0.9  # of the remaining time the solver may use (before the fixed margin)

R = TypeVar("R")
Req = TypeVar("Req")


def _step(res: PlacementResult) -> float | None:
    """The modeled step seconds of a result, for the logs."""
    return res.report.step_seconds if isinstance(res.report, CostReport) else None


@dataclass(frozen=True)
class _Budget:
    """The solver's time limit per job, whether the deadline set it, and when the watchdog stops the search."""

    limit_s: float
    deadline_limited: bool
    stop_at: float | None  # time.monotonic() value


class PlacementServicer(DecisionsMixin, pb_grpc.PlacementServiceServicer):
    """Place, Evaluate and Compare. Each call runs on the solve pool; the gRPC thread waits for it."""

    def __init__(
        self,
        settings: Settings,
        pool: SolvePool,
        metrics: Metrics,
        resolve: Callable[[Any], tuple[Topology, ClusterState] | None] | None = None,
        ends: Callable[[str], list[tuple[float, list[int]]]] | None = None,
    ) -> None:
        self._settings = settings
        self.settings = settings
        self._resolve = resolve or (lambda _request: None)  # cluster_id -> the registry's cluster and state
        self._ends = ends or (lambda _cluster_id: [])  # cluster_id -> expected ends of its live claims
        self._pool = pool
        self._metrics = metrics
        self._lock = threading.Lock()
        self._active: set[threading.Event] = set()
        self.memo = AnswerMemo(settings.answer_memo)  # per process: each solve worker has its own

    # ---- rpc methods --------------------------------------------------------------------------------------

    def Place(self, request: pb.PlaceRequest, context: grpc.ServicerContext) -> pb.PlaceResponse:
        return self._call(request, context, self._place)

    def Evaluate(self, request: pb.EvaluateRequest, context: grpc.ServicerContext) -> pb.EvaluateResponse:
        return self._call(request, context, self._evaluate)

    def Compare(self, request: pb.CompareRequest, context: grpc.ServicerContext) -> pb.CompareResponse:
        return self._call(request, context, self._compare)

    def PlaceBatch(
        self, request: pb.PlaceBatchRequest, context: grpc.ServicerContext
    ) -> pb.PlaceBatchResponse:
        return self._call(request, context, self._place_batch)

    def Repair(self, request: pb.RepairRequest, context: grpc.ServicerContext) -> pb.RepairResponse:
        return self._call(request, context, self._repair)

    def stop_all(self) -> None:
        """Ask every running solve to return its best answer now (shutdown)."""
        with self._lock:
            active = list(self._active)
        for ev in active:
            ev.set()

    # ---- plumbing -----------------------------------------------------------------------------------------

    def _call(
        self, request: Req, context: grpc.ServicerContext, work: Callable[[Req, Any, threading.Event], R]
    ) -> R:
        """Run `work` on the solve pool: the one line every RPC method needs. The interceptor has checked the
        request against the limits and set the call's deadline/cancellation (`placement.limits.current_call`),
        which the pool's thread inherits; an answer that comes after the call ended is not sent as OK."""
        stop = StopEvent()  # sets stop CP-SAT at once (no polling delay)
        context.add_callback(stop.set)  # the call ended (cancelled, deadline, done): stop the search
        with self._lock:
            self._active.add(stop)
        try:
            self._check_limits(request)
            size = request.ByteSize() if hasattr(request, "ByteSize") else 0
            processes = self._pool.processes
            name = getattr(work, "__name__", "")
            if processes is not None and name in REMOTE_WORK and not getattr(request, "cluster_id", ""):
                # a worker process converts and solves; a registry cluster (cluster_id) is resolved and
                # solved here, next to the registry
                remaining = context.time_remaining()
                deadline = (
                    time.monotonic() + remaining
                    if remaining is not None and remaining < _NO_DEADLINE_S
                    else None
                )
                call = current_call()

                def left() -> bool:
                    return (call is not None and call.cancelled.is_set()) or not context.is_active()

                remote: Future[R] = self._pool.submit(
                    lambda: processes.run(name, request, stop, deadline, left), size
                )
                result = remote.result()
            else:
                result = self._pool.submit(lambda: work(request, context, stop), size).result()
            checkpoint("sending the answer")
            return result
        except Exception as exc:
            context.abort_with_status(status_for(exc))
            raise AssertionError("abort_with_status returns by raising") from exc
        finally:
            with self._lock:
                self._active.discard(stop)

    def _reject(self, limit: str, description: str) -> LimitExceeded:
        self._metrics.rejected.labels(limit=limit).inc()
        return LimitExceeded(limit, description)

    def _check_limits(self, request: object) -> None:
        """Limits of this servicer beyond the generic budget (server.budget, run by the interceptor)."""
        s = self._settings
        if isinstance(request, pb.CompareRequest | pb.PlaceBatchRequest) and len(request.jobs) > s.max_jobs:
            raise self._reject(
                "jobs", f"{len(request.jobs)} jobs in the request; this server accepts at most {s.max_jobs}"
            )

    def _started(self, context: grpc.ServicerContext, stop: threading.Event) -> None:
        """At the start of the work: refuse it if the caller left or the deadline passed while it waited."""
        checkpoint("waiting for a solver")
        if stop.is_set() or not context.is_active():
            raise Cancelled("the call ended while it waited for a solver")
        if context.time_remaining() <= 0.001:
            raise DeadlineError("the deadline passed while the request waited for a solver")

    def _budget(self, requested_s: float, context: grpc.ServicerContext, jobs: int) -> _Budget:
        """The request's time limit (per job), capped by the server's maximum and the deadline's share."""
        limit = min(requested_s, self._settings.max_time_limit_s)
        remaining = context.time_remaining()
        if remaining is None or remaining > _NO_DEADLINE_S:
            return _Budget(limit, False, None)
        usable = max(remaining * _DEADLINE_SHARE - self._settings.deadline_margin_s, remaining * 0.5)
        per_job = usable / jobs
        return _Budget(min(limit, per_job), per_job < limit, time.monotonic() + usable)

    @contextmanager
    def _watchdog(self, budget: _Budget, stop: threading.Event) -> Iterator[None]:
        """Set `stop` when the deadline's share is used up, whatever the solver's own timer does."""
        if budget.stop_at is None:
            yield
            return
        timer = threading.Timer(max(0.0, budget.stop_at - time.monotonic()), stop.set)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _options(self, opts: SolveOptions, budget: _Budget, stop: threading.Event) -> SolveOptions:
        opts.time_limit_s = budget.limit_s
        opts.stop = stop
        opts.workers = self._settings.threads_per_solve
        return opts

    def _timed(
        self, method: str, budget: _Budget, stop: threading.Event, work: Callable[[], R]
    ) -> tuple[R, float]:
        """`work()` under the deadline's watchdog, its seconds observed in the solve-seconds metric of `method`."""
        t0 = time.perf_counter()
        with self._watchdog(budget, stop):
            res = work()
        elapsed = time.perf_counter() - t0
        self._metrics.solve_seconds.labels(method=method).observe(elapsed)
        return res, elapsed

    def _observe(self, method: str, status: str, gap: float | None) -> None:
        self._metrics.solves.labels(method=method, status=status).inc()
        if gap is not None and math.isfinite(gap):
            self._metrics.gap.observe(gap)

    # ---- work (on the solve pool) -------------------------------------------------------------------------

    def _place(
        self, request: pb.PlaceRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> pb.PlaceResponse:
        self._started(context, stop)
        resolved = self._resolve(request)
        inputs = convert.place_inputs(request, self._settings.default_time_limit_s, resolved)
        checkpoint("converting the request")
        budget = self._budget(inputs.options.time_limit_s, context, 1)
        opts = self._options(inputs.options, budget, stop)
        t0 = time.perf_counter()
        named = resolved[0] if resolved is not None else None  # a registry cluster: its answers are its own
        # a deadline-limited call gets a budget of its own: its answer is neither taken from nor kept in the memo
        key = (
            None
            if budget.deadline_limited or self.memo.entries <= 0
            else AnswerMemo.key(request, budget.limit_s, opts.workers, resolved)
        )
        kept = self.memo.get(key, named) if key is not None else None
        if kept is not None:
            self._metrics.memo_hits.labels(method="Place").inc()
            _log.info(
                "placed",
                extra={
                    "fields": {
                        "job": inputs.job.name,
                        "ranks": inputs.job.ranks,
                        "status": pb.SolveStatus.Name(kept.result.status).removeprefix("SOLVE_STATUS_"),
                        "memo": True,
                        "solve_s": round(time.perf_counter() - t0, 4),
                    }
                },
            )
            return kept
        try:
            with self._watchdog(budget, stop):
                res = decide(
                    inputs.topology,
                    inputs.state,
                    inputs.job,
                    opts,
                    max_slowdown=inputs.max_slowdown,
                    ends=lambda: self._ends(request.cluster_id) if request.cluster_id else [],
                    solve=place,  # the module's name: tests replace it
                )
        except InfeasibleError:
            elapsed = time.perf_counter() - t0
            if budget.deadline_limited and (stop.is_set() or elapsed >= 0.9 * budget.limit_s):
                raise DeadlineError(
                    f"no valid placement found within the deadline ({elapsed:.3f} s of search); "
                    "give a longer deadline"
                ) from None
            raise
        elapsed = time.perf_counter() - t0
        result = convert.result_to_proto(
            inputs.topology,
            inputs.job,
            res,
            time_limit_s=budget.limit_s,
            deadline_limited=budget.deadline_limited,
        )
        self._observe("Place", res.status.value, res.gap)
        self._metrics.solve_seconds.labels(method="Place").observe(elapsed)
        _log.info(
            "placed",
            extra={
                "fields": {
                    "job": inputs.job.name,
                    "ranks": inputs.job.ranks,
                    "devices": inputs.topology.num_devices,
                    "status": res.status.value,
                    "step_seconds": _step(res),
                    "comm_seconds": res.comm_seconds,
                    "gap": res.gap,
                    "solve_s": round(elapsed, 4),
                    "time_limit_s": budget.limit_s,
                    "deadline_limited": budget.deadline_limited,
                }
            },
        )
        response = pb.PlaceResponse(result=result)
        if key is not None and not stop.is_set():  # a search cut short by a stop is not the request's answer
            self.memo.put(key, response, named)
        return response

    def _evaluate(
        self, request: pb.EvaluateRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> pb.EvaluateResponse:
        self._started(context, stop)
        inputs = convert.evaluate_inputs(request)
        checkpoint("converting the request")
        t0 = time.perf_counter()
        report = evaluate(inputs.topology, inputs.state, inputs.job, inputs.mapping)  # InvalidMappingError
        checkpoint("evaluating the mapping")
        self._metrics.solve_seconds.labels(method="Evaluate").observe(time.perf_counter() - t0)
        return convert.evaluate_response(inputs.topology, inputs.job, inputs.mapping, report)

    def _compare(
        self, request: pb.CompareRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> pb.CompareResponse:
        self._started(context, stop)
        inputs = convert.compare_inputs(request, self._settings.default_time_limit_s, self._resolve(request))
        checkpoint("converting the request")
        budget = self._budget(inputs.options.time_limit_s, context, len(inputs.jobs))
        opts = self._options(inputs.options, budget, stop)
        t0 = time.perf_counter()
        with self._watchdog(budget, stop):
            rows = compare(inputs.topology, inputs.state, inputs.jobs, opts)
        index = {id(job): i for i, job in enumerate(inputs.jobs)}
        out = pb.CompareResponse()
        for job, res, reason in rows:
            if res is None:
                result = convert.infeasible_result(
                    job, [reason or "no placement satisfies the hard rules"], opts.strategy
                )
                self._observe("Compare", "INFEASIBLE", None)
            else:
                result = convert.result_to_proto(
                    inputs.topology,
                    job,
                    res,
                    time_limit_s=budget.limit_s,
                    deadline_limited=budget.deadline_limited,
                )
                self._observe("Compare", res.status.value, res.gap)
            out.ranking.add(job_index=index[id(job)], result=result)
        elapsed = time.perf_counter() - t0
        self._metrics.solve_seconds.labels(method="Compare").observe(elapsed)
        _log.info("compared", extra={"fields": {"jobs": len(inputs.jobs), "solve_s": round(elapsed, 4)}})
        return out

    def _place_batch(
        self, request: pb.PlaceBatchRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> pb.PlaceBatchResponse:
        self._started(context, stop)
        inputs = convert_batch.batch_inputs(
            request, self._settings.default_time_limit_s, self._resolve(request)
        )
        checkpoint("converting the request")
        budget = self._budget(inputs.options.time_limit_s, context, 1)  # the limit covers the whole batch
        opts = self._options(inputs.options, budget, stop)
        res, elapsed = self._timed(
            "PlaceBatch", budget, stop, lambda: place_batch(inputs.topology, inputs.state, inputs.jobs, opts)
        )
        self._observe("PlaceBatch", "OPTIMAL" if res.admission_optimal else "FEASIBLE", None)
        _log.info(
            "placed batch",
            extra={
                "fields": {
                    "jobs": len(inputs.jobs),
                    "admitted": len(res.plan.admitted),
                    "chosen": res.plan.strategy,
                    "admitted_weight": res.plan.admitted_weight,
                    "weighted_step_seconds": res.plan.weighted_step_seconds,
                    "solve_s": round(elapsed, 4),
                    "time_limit_s": budget.limit_s,
                    "deadline_limited": budget.deadline_limited,
                }
            },
        )
        return convert_batch.batch_response(
            inputs.topology, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
        )

    def _repair(
        self, request: pb.RepairRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> pb.RepairResponse:
        self._started(context, stop)
        inputs = convert_repair.repair_inputs(
            request, self._settings.default_time_limit_s, self._resolve(request)
        )
        checkpoint("converting the request")
        budget = self._budget(inputs.options.time_limit_s, context, 1)  # the limit covers the whole repair
        opts = self._options(inputs.options, budget, stop)
        res, elapsed = self._timed(
            "Repair",
            budget,
            stop,
            lambda: repair(
                inputs.topology,
                inputs.state,
                inputs.job,
                inputs.current,
                drain=inputs.drain,
                spares=inputs.spares,
                spares_only=inputs.spares_only,
                budget=inputs.budget,
                options=opts,
            ),
        )
        self._observe("Repair", "FEASIBLE", None)
        _log.info(
            "repaired",
            extra={
                "fields": {
                    "job": inputs.job.name,
                    "ranks": inputs.job.ranks,
                    "forced": len(res.forced),
                    "min_moves": res.min_moves,
                    "answers": len(res.answers),
                    "solve_s": round(elapsed, 4),
                    "time_limit_s": budget.limit_s,
                }
            },
        )
        return convert_repair.repair_response(
            inputs.topology, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
        )
