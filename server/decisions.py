"""The Preempt and Capacity methods of the PlacementService servicer, as a mixin of `server.servicer.PlacementServicer`
(which supplies the solve pool, the limits, the deadline budget and the status of a failed call).

It only translates: placement.messages.decisions converts, placement.decide.preempt and .capacity decide.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from placement.decide.capacity import capacity
from placement.decide.preempt import preempt
from placement.limits import checkpoint
from placement.messages import decisions as convert_decisions
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve import SolveOptions
from placement.v1 import placement_pb2 as pb
from server.settings import Settings
from server.telemetry import Metrics

__all__ = ["DecisionsMixin"]

_log = logging.getLogger("placement.server")

R = TypeVar("R")
Req = TypeVar("Req")


class DecisionsMixin:
    """Preempt and Capacity. The servicer that mixes this in supplies what is declared under TYPE_CHECKING."""

    if TYPE_CHECKING:  # supplied by server.servicer.PlacementServicer
        _settings: Settings
        _metrics: Metrics
        _resolve: Callable[[Any], tuple[Topology, ClusterState] | None]

        def _call(
            self, request: Req, context: grpc.ServicerContext, work: Callable[[Req, Any, threading.Event], R]
        ) -> R: ...

        def _started(self, context: grpc.ServicerContext, stop: threading.Event) -> None: ...

        def _budget(self, requested_s: float, context: grpc.ServicerContext, jobs: int) -> Any: ...

        def _options(self, opts: SolveOptions, budget: Any, stop: threading.Event) -> SolveOptions: ...

        def _observe(self, method: str, status: str, gap: float | None) -> None: ...

        def _timed(
            self, method: str, budget: Any, stop: threading.Event, work: Callable[[], R]
        ) -> tuple[R, float]: ...

    def Preempt(self, request: pb.PreemptRequest, context: grpc.ServicerContext) -> pb.PreemptResponse:
        return self._call(request, context, self._preempt)

    def Capacity(self, request: pb.CapacityRequest, context: grpc.ServicerContext) -> pb.CapacityResponse:
        return self._call(request, context, self._capacity)

    def _preempt(
        self, request: pb.PreemptRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> pb.PreemptResponse:
        self._started(context, stop)
        inputs = convert_decisions.preempt_inputs(
            request, self._settings.default_time_limit_s, self._resolve(request)
        )
        checkpoint("converting the request")
        budget = self._budget(inputs.options.time_limit_s, context, 1)  # the limit covers the whole search
        opts = self._options(inputs.options, budget, stop)
        res, elapsed = self._timed(
            "Preempt",
            budget,
            stop,
            lambda: preempt(
                inputs.topology,
                inputs.state,
                inputs.job,
                inputs.running,
                job_priority=inputs.priority,
                max_step_seconds=inputs.max_step_seconds,
                max_slowdown=inputs.max_slowdown,
                objective=inputs.objective,
                options=opts,
                max_checks=inputs.max_checks,
            ),
        )
        self._observe("Preempt", "OPTIMAL" if res.proven else "FEASIBLE", None)
        _log.info(
            "preempt",
            extra={
                "fields": {
                    "job": inputs.job.name,
                    "victims": res.chosen.count,
                    "gpu_hours": res.chosen.gpu_hours,
                    "answers": len(res.answers),
                    "proven": res.proven,
                    "solve_s": round(elapsed, 4),
                    "time_limit_s": budget.limit_s,
                }
            },
        )
        return convert_decisions.preempt_response(
            inputs.topology, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
        )

    def _capacity(
        self, request: pb.CapacityRequest, context: grpc.ServicerContext, stop: threading.Event
    ) -> pb.CapacityResponse:
        self._started(context, stop)
        inputs = convert_decisions.capacity_inputs(
            request, self._settings.default_time_limit_s, self._resolve(request)
        )
        checkpoint("converting the request")
        copies = max(1, inputs.place_copies * max(1, len(inputs.shapes)))
        budget = self._budget(inputs.options.time_limit_s, context, copies)  # the limit is per placed copy
        opts = self._options(inputs.options, budget, stop)
        res, elapsed = self._timed(
            "Capacity",
            budget,
            stop,
            lambda: capacity(
                inputs.topology, inputs.state, inputs.shapes, place_copies=inputs.place_copies, options=opts
            ),
        )
        _log.info(
            "capacity",
            extra={
                "fields": {
                    "shapes": len(inputs.shapes),
                    "copies": [s.copies for s in res.shapes],
                    "solve_s": round(elapsed, 4),
                }
            },
        )
        return convert_decisions.capacity_response(
            inputs.topology, res, time_limit_s=budget.limit_s, deadline_limited=budget.deadline_limited
        )
