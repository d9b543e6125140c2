"""Placement strategies behind one interface: `place(topology, state, job, options) -> PlacementResult`.

Strategies: the scheduler baselines (`placement.solve.baselines`: first-fit, kueue-tas, slurm-tree, slurm-block)
and ``cpsat`` (the optimizer, `placement.solve.cpsat`). Every result is re-scored by `placement.cost.evaluate.evaluate`,
checked by `placement.model.validate`, and carries every baseline's cost on the same state.
"""

from __future__ import annotations

from placement.solve.run import compare, place
from placement.solve.types import PlacementResult, SolveOptions, SolveStatus, StopEvent, Strategy

__all__ = ["PlacementResult", "SolveOptions", "SolveStatus", "StopEvent", "Strategy", "compare", "place"]
