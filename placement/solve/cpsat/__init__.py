"""The ``cpsat`` strategy: CP-SAT on a coarsened unit model, from the best baseline or candidate, then LNS.

Coarsening: ranks that must (or, for the heaviest label such as TP, should) share a host become units; groups and
edges that touch the same units are summed into one term; interchangeable hosts and level-1 domains are pruned.
The objective is the linear level form of the surrogate (`placement.cost.surrogate.surrogate_seconds`). Small models are
solved whole (proven optimal when the coarsening is exact); when units cannot all be whole, level-1 domains are
the slots and a unit beyond a domain's whole-host capacity pays its split; large models are improved by
large-neighbourhood search (`placement.solve.cpsat.lns`). Hosts with non-uniform links are refined last.
"""

from placement.solve.cpsat.solve import CpsatOutcome, solve_cpsat

__all__ = ["CpsatOutcome", "solve_cpsat"]
