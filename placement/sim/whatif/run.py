"""Running a what-if sweep's points: their cluster states, tasks of points that share a state, and spawned worker
processes whose rows go to the results CSV (`placement.sim.whatif.results`: appended row by row, resumable). Owns
`run_sweep` and `evaluate_task`; `placement.sim.whatif` re-exports them. A serving sweep's points run through
`run_serving_sweep` (one `placement.solve.serving.place_serving` per point; their CSV columns `SERVING_COLUMNS`).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement.cost.report import CostReport
from placement.errors import InfeasibleError
from placement.io.export import baseline_costs
from placement.io.native import cluster_from_dict, job_from_dict, merge_states, state_from_dict
from placement.io.native.serving import serving_job_from_dict
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.sim.digest import digest
from placement.sim.executors import Executor, LocalExecutor, default_workers
from placement.sim.scenarios import occupy
from placement.sim.whatif.axes import DEFAULT_TIME_LIMIT
from placement.sim.whatif.results import ResultSink, csv_columns, fmt, fold_unknown, input_row, read_results
from placement.sim.whatif.shapes import Shape, device_memory_gb, shape_job_doc
from placement.solve import SolveOptions, Strategy
from placement.solve.baselines import BASELINES
from placement.solve.run import compare
from placement.solve.serving import place_serving

if TYPE_CHECKING:
    from placement.sim.whatif.spec import Point, ServingSweep, Sweep

__all__ = [
    "SERVING_COLUMNS",
    "TASK_SECONDS",
    "ServingRun",
    "ServingTask",
    "SweepRun",
    "Task",
    "build_state",
    "evaluate_serving_task",
    "evaluate_task",
    "plan_tasks",
    "run_serving_sweep",
    "run_sweep",
]


TASK_SECONDS = 6.0
"""About how much solver time limit one task (one `compare` call) holds."""


# ---- evaluating points --------------------------------------------------------------------------------------


def build_state(
    topology: Topology,
    static: ClusterState | None,
    state_doc: Mapping[str, Any] | None,
    *,
    occupancy: float,
    mode: str,
    seed: int,
    failed: float,
    source: str = "<state>",
) -> ClusterState:
    """The base state (file, plus the cluster's fault domains), other jobs on about `occupancy` of the devices
    (`placement.sim.scenarios.occupy`), and round(`failed` * devices) failed devices drawn with `seed`."""

    base = merge_states(
        static, state_from_dict(state_doc, topology, source) if state_doc is not None else ClusterState()
    )
    occupied = dict(occupy(topology, occupancy, seed=seed, mode=mode).occupied) if occupancy > 0 else {}
    occupied.update(base.occupied)
    dead = set(base.failed)
    if failed > 0:
        rng = random.Random(f"failed:{seed}")
        dead.update(rng.sample(range(topology.num_devices), round(failed * topology.num_devices)))
    return replace(base, occupied=occupied, failed=frozenset(dead))


@dataclass(frozen=True)
class Task:
    """Points that share one cluster state, strategy and time limit: evaluated together by `compare`.

    Plain data, so that it pickles to a spawned worker process.
    """

    cluster_doc: Mapping[str, Any]
    cluster_hash: str
    cluster_dir: str
    state_doc: Mapping[str, Any] | None
    job_doc: Mapping[str, Any]
    source: str
    occupancy: float
    mode: str
    seed: int
    failed: float
    strategy: str
    time_limit_s: float | None
    solver_workers: int
    solver_seed: int
    relative_gap: float
    points: tuple[tuple[str, Shape | None], ...]
    weight: float = 1.0
    keep_global_batch: bool = True
    deterministic: bool = False


_TOPOLOGIES: dict[str, tuple[Topology, ClusterState | None]] = {}


def _topology(task: Task) -> tuple[Topology, ClusterState | None]:
    """The task's cluster, built once per process."""

    hit = _TOPOLOGIES.get(task.cluster_hash)
    if hit is None:
        hit = cluster_from_dict(task.cluster_doc, f"{task.source}: cluster", Path(task.cluster_dir))
        _TOPOLOGIES[task.cluster_hash] = hit
    return hit


def _outputs(res: Any, reason: str | None, free: int) -> dict[str, str]:
    """A point's output columns from a `PlacementResult` (None: infeasible with `reason`)."""
    out: dict[str, str] = {"free_devices": str(free)}
    if res is None:
        out.update(status="INFEASIBLE", error=reason or "")
        return out

    rep = res.report
    out.update(
        status=res.status.value,
        lower_bound=fmt(res.lower_bound),
        gap=fmt(res.gap),
        wall_s=fmt(float(res.stats.get("wall_s", 0.0))),
        error="",
    )
    if not isinstance(rep, CostReport):
        return out
    step, comm = rep.step_seconds, rep.comm_seconds
    out.update(
        step_seconds=fmt(step),
        comm_seconds=fmt(comm),
        comm_seconds_total=fmt(rep.comm_seconds_total),
        compute_seconds=fmt(rep.compute_seconds),
        bubble_seconds=fmt(rep.bubble_seconds),
        mfu=fmt(rep.mfu),
        tokens_per_s=fmt(rep.tokens_per_s),
        seconds_per_step=fmt(comm),
    )
    for b, cost in baseline_costs(rep, res.baselines, res.baseline_reports).items():
        col = b.replace("-", "_")
        b_comm, b_step = cost["comm_seconds"], cost["step_seconds"]
        out[f"baseline_{col}_s"] = fmt(b_comm)
        out[f"baseline_{col}_step_s"] = fmt(b_step)
        if b_comm is not None and b_comm > 0:
            out[f"improvement_vs_{col}"] = fmt((b_comm - comm) / b_comm)
        if b_step is not None and b_step > 0:
            out[f"step_improvement_vs_{col}"] = fmt((b_step - step) / b_step)
    for lab, s in rep.by_label.items():
        out[f"label_{lab}_s"] = fmt(s)
    for tier, s in rep.by_tier.items():
        out[f"tier_{tier}_s"] = fmt(s)
    return out


def evaluate_task(task: Task) -> list[tuple[str, dict[str, str]]]:
    """Build the task's cluster, state and jobs and rank the jobs with `placement.solve.run.compare`.

    Returns (point key, output columns) per point. A job that breaks the solver (not merely infeasible) gets
    status ERROR and the exception in `error`; the other jobs of the task still run.
    """

    topo, static = _topology(task)
    state = build_state(
        topo,
        static,
        task.state_doc,
        occupancy=task.occupancy,
        mode=task.mode,
        seed=task.seed,
        failed=task.failed,
        source=f"{task.source}: state",
    )
    jobs: list[Job] = []
    key_of: dict[str, str] = {}
    for key, shape in task.points:
        job = job_from_dict(
            shape_job_doc(task.job_doc, shape, keep_global_batch=task.keep_global_batch),
            f"{task.source}: job",
        )
        jobs.append(job)
        key_of[job.name] = key
    kind = jobs[0].device_kind if jobs else None
    free = sum(1 for d in topo.devices if (kind is None or d.kind == kind) and state.usable(d.index))
    opts = SolveOptions(
        strategy=Strategy(task.strategy),
        time_limit_s=task.time_limit_s or DEFAULT_TIME_LIMIT,
        relative_gap=task.relative_gap,
        seed=task.solver_seed,
        workers=task.solver_workers,
        deterministic=task.deterministic,
    )
    out: dict[str, dict[str, str]] = {}
    try:
        ranked = compare(topo, state, jobs, opts)
    except Exception:  # one bad job must not take the others down: retry one by one
        ranked = []
        for job in jobs:
            try:
                ranked.extend(compare(topo, state, [job], opts))
            except Exception as e:
                out[key_of[job.name]] = {
                    "status": "ERROR",
                    "error": f"{type(e).__name__}: {e}",
                    "free_devices": str(free),
                }
    for job, res, reason in ranked:
        out[key_of[job.name]] = _outputs(res, reason, free)
    return [(k, out[k]) for k, _ in task.points if k in out]


def plan_tasks(sweep: Sweep, todo: set[str], workers: int) -> list[Task]:
    """Group the points to run by (variant, occupancy, mode, seed, failed, strategy, time limit), split big groups
    so that there are at least 4 tasks per worker and no task holds much more than `TASK_SECONDS` of solver time
    (progress, Ctrl-C and --resume work per task), longest first."""
    groups: dict[tuple[Any, ...], list[Point]] = {}
    seen: set[str] = set()
    for p in sweep.points:
        if p.key not in todo or p.key in seen:
            continue
        seen.add(p.key)
        gk = (p.variant, p.occupancy, p.mode, p.seed, p.failed, p.strategy, p.time_limit_s)
        groups.setdefault(gk, []).append(p)

    def weight(p: Point) -> float:
        return (p.time_limit_s or DEFAULT_TIME_LIMIT) if p.strategy == "cpsat" else 0.05

    total_w = sum(weight(p) for ps in groups.values() for p in ps) or 1.0
    target = max(4 * max(1, workers), math.ceil(total_w / TASK_SECONDS))
    vhash = [digest(vd) for vd in sweep.variant_docs]
    tasks: list[Task] = []
    for (vi, occ, mode, seed, fail, strat, tl), pts in groups.items():
        gw = sum(weight(p) for p in pts)
        splits = max(1, min(len(pts), math.ceil(target * gw / total_w)))
        size = math.ceil(len(pts) / splits)
        for i in range(0, len(pts), size):
            chunk = pts[i : i + size]
            tasks.append(
                Task(
                    cluster_doc=sweep.variant_docs[vi],
                    cluster_hash=vhash[vi],
                    cluster_dir=sweep.cluster_dir,
                    state_doc=sweep.state_doc,
                    job_doc=sweep.job_doc,
                    source=sweep.source,
                    occupancy=occ,
                    mode=mode,
                    seed=seed,
                    failed=fail,
                    strategy=strat,
                    time_limit_s=tl,
                    solver_workers=sweep.solver_workers,
                    solver_seed=sweep.solver_seed,
                    relative_gap=sweep.relative_gap,
                    points=tuple((p.key, p.shape) for p in chunk),
                    weight=sum(weight(p) for p in chunk),
                    keep_global_batch=sweep.keep_global_batch,
                    deterministic=sweep.solver_deterministic,
                )
            )
    tasks.sort(key=lambda t: -t.weight)
    return tasks


@dataclass
class SweepRun:
    """What `run_sweep` did: the CSV, how many distinct points there are, how many ran now and before."""

    csv_path: Path
    total: int
    skipped: int
    executed: int = 0
    interrupted: bool = False
    rows: dict[str, dict[str, str]] = field(default_factory=dict)
    """Finished rows of this sweep's points, by key (those of earlier runs included)."""


def run_sweep(
    sweep: Sweep,
    out_dir: str | Path,
    *,
    workers: int | None = None,
    resume: bool = False,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
) -> SweepRun:
    """Run the sweep's points (those not finished already, with `resume`) on `workers` local processes.

    Rows go to ``out_dir/results.csv`` as they finish (one write and flush per row). `progress(done, total)` is
    called once before the first task and after each. Ctrl-C stops the run: pending points are dropped, the
    worker processes are ended, and the result says `interrupted`; the rows written so far stay.

    `workers` defaults to the usable cores. Points always run in spawned worker processes, so that this process
    never runs CP-SAT: CP-SAT takes SIGINT over during a solve and leaves it at the default action (end the
    process at once) afterwards. ``workers=0`` runs them in this process instead (tests, debugging), where a
    Ctrl-C during a solve is CP-SAT's to handle. `executor` (`placement.sim.executors`, e.g. Ray) replaces the local
    processes; a task that fails twice leaves ERROR rows for its points (rerun by --resume).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.csv"
    columns = csv_columns(sweep)
    colset = set(columns)
    sink = ResultSink(path, columns, resume)
    keys = sweep.keys
    first: dict[str, Point] = {}
    for p in sweep.points:
        first.setdefault(p.key, p)
    todo = {k for k in keys if k not in sink.done}
    run = SweepRun(path, len(keys), len(keys) - len(todo))
    if workers is not None and workers < 0:
        raise ValueError(f"workers must be >= 0, got {workers}")
    n_workers = max(1, workers if workers is not None else default_workers())
    tasks = plan_tasks(sweep, todo, n_workers)
    n_todo = sum(len(t.points) for t in tasks)
    done = 0

    def finish(results: list[tuple[str, dict[str, str]]]) -> None:
        nonlocal done
        for key, outputs in results:
            row = input_row(sweep, first[key])
            row.update(fold_unknown(dict(outputs), colset))
            sink.write(row)
            run.executed += 1
        done += len(results)
        if progress is not None:
            progress(done, n_todo)

    if progress is not None:
        progress(0, n_todo)
    try:
        if workers == 0 and executor is None:
            for t in tasks:
                finish(evaluate_task(t))
        elif tasks:
            ex = executor if executor is not None else LocalExecutor(min(n_workers, len(tasks)))

            def failed(i: int, error: str) -> None:
                finish(
                    [
                        (k, {"status": "ERROR", "error": f"task failed twice: {error}"})
                        for k, _ in tasks[i].points
                    ]
                )

            ex.run(evaluate_task, tasks, lambda i, res: finish(res), failed)
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        sink.close()
    found = {r["key"]: r for r in read_results(path)}
    run.rows = {k: found[k] for k in keys if k in found}
    return run


# ---- serving sweeps ---------------------------------------------------------------------------------------------

SERVING_COLUMNS: tuple[str, ...] = (
    "key",
    "sweep",
    "variant",
    "gpus_per_node",
    "nodes",
    "decode_tp",
    "decode_ep",
    "decode_attention_dp",
    "decode_replicas",
    "decode_nodes",
    "ranks",
    "status",
    "chosen",
    "ttft_ms",
    "tpot_ms",
    "tokens_per_s",
    "tokens_per_s_per_gpu",
    "bound_by",
    "bottleneck_tier",
    "decode_memory_gb",
    "device_memory_gb",
    "within_tpot_bound",
    *(f"{b.replace('-', '_')}_tpot_ms" for b in BASELINES),
    "baselines_breaking",
    "error",
)
"""The results CSV of a serving sweep: the point's inputs, then the answer's serving report (``decode_nodes``: the
hosts the answer's decode ranks use), then each scheduler baseline's TPOT on the same cluster and the baselines
whose mapping breaks a rule of the job (priced, not chosen; space-separated)."""


@dataclass(frozen=True)
class ServingTask:
    """One serving sweep point to run (plain data: it pickles to a spawned worker process)."""

    key: str
    cluster_doc: Mapping[str, Any]
    cluster_hash: str
    cluster_dir: str
    state_doc: Mapping[str, Any] | None
    job_doc: Mapping[str, Any]
    source: str
    time_limit_s: float
    solver_workers: int
    solver_seed: int
    deterministic: bool
    tpot_bound_ms: float | None = None


def evaluate_serving_task(task: ServingTask) -> list[tuple[str, dict[str, str]]]:
    """Place the point's serving job (`placement.solve.serving.place_serving`) on its cluster variant and state;
    its output columns (status INFEASIBLE with the reason when nothing fits, ERROR when the run breaks)."""
    hit = _TOPOLOGIES.get(task.cluster_hash)
    if hit is None:  # built once per process, as `_topology` does
        hit = cluster_from_dict(task.cluster_doc, f"{task.source}: cluster", Path(task.cluster_dir))
        _TOPOLOGIES[task.cluster_hash] = hit
    topo, static = hit
    state = build_state(
        topo,
        static,
        task.state_doc,
        occupancy=0.0,
        mode="whole",
        seed=0,
        failed=0.0,
        source=f"{task.source}: state",
    )
    job = serving_job_from_dict(task.job_doc, f"{task.source}: job")
    opts = SolveOptions(
        time_limit_s=task.time_limit_s,
        seed=task.solver_seed,
        workers=task.solver_workers,
        deterministic=task.deterministic,
    )
    try:
        res = place_serving(topo, state, job, opts)
    except InfeasibleError as e:
        return [(task.key, {"status": "INFEASIBLE", "error": "; ".join(e.reasons)})]
    except Exception as e:  # one broken point must not take the sweep down
        return [(task.key, {"status": "ERROR", "error": f"{type(e).__name__}: {e}"})]
    r = res.report
    dec = job.decode_pool
    first = job.pool_offset(dec.role)
    hosts = {topo.devices[d].host for d in res.mapping[first : first + dec.ranks]}
    memory = device_memory_gb(job.device_kind or r.device_kind, topo)
    out = {
        "status": res.status or "FEASIBLE",
        "chosen": res.chosen,
        "decode_nodes": str(len(hosts)),
        "ttft_ms": fmt(r.ttft_seconds * 1e3),
        "tpot_ms": fmt(r.tpot_seconds * 1e3),
        "tokens_per_s": fmt(r.tokens_per_s),
        "tokens_per_s_per_gpu": fmt(r.tokens_per_s_per_gpu),
        "bound_by": r.bound_by,
        "bottleneck_tier": r.bottleneck_tier,
        "decode_memory_gb": fmt(r.decode_memory_bytes / 1e9),
        "device_memory_gb": fmt(memory),
        "within_tpot_bound": ""
        if task.tpot_bound_ms is None
        else str(r.tpot_seconds * 1e3 <= task.tpot_bound_ms).lower(),
        "error": "",
    }
    for name, rep in res.candidates.items():
        if name in BASELINES and rep is not None:
            out[f"{name.replace('-', '_')}_tpot_ms"] = fmt(rep.tpot_seconds * 1e3)
    out["baselines_breaking"] = " ".join(n for n in BASELINES if n in res.broken)
    return [(task.key, out)]


@dataclass
class ServingRun:
    """What `run_serving_sweep` did: the CSV and every point's row (grid order)."""

    csv_path: Path
    rows: list[dict[str, str]] = field(default_factory=list)
    interrupted: bool = False


def _serving_input_row(sweep: ServingSweep, k: int) -> dict[str, str]:
    p = sweep.points[k]
    info = sweep.variant_info[p.variant]
    return {
        "key": p.key,
        "sweep": sweep.name,
        "variant": sweep.variants[p.variant].label,
        "gpus_per_node": info.get("gpus_per_node", ""),
        "nodes": info.get("nodes", ""),
        "decode_tp": str(p.shape.tp),
        "decode_ep": str(p.shape.ep),
        "decode_attention_dp": str(p.shape.attention_dp),
        "decode_replicas": str(p.shape.replicas),
        "ranks": str(p.ranks or ""),
    }


def run_serving_sweep(
    sweep: ServingSweep,
    out_dir: str | Path,
    *,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    executor: Executor | None = None,
) -> ServingRun:
    """Run a serving sweep's points (those with a problem get status INVALID and it as the error) on `workers`
    spawned processes (0: in this process), and write ``out_dir/results.csv`` (`SERVING_COLUMNS`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.csv"
    rows = [_serving_input_row(sweep, k) for k in range(len(sweep.points))]
    tasks: list[ServingTask] = []
    index: list[int] = []
    vhash = [digest(vd) for vd in sweep.variant_docs]
    for k, p in enumerate(sweep.points):
        if p.problem is not None:
            rows[k].update(status="INVALID", error=p.problem)
            continue
        tasks.append(
            ServingTask(
                key=p.key,
                cluster_doc=sweep.variant_docs[p.variant],
                cluster_hash=vhash[p.variant],
                cluster_dir=sweep.cluster_dir,
                state_doc=sweep.state_doc,
                job_doc=p.job_doc,
                source=sweep.source,
                time_limit_s=sweep.time_limit_s,
                solver_workers=sweep.solver_workers,
                solver_seed=sweep.solver_seed,
                deterministic=sweep.solver_deterministic,
                tpot_bound_ms=sweep.tpot_bound_ms,
            )
        )
        index.append(k)
    run = ServingRun(path)
    done = 0

    def finish(i: int, results: list[tuple[str, dict[str, str]]]) -> None:
        nonlocal done
        for _key, outputs in results:
            rows[index[i]].update(outputs)
        done += 1
        if progress is not None:
            progress(done, len(tasks))

    if progress is not None:
        progress(0, len(tasks))
    try:
        if workers == 0 and executor is None:
            for i, t in enumerate(tasks):
                finish(i, evaluate_serving_task(t))
        elif tasks:
            n = max(1, workers if workers is not None else default_workers())
            ex = executor if executor is not None else LocalExecutor(min(n, len(tasks)))
            ex.run(
                evaluate_serving_task,
                tasks,
                finish,
                lambda i, error: finish(
                    i, [(tasks[i].key, {"status": "ERROR", "error": f"task failed twice: {error}"})]
                ),
            )
    except KeyboardInterrupt:
        run.interrupted = True
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, list(SERVING_COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    run.rows = rows
    return run
