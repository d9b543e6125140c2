"""`placement replay`: read a trace, replay it on a cluster once per policy (and seed), locally or on Ray, with
progress per job (a bar, or log lines with the rate when stderr is not a terminal), the table, CSVs and plots.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.options import WideOpt
from placement.cli.runner import (
    AddressOpt,
    ExecutorOpt,
    RunProgress,
    WorkersOpt,
    choose_executor,
    interrupted,
)
from placement.cli.tables import drop_columns, table_console
from placement.io.native import cluster_from_dict, load_document
from placement.model.topology import Topology
from placement.sim.replay import parse_shape_rule, read_trace
from placement.sim.replay.device_kinds import resolve_kinds
from placement.sim.replay.plan import ReplayPlan
from placement.sim.replay.report import plot_replays, summary_table
from placement.sim.replay.run import ReplayRun, ReplayTask, read_csv, run_replays, task_key
from placement.sim.replay.traces import Trace

__all__ = ["app", "replay"]

app = command_app()

NARROW_DROPS = ("seed", "mean wait h", "frag index", "wall s", "status")
"""The summary's columns left out in 80 columns (--wide shows them); a failed replay is named under the table."""

TraceArg = Annotated[
    Path, typer.Argument(help="trace file (Alibaba GPU, Philly JSON, Acme, Acme summary, or CSV)")
]
PolicyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        help="first-fit, kueue-tas, slurm-tree, cpsat, cpsat-wait or cpsat-preempt; repeat for several "
        "(default: all)",
    ),
]
SeedOpt = Annotated[
    list[int] | None, typer.Option("--seed", help="seed of failures and the solver; repeat for several")
]
FormatOpt = Annotated[str, typer.Option("--format", help="trace format (auto: from the suffix and header)")]
JobsOpt = Annotated[
    int | None,
    typer.Option(
        help="replay the first N arrivals (good jobs by submit time; acme-summary: sample N, default 2000)"
    ),
]
ShapeRuleOpt = Annotated[
    str | None,
    typer.Option(help="e.g. tp_max=8,pp=4,pp_from=256,classes=8:7b/64:13b/inf:70b,tp_in_node=require"),
]
BackfillOpt = Annotated[
    int, typer.Option(help="also start any of the next N queued jobs that fit (0: strict FIFO)")
]
TimeLimitOpt = Annotated[
    float, typer.Option(help="cpsat: solver budget per job (deterministic time unless --wall-time)")
]
WallTimeOpt = Annotated[bool, typer.Option(help="cpsat: the budget is wall-clock seconds (not reproducible)")]
FailureModeOpt = Annotated[
    str, typer.Option(help="kill (restart the job) or repair (move the rank to the nearest free GPU)")
]
ArrivalScaleOpt = Annotated[float, typer.Option(help="multiply submit times by this (< 1: more contention)")]
MaxSlowdownOpt = Annotated[
    float,
    typer.Option(help="decline placements whose step exceeds this x the ideal while others run (0: off)"),
]
CheckpointOpt = Annotated[
    float, typer.Option(help="cpsat-preempt: a preempted job loses the work since its last checkpoint")
]
RestartOpt = Annotated[
    float, typer.Option(help="cpsat-preempt and repair: seconds a restart from a checkpoint costs")
]
LogEveryOpt = Annotated[
    int, typer.Option(help="when stderr is not a terminal: a progress line every N jobs (0: none)")
]
LoadOpt = Annotated[float, typer.Option(help="acme-summary: offered load (share of the cluster's GPU-time)")]
OutDirOpt = Annotated[
    Path | None, typer.Option("--out", help="directory for the CSVs and plots (default: replay-TRACE)")
]


