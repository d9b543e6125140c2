"""What-if sweeps: a grid of job shapes, occupancy, cluster variants, strategies and time limits, run in parallel.

One module per concern, re-exported here: the sweep file format, the grid and its stable point keys
(`placement.sim.whatif.spec`), the axes (`axes`), the job shapes and the memory check (`shapes`), the cluster variants
(`variants`), the run (`run`), its CSV appended row by row, resumable (`results`), the ranked tables (`report`)
and the plots (`plots`).

The file format, the CSV columns and a measured example are in docs/whatif.md. Points of one state and strategy
are evaluated by `placement.solve.run.compare`, the function behind the gRPC Compare RPC.
"""

from __future__ import annotations

from placement.sim.executors import default_workers
from placement.sim.whatif.axes import AXES, MODES, STRATEGIES, canonical_strategy, known_strategies
from placement.sim.whatif.plots import plot_sweep
from placement.sim.whatif.report import ranked_tables
from placement.sim.whatif.results import OUTPUT_COLUMNS, csv_columns, read_results
from placement.sim.whatif.run import (
    TASK_SECONDS,
    SweepRun,
    Task,
    build_state,
    evaluate_task,
    plan_tasks,
    run_sweep,
)
from placement.sim.whatif.shapes import (
    Shape,
    activation_gb,
    batch_problem,
    device_memory_gb,
    factorizations,
    global_micro_batches,
    model_state_gb,
    shape_job_doc,
)
from placement.sim.whatif.spec import Point, Sweep, load_sweep, sweep_from_dict
from placement.sim.whatif.variants import Variant

__all__ = [
    "AXES",
    "MODES",
    "OUTPUT_COLUMNS",
    "STRATEGIES",
    "TASK_SECONDS",
    "Point",
    "Shape",
    "Sweep",
    "SweepRun",
    "Task",
    "Variant",
    "activation_gb",
    "batch_problem",
    "build_state",
    "canonical_strategy",
    "csv_columns",
    "default_workers",
    "device_memory_gb",
    "evaluate_task",
    "factorizations",
    "global_micro_batches",
    "known_strategies",
    "load_sweep",
    "model_state_gb",
    "plan_tasks",
    "plot_sweep",
    "ranked_tables",
    "read_results",
    "run_sweep",
    "shape_job_doc",
    "sweep_from_dict",
]
