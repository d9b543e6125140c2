"""Serving jobs inside the decisions (PlaceBatch, Repair, Preempt): a serving job's step is one decode step, so its
step seconds are its time per output token, and it is placed and priced by the serving objective.

Owns `decode_step_report` (a `ServingReport` as the `CostReport` the decisions rank by) and `place_decode_step`
(`placement.solve.serving.place_serving` seen from a decision). The decisions carry the serving job's explicit job
(`placement.solve.serving.serving_traffic_job`: its ranks, groups and rules), so their validation, occupancy,
knapsack and move programs work unchanged; only the placing and the pricing are the serving model's.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.cost.report import CostReport
from placement.cost.serving import ServingReport, model_serving
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve.serving import place_serving
from placement.solve.types import SolveOptions

__all__ = ["COMPUTE_TIERS", "decode_step_report", "place_decode_step", "price_decode_step"]

COMPUTE_TIERS = frozenset({"hbm", "compute"})
"""Bottleneck tiers of a serving phase that are the device's, not a link's (the decode roofline)."""


def decode_step_report(report: ServingReport) -> CostReport:
    """The decode step of a serving report as a `CostReport`: ``step_seconds`` is the TPOT (one decode step emits
    one token per request), ``comm_seconds`` the decode phases on links (TP all-reduces, EP dispatch and combine,
    PP sends) by phase and tier, ``compute_seconds`` the roofline, ``tokens_per_s`` the deployment's."""
    out = CostReport(step_seconds=report.tpot_seconds, tokens_per_s=report.tokens_per_s)
    compute = 0.0
    for p in report.phases:
        if p.stage != "decode":
            continue
        if p.tier in COMPUTE_TIERS:
            compute += p.seconds
        else:
            out.add(p.phase, p.tier, p.seconds)
    out.comm_seconds_total = out.comm_seconds
    out.compute_seconds = compute
    return out


def price_decode_step(
    topology: Topology, state: ClusterState, job: ServingJob, mapping: Sequence[int]
) -> tuple[CostReport, ServingReport]:
    """`job` on `mapping` by the serving model, and its decode step (`decode_step_report`)."""
    rep = model_serving(topology, state, job, mapping)
    return decode_step_report(rep), rep


def place_decode_step(
    topology: Topology, state: ClusterState, job: ServingJob, options: SolveOptions | None = None
) -> tuple[list[int], CostReport, ServingReport]:
    """`job` placed on `state` by the serving objective (`place_serving`: the best of the solver's, the baselines'
    and the serving-aware packing's mappings), with its decode step and serving report. Raises `InfeasibleError`
    when no mapping keeps the job's rules."""
    res = place_serving(topology, state, job, options)
    return list(res.mapping), decode_step_report(res.report), res.report