@app.command("replay", cls=Command)
@guard
def replay(
    trace: TraceArg,
    cluster: Annotated[Path, typer.Argument(help="cluster file (YAML/JSON)")],
    policy: PolicyOpt = None,
    seed: SeedOpt = None,
    fmt: FormatOpt = "auto",
    jobs: JobsOpt = None,
    strict: Annotated[
        bool, typer.Option(help="refuse a trace with bad rows instead of skipping them")
    ] = False,
    shape_rule: ShapeRuleOpt = None,
    backfill: BackfillOpt = 0,
    time_limit: TimeLimitOpt = 0.5,
    wall_time: WallTimeOpt = False,
    failure_rate: Annotated[float, typer.Option(help="GPU failures per GPU per day (0: none)")] = 0.0,
    failure_mode: FailureModeOpt = "kill",
    repair_hours: Annotated[float, typer.Option(help="hours until a failed GPU is back")] = 4.0,
    arrival_scale: ArrivalScaleOpt = 1.0,
    max_slowdown: MaxSlowdownOpt = 0.0,
    checkpoint_minutes: CheckpointOpt = 30.0,
    restart_s: RestartOpt = 60.0,
    log_every: LogEveryOpt = 200,
    acme_cluster: Annotated[str, typer.Option(help="acme-summary: which cluster's row to sample")] = "Kalos",
    load: LoadOpt = 0.9,
    out_dir: OutDirOpt = None,
    resume: Annotated[bool, typer.Option(help="keep replays an earlier run finished and skip them")] = False,
    workers: WorkersOpt = None,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    plots: Annotated[bool, typer.Option(help="draw the PNG/SVG plots")] = True,
    wide: WideOpt = False,
    contention: Annotated[
        bool,
        typer.Option(
            help="running jobs share the fabric: rates follow contended steps; adds the cpsat-cluster policy"
        ),
    ] = False,
) -> None:
    """Replay a GPU-cluster trace on a cluster with each placement policy.

    JCT, queueing, utilization, communication hours and fragmentation per policy (docs/replay.md). A small sample
    trace to start with: examples/trace-small.csv on examples/h100-256.yaml (scripts/make_sample_trace.py).
    """
    plan = ReplayPlan(
        tuple(policy or ()), tuple(seed or (0,)), backfill, time_limit, wall_time, failure_rate, failure_mode,
        repair_hours, arrival_scale, max_slowdown, checkpoint_minutes, restart_s, jobs, load, contention,
    )  # fmt: skip
    configs = plan.configs()
    ex = choose_executor(executor, workers, address, len(configs))
    if log_every < 0:
        fail(f"--log-every: must be >= 0, got {log_every}", 2)
    rule = parse_shape_rule(shape_rule)
    doc, topo = _cluster(cluster)
    tr = read_trace(
        trace, fmt, cluster_gpus=topo.num_devices, strict=strict, limit=jobs, acme_cluster=acme_cluster,
        load=load, seed=plan.seeds[0],
    )  # fmt: skip
    _trace_notes(trace, tr)
    err.print(
        f"{len(tr.jobs)} jobs ({tr.format}) on {topo.name} ({topo.num_devices} GPUs); shapes: {rule.describe()}",
        highlight=False,
        soft_wrap=True,
    )
    jobs_t = tuple(tr.jobs)
    tasks = [
        ReplayTask(task_key(doc, jobs_t, c, rule), doc, str(cluster.parent), jobs_t, c, rule) for c in configs
    ]
    out = out_dir if out_dir is not None else Path(f"replay-{trace.stem}")
    detail = f"{len(jobs_t)} jobs x {_replays(plan)}"
    with RunProgress(f"replay {_replays(plan)}", "job runs", detail, log_every) as progress:
        run = run_replays(tasks, out, executor=ex, resume=resume, progress=progress)
    err.print(
        f"{run.total} replay(s): {run.executed} run now on {ex.workers or 1} {ex.name} worker(s), "
        f"{run.skipped} from an earlier run"
        + (f", [red]{run.failed} failed[/]" if run.failed else "")
        + (" [yellow](interrupted)[/]" if run.interrupted else ""),
        highlight=False,
        soft_wrap=True,
    )
    _report(run, out, f"{trace.name} on {topo.name}: {len(tr.jobs)} jobs", trace.name, plots, wide)
    if run.interrupted:
        interrupted("replays", len(run.summary), run.total, out)
    if run.failed:
        raise typer.Exit(1)


