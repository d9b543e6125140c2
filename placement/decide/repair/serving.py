"""Repair of a serving deployment after failures: `repair_serving` moves the ranks of the affected replicas off
failed or drained devices with few moves, and ranks its answers by time per output token.

The move programs are `placement.decide.repair.run.repair`'s on the deployment's explicit job
(`placement.solve.serving.serving_traffic_job`), whose EP groups prefer the lowest domain that holds them (an NVLink
domain where they fit): among the mappings with the fewest moves the least one keeps a replaced rank inside its EP
group's domain when a free device there allows. Every answer is then priced by the serving model
(`placement.decide.serving.price_decode_step`: its step is its TPOT), and the front and the recommended answer are
chosen again on that price.
"""

from __future__ import annotations

from collections.abc import Sequence

from placement.decide.repair.input import RepairBudget, repair_state, resolve_selectors
from placement.decide.repair.run import RepairAnswer, RepairResult, pareto_front, recommend, repair
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
    budget = budget or RepairBudget()
    explicit = serving_traffic_job(topology, state, job)
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
    )
    drained, _ = resolve_selectors(topology, drain, "drain")  # checked by `repair`
    rstate, _ = repair_state(topology, state, explicit, current, drained)

    def priced(a: RepairAnswer) -> RepairAnswer:
        a.report, a.serving = price_decode_step(topology, rstate, job, a.mapping)
        return a

    answers = [priced(a) for a in res.answers]
    if res.replace is not None and all(res.replace is not a for a in answers):
        priced(res.replace)
    front = pareto_front([*answers, *([res.replace] if res.replace is not None else [])])
    res.answers = front
    res.recommended = recommend(front, budget)
    res.before, res.before_serving = price_decode_step(topology, rstate, job, current)
    res.stats["priced_by"] = "serving: step seconds are the time per output token"
    return res
