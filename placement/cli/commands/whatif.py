"""The `placement whatif` group: `whatif SWEEP` (a sweep with a progress bar, ranked tables, CSV and plots) and
`whatif defrag CLUSTER` (which running jobs must move to free whole hosts under one domain).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, Group, command_app
from placement.cli.inputs import load_cluster_state
from placement.cli.options import JsonOpt, WideOpt, json_output
from placement.cli.runner import (
    AddressOpt,
    ExecutorOpt,
    RunProgress,
    WorkersOpt,
    choose_executor,
    interrupted,
)
from placement.cli.serving import is_serving_sweep_file, whatif_serving_file
from placement.cli.tables import drop_columns, table_console
from placement.io.native import load_job
from placement.sim.whatif import load_sweep, plot_sweep, ranked_tables, run_sweep
from placement.sim.whatif.defrag import DefragResult, hosts_needed
from placement.sim.whatif.defrag import defrag as run_defrag

__all__ = ["app", "defrag", "whatif"]

# the columns of a ranked table left out in 80 columns (--wide shows them): the rank (the rows are in its order),
# the best answer's details, the optimizer's gap, and the reasons a shape has no placement (printed under the table)
NARROW_DROPS = ("#", "best", "comm s", "MFU", "tokens/s", "why not placed")
NARROW_NOTE = "--wide adds the best strategy's exposed comm, MFU and tokens/s, and the optimizer's gap"


def narrow_table(table: Table) -> tuple[Table, list[str]]:
    """A ranked table (`placement.sim.whatif.ranked_tables`) in 80 columns: the shapes, each strategy's step and
    what the optimizer saves over each baseline; and, to print under it, why a shape has no placement."""
    headers = [str(c.header) for c in table.columns]
    why = next((c for c in table.columns if str(c.header) == "why not placed"), None)
    notes = [f"{x}: {w}" for x, w in zip(table.columns[1].cells, why.cells, strict=True) if w] if why else []
    narrow = drop_columns(table, {h for h in headers if h in NARROW_DROPS or h.endswith(" gap")})
    parts = [p for p in str(table.caption or "").split("; ") if p and not p.startswith(("comm s", "gap:"))]
    narrow.caption = "; ".join([*parts, NARROW_NOTE])
    return narrow, notes


class _WhatifGroup(Group):
    """`whatif SWEEP ...` runs a sweep (the default command); `whatif defrag ...` the defragmentation hint."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands:
            args = ["sweep", *args]
        return super().resolve_command(ctx, args)


app = command_app(
    name="whatif",
    cls=_WhatifGroup,
    no_args_is_help=True,
    help="What-if studies: `whatif SWEEP` (a sweep file) or `whatif defrag CLUSTER`.",
)


@app.command("sweep", cls=Command)
@guard
def whatif(
    sweep: Annotated[
        Path, typer.Argument(help="sweep file (YAML/JSON): base cluster and job, and the axes to vary")
    ],
    workers: WorkersOpt = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="directory for results.csv and the plots (default: whatif-NAME)"),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="keep finished points of an earlier run in the CSV and skip them")
    ] = False,
    top: Annotated[int, typer.Option(help="rows per ranked table")] = 10,
    plots: Annotated[bool, typer.Option(help="draw the PNG/SVG plots")] = True,
    executor: ExecutorOpt = "local",
    address: AddressOpt = None,
    wide: WideOpt = False,
    log_every: Annotated[
        int, typer.Option(help="when stderr is not a terminal: a progress line every N points (0: none)")
    ] = 0,
) -> None:
    """Run a what-if sweep: shapes x occupancy x cluster variants x strategies.

    Ranked by modeled step time (with exposed comm, MFU and tokens/s with --wide), plotted, in a CSV.
    """
    if top < 1:
        fail(f"--top: must be >= 1, got {top}", 2)
    if log_every < 0:
        fail(f"--log-every: must be >= 0, got {log_every}", 2)
    ex = choose_executor(executor, workers, address)
    if is_serving_sweep_file(sweep):  # decode TP x EP x replicas x nodes: placement.cli.serving
        return whatif_serving_file(sweep, out_dir, max(1, ex.workers), top, wide)
    sw = load_sweep(sweep)
    out_path = out_dir if out_dir is not None else Path(f"whatif-{sw.name}")
    with RunProgress(sw.name, "points", log_every=log_every) as progress:
        run = run_sweep(
            sw, out_path, workers=max(1, ex.workers), resume=resume, progress=progress, executor=ex
        )
    where = (
        "in this process"
        if ex.name == "inline"
        else f"on {ex.workers} {'Ray ' if ex.name == 'ray' else ''}worker(s)"
    )
    err.print(
        f"{run.total} points: {run.executed} run now {where}, {run.skipped} from an earlier run"
        + (" [yellow](interrupted)[/]" if run.interrupted else ""),
        highlight=False,
        soft_wrap=True,
    )
    con = table_console(wide)
    for t in ranked_tables(sw, run.rows, top=top):
        if wide:
            con.print(t)
            continue
        narrow, notes = narrow_table(t)
        con.print(narrow)
        for note in notes:
            con.print(f"  no placement for {escape(note)}", highlight=False, soft_wrap=True)
    err.print(f"wrote {run.csv_path}", highlight=False, soft_wrap=True)
    if plots and run.rows and not run.interrupted:
        for p in plot_sweep(sw, run.rows, out_path):
            err.print(f"wrote {p}", highlight=False, soft_wrap=True)
    if run.interrupted:
        interrupted("points (no plots)", len(run.rows), run.total, run.csv_path)


