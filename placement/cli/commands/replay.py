"""`placement replay`: read a trace, replay it on a cluster once per policy (and seed), locally or on Ray, with
progress per job (a bar, or log lines with the rate when stderr is not a terminal), the table, CSVs and plots.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from placement.cli.errors import CliConsole, err, fail, guard
from placement.cli.help import Command, command_app
from placement.io.native import cluster_from_dict, load_document
from placement.sim.executors import InlineExecutor, LocalExecutor, RayExecutor, default_workers
from placement.sim.replay import POLICIES, SimConfig, parse_shape_rule, read_trace
from placement.sim.replay.kinds import resolve_kinds
from placement.sim.replay.report import plot_replays, summary_table
from placement.sim.replay.run import ReplayTask, read_csv, run_replays, task_key

__all__ = ["app", "replay"]

_out = CliConsole()

app = command_app()


@app.command("replay", cls=Command)
@guard
def replay(
    trace: Annotated[
        Path, typer.Argument(help="trace file (Alibaba GPU, Philly JSON, Acme, Acme summary, or CSV)")
    ],
    cluster: Annotated[Path, typer.Argument(help="cluster file (YAML/JSON)")],
    policy: Annotated[
        list[str] | None,
        typer.Option(
            "--policy",
            help="first-fit, kueue-tas, slurm-tree, cpsat, cpsat-wait or cpsat-preempt; repeat for several "
            "(default: all)",
        ),
    ] = None,
    seed: Annotated[
        list[int] | None, typer.Option("--seed", help="seed of failures and the solver; repeat for several")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="trace format (auto: from the suffix and header)")
    ] = "auto",
    jobs: Annotated[
        int | None,
        typer.Option(
            help="replay the first N arrivals (good jobs by submit time; acme-summary: sample N, default 2000)"
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option(help="refuse a trace with bad rows instead of skipping them")
    ] = False,
    shape_rule: Annotated[
        str | None,
        typer.Option(help="e.g. tp_max=8,pp=4,pp_from=256,classes=8:7b/64:13b/inf:70b,tp_in_node=require"),
    ] = None,
    backfill: Annotated[
        int, typer.Option(help="also start any of the next N queued jobs that fit (0: strict FIFO)")
    ] = 0,
    time_limit: Annotated[
        float, typer.Option(help="cpsat: solver budget per job (deterministic time unless --wall-time)")
    ] = 0.5,
    wall_time: Annotated[
        bool, typer.Option(help="cpsat: the budget is wall-clock seconds (not reproducible)")
    ] = False,
    failure_rate: Annotated[float, typer.Option(help="GPU failures per GPU per day (0: none)")] = 0.0,
    failure_mode: Annotated[
        str, typer.Option(help="kill (restart the job) or repair (move the rank to the nearest free GPU)")
    ] = "kill",
    repair_hours: Annotated[float, typer.Option(help="hours until a failed GPU is back")] = 4.0,
    arrival_scale: Annotated[
        float, typer.Option(help="multiply submit times by this (< 1: more contention)")
    ] = 1.0,
    max_slowdown: Annotated[
        float,
        typer.Option(help="decline placements whose step exceeds this x the ideal while others run (0: off)"),
    ] = 0.0,
    checkpoint_minutes: Annotated[
        float, typer.Option(help="cpsat-preempt: a preempted job loses the work since its last checkpoint")
    ] = 30.0,
    restart_s: Annotated[
        float, typer.Option(help="cpsat-preempt and repair: seconds a restart from a checkpoint costs")
    ] = 60.0,
    log_every: Annotated[
        int, typer.Option(help="when stderr is not a terminal: a progress line every N jobs (0: none)")
    ] = 200,
    acme_cluster: Annotated[str, typer.Option(help="acme-summary: which cluster's row to sample")] = "Kalos",
    load: Annotated[
        float, typer.Option(help="acme-summary: offered load (share of the cluster's GPU-time)")
    ] = 0.9,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="directory for the CSVs and plots (default: replay-TRACE)")
    ] = None,
    resume: Annotated[bool, typer.Option(help="keep replays an earlier run finished and skip them")] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            help="local worker processes (0: this process; default: one per replay up to the cores)"
        ),
    ] = None,
    executor: Annotated[str, typer.Option(help="where replays run: local or ray")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (--executor ray; default: start a local head)")
    ] = None,
    plots: Annotated[bool, typer.Option(help="draw the PNG/SVG plots")] = True,
) -> None:
    """Replay a GPU-cluster trace on a cluster with each placement policy.

    JCT, queueing, utilization, communication hours and fragmentation per policy (docs/replay.md).
    """
    pols = policy or list(POLICIES)
    for p in pols:
        if p not in POLICIES:
            fail(f"--policy: {escape(p)!r} is not one of {list(POLICIES)}", 2)
    checks = [
        (failure_mode in ("kill", "repair"), f"--failure-mode: must be kill or repair, got {failure_mode!r}"),
        (failure_rate >= 0, f"--failure-rate: must be >= 0, got {failure_rate:g}"),
        (repair_hours > 0, f"--repair-hours: must be > 0, got {repair_hours:g}"),
        (arrival_scale > 0, f"--arrival-scale: must be > 0, got {arrival_scale:g}"),
        (time_limit > 0, f"--time-limit: must be > 0, got {time_limit:g}"),
        (backfill >= 0, f"--backfill: must be >= 0, got {backfill}"),
        (
            max_slowdown == 0 or max_slowdown >= 1,
            f"--max-slowdown: must be 0 (off) or >= 1, got {max_slowdown:g}",
        ),
        (jobs is None or jobs >= 1, f"--jobs: must be >= 1, got {jobs}"),
        (workers is None or workers >= 0, f"--workers: must be >= 0, got {workers}"),
        (executor in ("local", "ray"), f"--executor: must be local or ray, got {executor!r}"),
        (0 < load <= 10, f"--load: must be in (0, 10], got {load:g}"),
        (checkpoint_minutes > 0, f"--checkpoint-minutes: must be > 0, got {checkpoint_minutes:g}"),
        (restart_s >= 0, f"--restart-s: must be >= 0, got {restart_s:g}"),
        (log_every >= 0, f"--log-every: must be >= 0, got {log_every}"),
    ]
    for ok, msg in checks:
        if not ok:
            fail(escape(msg), 2)
    rule = parse_shape_rule(shape_rule)
    doc = load_document(cluster)
    topo, _ = cluster_from_dict(doc, str(cluster), cluster.parent)
    doc, kind_notes = resolve_kinds(doc, topo)
    if kind_notes:
        topo, _ = cluster_from_dict(doc, str(cluster), cluster.parent)
    for n in kind_notes:
        err.print(f"[yellow]note:[/] {escape(n)}", highlight=False, soft_wrap=True)
    tr = read_trace(
        trace,
        fmt,
        cluster_gpus=topo.num_devices,
        strict=strict,
        limit=jobs,
        acme_cluster=acme_cluster,
        load=load,
        seed=(seed or [0])[0],
    )
    if tr.bad:
        shown = "\n".join(f"  - {escape(str(p))}" for p in tr.bad[:10])
        more = f"\n  ... and {len(tr.bad) - 10} more" if len(tr.bad) > 10 else ""
        err.print(
            f"[yellow]warning:[/] {trace}: skipped {len(tr.bad)} bad row(s) (--strict refuses them):\n{shown}{more}",
            highlight=False,
            soft_wrap=True,
        )
    for n in tr.notes():
        err.print(f"[yellow]note:[/] {escape(n)}", highlight=False, soft_wrap=True)
    if not tr.jobs:
        fail(f"{escape(str(trace))}: no job to replay", 2)
    err.print(
        f"{len(tr.jobs)} jobs ({tr.format}) on {topo.name} ({topo.num_devices} GPUs); shapes: {rule.describe()}",
        highlight=False,
        soft_wrap=True,
    )
    jobs_t = tuple(tr.jobs)
    tasks = []
    for s in seed or [0]:
        for p in pols:
            cfg = SimConfig(
                p,
                seed=s,
                backfill=backfill,
                time_limit_s=time_limit,
                deterministic=not wall_time,
                failure_rate=failure_rate,
                failure_mode=failure_mode,
                repair_hours=repair_hours,
                arrival_scale=arrival_scale,
                max_slowdown=max_slowdown,
                checkpoint_s=checkpoint_minutes * 60.0,
                restart_s=restart_s,
            )
            tasks.append(
                ReplayTask(task_key(doc, jobs_t, cfg, rule), doc, str(cluster.parent), jobs_t, cfg, rule)
            )
    out = out_dir if out_dir is not None else Path(f"replay-{trace.stem}")
    ex: Any
    if executor == "ray":
        try:
            ex = RayExecutor(address, workers or None)
        except RuntimeError as e:
            fail(escape(f"--executor: {e}"), 2)
    elif workers == 0:
        ex = InlineExecutor()
    else:
        ex = LocalExecutor(max(1, min(workers or default_workers(), len(tasks))))
    live = err.is_terminal
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err,
        disable=not live,
    )
    bar: dict[str, Any] = {"t0": time.monotonic(), "logged": 0}

    def on_progress(done: int, total: int) -> None:
        el = time.monotonic() - bar["t0"]
        rate = f"{done / el:.1f} jobs/s" if el > 0 else ""
        if live:
            if "id" not in bar:
                bar["id"] = progress.add_task(f"replay x{len(tasks)}", total=total, rate="")
            progress.update(bar["id"], completed=done, rate=rate)
        elif log_every and (done - bar["logged"] >= log_every or (done == total and done > bar["logged"])):
            bar["logged"] = done
            err.print(
                f"replay: {done}/{total} jobs ({100 * done / max(1, total):.1f}%), {rate}, {el:.0f} s",
                highlight=False,
                soft_wrap=True,
            )

    with progress:
        run = run_replays(tasks, out, executor=ex, resume=resume, progress=on_progress)
    err.print(
        f"{run.total} replay(s): {run.executed} run now on {ex.workers or 1} {ex.name} worker(s), "
        f"{run.skipped} from an earlier run"
        + (f", [red]{run.failed} failed[/]" if run.failed else "")
        + (" [yellow](interrupted)[/]" if run.interrupted else ""),
        highlight=False,
        soft_wrap=True,
    )
    con = _out if _out.is_terminal else CliConsole(width=160)
    con.print(summary_table(run.summary, title=f"{trace.name} on {topo.name}: {len(tr.jobs)} jobs"))
    for name in ("summary.csv", "jobs.csv", "series.csv"):
        err.print(f"wrote {out / name}", highlight=False, soft_wrap=True)
    if plots and not run.interrupted and run.summary:
        keys = {r["key"] for r in run.summary}
        for path in plot_replays(
            [r for r in read_csv(out / "jobs.csv") if r["key"] in keys],
            [r for r in read_csv(out / "series.csv") if r["key"] in keys],
            out,
            title=trace.name,
        ):
            err.print(f"wrote {path}", highlight=False, soft_wrap=True)
    if run.interrupted:
        err.print(
            f"[yellow]interrupted:[/] {len(run.summary)} of {run.total} replays are in {out}; run again with "
            "--resume to finish the rest",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(130)
    if run.failed:
        raise typer.Exit(1)
