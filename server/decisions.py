"""The scheduler's decision RPCs of the PlacementService, Preempt and Capacity, each described once as a
`server.rpc.Rpc`; `server.servicer.PlacementServicer` serves them with the same template as Place.

It only translates: placement.messages.decisions converts, placement.decide.preempt and .capacity decide.
"""

from __future__ import annotations

from collections.abc import Callable

from placement.decide.capacity import CapacityResult, capacity
from placement.decide.preempt import PreemptResult, preempt
from placement.messages import decisions as convert_decisions
from placement.v1 import placement_pb2 as pb
from server.rpc import Resolved, Rpc, on_topology

__all__ = ["CAPACITY", "PREEMPT", "capacity_rpc"]


def _preempt(i: convert_decisions.PreemptInputs) -> PreemptResult:
    # the arguments grouped by meaning: what is decided, then the bounds, then how
    return preempt(
        i.topology, i.state, i.job, i.running,
        job_priority=i.priority, max_step_seconds=i.max_step_seconds, max_slowdown=i.max_slowdown,
        objective=i.objective, options=i.options, max_checks=i.max_checks, serving=i.serving,
    )  # fmt: skip


PREEMPT: Rpc[pb.PreemptRequest, convert_decisions.PreemptInputs, PreemptResult, pb.PreemptResponse] = Rpc(
    "Preempt",
    parse=convert_decisions.preempt_inputs,
    # one search (`jobs` 1): the time limit covers all the checks
    work=_preempt,
    outcomes=lambda _i, res: [("OPTIMAL" if res.proven else "FEASIBLE", None)],
    render=on_topology(convert_decisions.preempt_response),
    log="preempt",
    log_fields=lambda i, res: {
        "job": i.job.name,
        "victims": res.chosen.count,
        "gpu_hours": res.chosen.gpu_hours,
        "answers": len(res.answers),
        "proven": res.proven,
    },
    log_budget=("time_limit_s",),
)
"""Preempt: the victims whose preemption lets a job be placed, at the least cost."""


def capacity_rpc(
    parse: Callable[[pb.CapacityRequest, float, Resolved], convert_decisions.CapacityInputs],
) -> Rpc[pb.CapacityRequest, convert_decisions.CapacityInputs, CapacityResult, pb.CapacityResponse]:
    """Capacity with the request converted by `parse` (the serving form reads serving shapes as their ranks)."""
    return Rpc(
        "Capacity",
        parse=parse,
        jobs=lambda i: max(1, i.place_copies * max(1, len(i.shapes))),  # the limit is per placed copy
        work=lambda i: capacity(
            i.topology, i.state, i.shapes, place_copies=i.place_copies, options=i.options
        ),
        render=on_topology(convert_decisions.capacity_response),
        log="capacity",
        log_fields=lambda i, res: {"shapes": len(i.shapes), "copies": [s.copies for s in res.shapes]},
    )


CAPACITY = capacity_rpc(convert_decisions.capacity_inputs)
"""Capacity: how many more copies of each job shape fit now (no solves counted: it answers counts)."""
