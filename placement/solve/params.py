"""CP-SAT parameters in one place, and how a search is stopped: time or deterministic budget, workers, seed, log.

Every CP-SAT model of the solver (unit model, its neighbourhoods, the exact device model, the QAP model) is solved
through `run_cpsat`, so a request's options mean the same thing everywhere.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from ortools.sat.python import cp_model

from placement.solve.types import SolveOptions, StopEvent

__all__ = ["SCALE", "configure", "objective_scale", "run_cpsat"]

SCALE = 1e9  # objective units: nanoseconds per step, unless the costs are too large for 64-bit integers
SHORT_SOLVE_S = 0.5  # below this budget CP-SAT starts searching from the hint at once, without presolve
DETERMINISTIC_UNITS_PER_S = (
    1.0  # deterministic-time budget per second of `time_limit_s` (about 1 s on 2 cores)
)


def objective_scale(span: float) -> float | None:
    """Integer scale for CP-SAT: nanoseconds, or coarser so the whole objective stays below 1e15; None when the
    costs are not finite (no integer model can hold them)."""
    if not math.isfinite(span):
        return None
    return SCALE if span * SCALE < 1e15 else 1e15 / span


def configure(
    solver: cp_model.CpSolver,
    options: SolveOptions,
    time_limit: float,
    *,
    workers: int | None = None,
    presolve: bool = True,
) -> None:
    """Set the request's budget, workers, seed, gap and log on `solver` (see `SolveOptions`). `presolve=False`
    for neighbourhoods: they start from a complete hint, and presolve (not interruptible) can overrun a limit."""
    p = solver.parameters
    if options.deterministic:
        p.max_deterministic_time = max(0.01, time_limit * DETERMINISTIC_UNITS_PER_S)
        p.max_time_in_seconds = max(0.05, 20 * time_limit)  # a safety net only
    else:
        p.max_time_in_seconds = max(0.05, time_limit)
    if not presolve or (not options.deterministic and time_limit < SHORT_SOLVE_S):
        p.cp_model_presolve = (
            False  # presolve is not interruptible: on a short budget it can overrun the limit
        )
    n = max(1, options.workers if workers is None else workers)
    p.num_workers = n
    p.random_seed = options.seed
    p.catch_sigint_signal = False  # Ctrl-C belongs to the caller (CLI, server, sweep), not to CP-SAT
    if options.relative_gap:
        p.relative_gap_limit = options.relative_gap
    if n <= 1:
        p.interleave_search = True
    if options.log is not None:
        p.log_search_progress = True
        p.log_to_stdout = False
        solver.log_callback = options.log


def run_cpsat(solver: cp_model.CpSolver, model: cp_model.CpModel, stop: threading.Event | None) -> Any:
    """Solve `model`; `stop` ends the search with the best answer so far.

    A `StopEvent` calls `solver.stop_search` the moment it is set. A plain event is watched by a daemon thread
    that is never joined, so a finished solve returns at once (the watcher notices within 20 ms and exits).
    """
    if stop is None:
        return solver.solve(model)
    if stop.is_set():
        solver.parameters.max_time_in_seconds = 0.0
        return solver.solve(model)
    if isinstance(stop, StopEvent):
        stop.subscribe(solver.stop_search)
        try:
            return solver.solve(model)
        finally:
            stop.unsubscribe(solver.stop_search)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if stop.wait(0.02):
                if not done.is_set():
                    solver.stop_search()
                return

    threading.Thread(target=watch, name="cpsat-stop", daemon=True).start()
    try:
        return solver.solve(model)
    finally:
        done.set()
