"""Running replays (one per policy and seed) on an executor and keeping their output: summary.csv, jobs.csv and
series.csv in the output directory, written as each replay finishes, resumable. Owns `run_replays`.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from placement.io.native import cluster_from_dict
from placement.model.topology import Topology
from placement.sim.digest import digest
from placement.sim.executors import Executor, InlineExecutor
from placement.sim.replay.device_kinds import resolve_kinds
from placement.sim.replay.report import JOB_COLUMNS, SUMMARY_COLUMNS, summarize
from placement.sim.replay.shapes import ShapeRule
from placement.sim.replay.sim import SimConfig, simulate
from placement.sim.replay.traces import TraceJob

__all__ = ["ReplayRun", "ReplayTask", "replay_task", "run_replays"]

SERIES_COLUMNS = ("key", "policy", "seed", "t_s", "busy", "usable", "fragmentation")


@dataclass(frozen=True)
class ReplayTask:
    """One replay, as plain data (it pickles to a worker process or a Ray task)."""

    key: str
    cluster_doc: Mapping[str, Any]
    cluster_dir: str
    jobs: tuple[TraceJob, ...]
    config: SimConfig
    rule: ShapeRule


def task_key(
    cluster_doc: Mapping[str, Any], jobs: Sequence[TraceJob], cfg: SimConfig, rule: ShapeRule
) -> str:
    """What decides a replay's answer: cluster, jobs, the simulation's and the shape rule's settings."""
    c = {k: v for k, v in asdict(cfg).items() if k != "keep_segments"}
    return digest([cluster_doc, [asdict(j) for j in jobs], c, asdict(rule)])[:16]


_TOPOLOGIES: dict[str, Topology] = {}


def replay_task(task: ReplayTask, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run one replay: its summary row, job rows and time series (what a worker sends back)."""

    h = digest(task.cluster_doc)
    if h not in _TOPOLOGIES:
        topo = cluster_from_dict(task.cluster_doc, "cluster", Path(task.cluster_dir))[0]
        doc, notes = resolve_kinds(task.cluster_doc, topo)
        if notes:  # kinds the cost model cannot price: the callers resolve them first; this is the safety net
            topo = cluster_from_dict(doc, "cluster", Path(task.cluster_dir))[0]
        _TOPOLOGIES[h] = topo
    topo = _TOPOLOGIES[h]
    res = simulate(topo, task.jobs, task.config, task.rule, progress=progress)
    summary = summarize(res, topo.num_devices)
    head = {"key": task.key, "policy": task.config.policy, "seed": task.config.seed}
    return {
        "summary": {**head, **summary, "status": "OK", "error": ""},
        "jobs": [{**head, **r} for r in res.records],
        "series": [
            {**head, "t_s": t, "busy": b, "usable": u, "fragmentation": f} for t, b, u, f in res.series
        ],
    }


def _fmt(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return format(v, ".9g")
    return str(v)


class _Csv:
    """One CSV appended and flushed row by row; with resume, the rows of finished keys are kept."""

    def __init__(self, path: Path, columns: Sequence[str], keep: set[str] | None) -> None:
        old: list[dict[str, str]] = []
        if keep and path.is_file():
            with path.open(newline="") as f:
                old = [r for r in csv.DictReader(f) if r.get("key") in keep and None not in r.values()]
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, list(columns), extrasaction="ignore")
            w.writeheader()
            w.writerows(old)
        os.replace(tmp, path)
        self.file = path.open("a", newline="")
        self.writer = csv.DictWriter(self.file, list(columns), extrasaction="ignore")

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        self.writer.writerows({k: _fmt(v) for k, v in r.items()} for r in rows)
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return [dict(r) for r in csv.DictReader(f)]


@dataclass
class ReplayRun:
    """What `run_replays` did: the files, how many replays ran now and before, and the finished summary rows."""

    out_dir: Path
    total: int
    skipped: int
    executed: int = 0
    failed: int = 0
    interrupted: bool = False
    summary: list[dict[str, str]] = field(default_factory=list)


def run_replays(
    tasks: Sequence[ReplayTask],
    out_dir: str | Path,
    *,
    executor: Executor | None = None,
    resume: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayRun:
    """Run the replays not finished already (with `resume`) on `executor` (default: this process).

    Each replay's job rows and series go to jobs.csv and series.csv when it finishes, then its row to
    summary.csv (the row that marks it finished). A replay that fails twice gets a summary row with status
    ERROR and the error. `progress(jobs done, jobs)` counts trace jobs over all replays, per job as they
    finish in each replay, whichever the executor (worker processes and Ray tasks send theirs back about once a
    second). Ctrl-C stops the run; what was written stays.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done: set[str] = set()
    if resume:
        done = {r["key"] for r in read_csv(out / "summary.csv") if r.get("status") == "OK"}
    keys = [t.key for t in tasks]
    todo = [t for t in tasks if t.key not in done]
    run = ReplayRun(out, len(set(keys)), len(set(keys) & done))
    sums = _Csv(out / "summary.csv", SUMMARY_COLUMNS, done)
    jobs = _Csv(out / "jobs.csv", JOB_COLUMNS, done)
    series = _Csv(out / "series.csv", SERIES_COLUMNS, done)
    total = sum(len(t.jobs) for t in todo)
    per_task = [0] * len(todo)  # jobs done in each replay

    def moved(i: int, done: int) -> None:
        per_task[i] = max(per_task[i], done)
        if progress is not None:
            progress(sum(per_task), total)

    def on_done(i: int, res: Mapping[str, Any]) -> None:
        jobs.write(res["jobs"])
        series.write(res["series"])
        sums.write([res["summary"]])
        run.executed += 1
        moved(i, len(todo[i].jobs))

    def on_fail(i: int, error: str) -> None:
        t = todo[i]
        sums.write(
            [
                {
                    "key": t.key,
                    "policy": t.config.policy,
                    "seed": t.config.seed,
                    "jobs": len(t.jobs),
                    "status": "ERROR",
                    "error": f"failed twice: {error}",
                }
            ]
        )
        run.failed += 1
        moved(i, len(t.jobs))

    if progress is not None:
        progress(0, total)
    ex = executor if executor is not None else InlineExecutor()
    try:
        ex.run(
            replay_task,
            todo,
            on_done,
            on_fail,
            (lambda i, done, _n: moved(i, done)) if progress is not None else None,
        )
    except KeyboardInterrupt:
        run.interrupted = True
    finally:
        for f in (sums, jobs, series):
            f.close()
    rows = {r["key"]: r for r in read_csv(out / "summary.csv")}
    run.summary = [rows[k] for k in dict.fromkeys(keys) if k in rows]
    return run
