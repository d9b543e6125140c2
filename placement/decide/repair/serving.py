"""Repair of a serving deployment after failures: `repair_serving` moves the ranks of the affected replicas off
failed or drained devices with few moves, and ranks its answers by time per output token.

The move programs are `placement.decide.repair.run.repair`'s on the deployment's explicit job
(`placement.solve.serving.serving_traffic_job`), whose EP groups prefer the lowest domain that holds them (an NVLink
domain where they fit): among the mappings with the fewest moves the least one keeps a replaced rank inside its EP
group's domain when a free device there allows. Every answer is then priced by the serving model
(`placement.decide.serving.price_decode_step`: its step is its TPOT) as the search realizes it (`repair`'s
`price`), so the front and the recommended answer are chosen on that price among every answer found.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.cost.report import CostReport
from placement.cost.serving import ServingReport
from placement.decide.repair.input import RepairBudget
from placement.decide.repair.run import RepairResult, repair
from placement.decide.serving import price_decode_step
from placement.model.serving import ServingJob
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.solve.serving import serving_traffic_job
from placement.solve.types import SolveOptions

__all__ = ["repair_serving"]


def repair_serving(
    topology: Topology,
    state: ClusterState,
    job: ServingJob,
    current: Sequence[int],
    *,
    drain: Sequence[str] = (),
    spares: Sequence[str] = (),
    spares_only: bool = False,
    budget: RepairBudget | None = None,
    options: SolveOptions | None = None,
    points: int = 3,
) -> RepairResult:
    """Repair the serving deployment `job` running on `current` (device index per rank; module doc). The answers'
    `report` is their decode step (``step_seconds`` = TPOT) and `serving` their serving report on the repair
    state (failed and drained devices out); `before_serving` prices the current mapping there. `budget`'s
    ``horizon_steps`` counts output tokens still to decode. Raises as `repair` does."""
    explicit = serving_traffic_job(topology, state, job)

    def price(rstate: ClusterState, mapping: Sequence[int]) -> tuple[CostReport, ServingReport | None]:
        return price_decode_step(topology, rstate, job, mapping)

    res = repair(
        topology,
        state,
        explicit,
        current,
        drain=drain,
        spares=spares,
        spares_only=spares_only,
        budget=budget,
        options=options,
        points=points,
        price=price,
    )
    res.stats["priced_by"] = "serving: step seconds are the time per output token"
    return res