@app.command("defrag", cls=Command)
@guard
def defrag(
    cluster: Annotated[Path, typer.Argument(help="cluster file")],
    state: Annotated[
        Path | None, typer.Option(help="state file with the running jobs' occupancy (or --empty)")
    ] = None,
    empty: Annotated[
        bool, typer.Option("--empty", help="no state file: every device free (nothing to move)")
    ] = False,
    level: Annotated[str, typer.Option(help="the level of the domain to free, e.g. leaf")] = "leaf",
    hosts: Annotated[int | None, typer.Option(help="whole hosts the waiting job needs")] = None,
    job: Annotated[
        Path | None, typer.Option(help="the waiting job (its ranks give --hosts and its device kind)")
    ] = None,
    keep: Annotated[list[str] | None, typer.Option(help="a job id that must not move (repeatable)")] = None,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
    json_: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Which running jobs must move to free whole hosts under one domain.

    How many of their ranks move, to free whole hosts under one domain of --level for a job that does not fit
    today (a Pareto set of moved ranks against jobs touched).
    """
    output = json_output(output, json_)
    if output not in ("table", "json"):
        fail(f"--output: unknown value {output!r}; use table or json", 2)
    if state is None and not empty:
        fail(
            "--state: the running jobs' occupancy is needed to say what must move; give --state FILE, or --empty "
            "for a cluster with every device free",
            2,
        )
    if state is not None and empty:
        fail("--empty: give --state FILE or --empty, not both", 2)
    topo, st = load_cluster_state(cluster, state)
    jb = load_job(job) if job else None
    if hosts is None and jb is None:
        fail("give --hosts N or --job FILE (the waiting job)", 2)
    n = hosts if hosts is not None else hosts_needed(topo, jb)  # type: ignore[arg-type]
    res = run_defrag(topo, st, level, n, kind=jb.device_kind if jb else None, keep=tuple(keep or ()))
    if output == "json":
        sys.stdout.write(json.dumps(_defrag_document(res), indent=2) + "\n")
    else:
        _print_defrag(res, wide)
    if not res.answers:
        raise typer.Exit(3)


def _defrag_document(res: DefragResult) -> dict[str, Any]:
    return {
        "level": res.level,
        "hosts_needed": res.hosts_needed,
        "fits_today": res.fits_today,
        "reasons": res.reasons,
        "answers": [
            {
                "domain": a.domain,
                "hosts": a.hosts,
                "moved_ranks": a.moved_ranks,
                "jobs": a.jobs,
                "room_elsewhere": a.room_elsewhere,
                "moves": [{"job": j, "device": d} for j, d in a.devices],
            }
            for a in res.answers
        ],
    }


def _print_defrag(res: DefragResult, wide: bool = False) -> None:
    head = "fits today" if res.fits_today else "does not fit today"
    t = Table(
        title=f"{res.hosts_needed} whole hosts under one {res.level}: {head}; {res.considered} {res.level} domain(s) could be cleared"
    )
    for c in ("domain", "moved ranks", "jobs touched", "jobs (ranks that move)", "hosts"):
        t.add_column(c)
    for a in res.answers:
        jobs = ", ".join(f"{j} ({k})" for j, k in a.jobs.items()) or "-"
        hs = ", ".join(a.hosts[:6]) + (f", ... ({len(a.hosts)})" if len(a.hosts) > 6 else "")
        t.add_row(a.domain, str(a.moved_ranks), str(a.jobs_touched), jobs, hs)
    table_console(wide).print(t)
    for r in res.reasons:
        err.print(f"[bold red]no answer:[/] {r}", highlight=False, soft_wrap=True)