def _replays(plan: ReplayPlan) -> str:
    """``2 policies`` or ``2 policies x 3 seeds``: what the replays are."""
    n, k = len(plan.policy_names), len(plan.seeds)
    pols = f"{n} polic{'y' if n == 1 else 'ies'}"
    return pols if k == 1 else f"{pols} x {k} seeds"


def _cluster(path: Path) -> tuple[dict[str, Any], Topology]:
    """The cluster document (device kinds resolved against the trace's GPU kinds) and its topology."""
    doc = load_document(path)
    topo, _ = cluster_from_dict(doc, str(path), path.parent)
    doc, kind_notes = resolve_kinds(doc, topo)
    if kind_notes:
        topo, _ = cluster_from_dict(doc, str(path), path.parent)
    for n in kind_notes:
        err.print(f"[yellow]note:[/] {escape(n)}", highlight=False, soft_wrap=True)
    return doc, topo


def _trace_notes(path: Path, tr: Trace) -> None:
    """The rows a trace skipped and its notes, on stderr; no job left exits 2."""
    if tr.bad:
        shown = "\n".join(f"  - {escape(str(p))}" for p in tr.bad[:10])
        more = f"\n  ... and {len(tr.bad) - 10} more" if len(tr.bad) > 10 else ""
        err.print(
            f"[yellow]warning:[/] {path}: skipped {len(tr.bad)} bad row(s) (--strict refuses them):\n{shown}{more}",
            highlight=False,
            soft_wrap=True,
        )
    for n in tr.notes():
        err.print(f"[yellow]note:[/] {escape(n)}", highlight=False, soft_wrap=True)
    if not tr.jobs:
        fail(f"{escape(str(path))}: no job to replay", 2)


def narrow_summary(table: Table, rows: list[dict[str, str]]) -> Table:
    """The summary table in 80 columns: without `NARROW_DROPS` (the seed kept when the replays differ in it), the
    policy names whole, no cell cut (a header wraps)."""
    keep_seed = len({r.get("seed") for r in rows}) > 1
    drops = {h for h in NARROW_DROPS if not (h == "seed" and keep_seed)}
    if any(str(c.header) == "contention GPU-h" for c in table.columns):
        drops |= {"comm h", "unplaced"}  # room for the GPU-hours lost to contention (--wide shows them)
    narrow = drop_columns(table, drops)
    narrow.columns = [copy.copy(c) for c in narrow.columns]
    for c in narrow.columns:  # the longest word of every other column fits: nothing is cut
        if str(c.header) == "policy":
            c.no_wrap, c.min_width = True, max((len(r.get("policy", "")) for r in rows), default=6)
    narrow.caption = (
        "--wide adds the seed, the mean wait, the fragmentation index, the wall seconds and the status"
        + (", the comm hours and the unplaced jobs" if "comm h" in drops else "")
    )
    narrow.caption_justify = "left"
    return narrow


def _report(run: ReplayRun, out: Path, title: str, name: str, plots: bool, wide: bool) -> None:
    """The summary table (80 columns unless `wide`), the files written and the plots."""
    table = summary_table(run.summary, title=title)
    con = table_console(wide)
    con.print(table if wide else narrow_summary(table, run.summary))
    for r in run.summary:
        if r.get("status") != "OK" and not wide:
            err.print(
                f"[red]{escape(r.get('policy', ''))} failed:[/] {escape(r.get('error', ''))}", soft_wrap=True
            )
    for f in ("summary.csv", "jobs.csv", "series.csv"):
        err.print(f"wrote {out / f}", highlight=False, soft_wrap=True)
    if plots and not run.interrupted and run.summary:
        keys = {r["key"] for r in run.summary}
        for path in plot_replays(
            [r for r in read_csv(out / "jobs.csv") if r["key"] in keys],
            [r for r in read_csv(out / "series.csv") if r["key"] in keys],
            out,
            title=name,
        ):
            err.print(f"wrote {path}", highlight=False, soft_wrap=True)
