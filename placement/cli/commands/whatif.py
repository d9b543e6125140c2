"""The `placement whatif` command (progress bar, ranked tables, CSV and plots) and `render_picture`, the helper
behind ``--picture out.svg`` of `place` and `evaluate`. `register(app)` adds the command to a typer app.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from placement.cli.errors import err, fail, guard
from placement.cost.report import CostReport
from placement.errors import InputError, Problem
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["register", "render_picture", "whatif"]

_out = Console()
_err = err


class _RateColumn(ProgressColumn):
    """Points per second."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("-- pts/s" if speed is None else f"{speed:.2f} pts/s", style="progress.data.speed")


def render_picture(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    report: CostReport | None,
    path: str | Path,
    *,
    color_by: str | None = None,
    console: Console | None = None,
) -> Path:
    """Draw the placement to `path` (SVG, PNG or PDF by suffix); returns the path. With `console`, say so there.

    For `place` and `evaluate`: ``if picture: render_picture(topo, st, jb, mapping, report, picture)``. A bad
    suffix, colour option or mapping is an `InputError` whose source is ``--picture``.
    """
    from placement.io.export.picture import render

    try:
        written = render(topology, state, job, mapping, report, path, color_by=color_by)
    except InputError as e:
        raise InputError("--picture", [Problem(p.path, p.message) for p in e.problems]) from None
    if console is not None:
        console.print(f"wrote {written}", highlight=False)
    return written


@guard
def whatif(
    sweep: Annotated[
        Path, typer.Argument(help="sweep file (YAML/JSON): base cluster and job, and the axes to vary")
    ],
    workers: Annotated[
        int | None, typer.Option(help="local worker processes (default: the usable cores)")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="directory for results.csv and the plots (default: whatif-NAME)"),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="keep finished points of an earlier run in the CSV and skip them")
    ] = False,
    top: Annotated[int, typer.Option(help="rows per ranked table")] = 10,
    plots: Annotated[bool, typer.Option(help="draw the PNG/SVG plots")] = True,
    executor: Annotated[
        str, typer.Option(help="where points run: local (worker processes) or ray")
    ] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address (--executor ray; default: start a local head)")
    ] = None,
) -> None:
    """Run a what-if sweep: shapes x occupancy x cluster variants x strategies, ranked by modeled step time (with
    exposed comm, MFU and tokens/s), plotted, in a CSV."""
    from placement.sim.whatif import default_workers, load_sweep, plot_sweep, ranked_tables, run_sweep

    if workers is not None and workers < 1:
        fail(f"--workers: must be >= 1, got {workers}", 2)
    if top < 1:
        fail(f"--top: must be >= 1, got {top}", 2)
    if executor not in ("local", "ray"):
        fail(f"--executor: must be local or ray, got {executor!r}", 2)
    sw = load_sweep(sweep)
    out = out_dir if out_dir is not None else Path(f"whatif-{sw.name}")
    n_workers = workers if workers is not None else default_workers()
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TextColumn("elapsed"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=_err,
        transient=False,
    )
    state: dict[str, Any] = {}

    def on_progress(done: int, total: int) -> None:
        if "task" not in state:
            state["task"] = progress.add_task(sw.name, total=total)
        progress.update(state["task"], completed=done)

    ex = None
    if executor == "ray":
        from placement.sim.executors import RayExecutor

        try:
            ex = RayExecutor(address, workers)
        except RuntimeError as e:
            fail(f"--executor: {e}", 2)
            raise
        n_workers = ex.workers
    with progress:
        run = run_sweep(sw, out, workers=n_workers, resume=resume, progress=on_progress, executor=ex)
    _err.print(
        f"{run.total} points: {run.executed} run now on {n_workers} {'Ray ' if ex else ''}worker(s), {run.skipped} from an earlier run"
        + (" [yellow](interrupted)[/]" if run.interrupted else ""),
        highlight=False,
    )
    con = _out if _out.is_terminal else Console(width=150)  # a file or pipe gets whole tables, not 80 columns
    for t in ranked_tables(sw, run.rows, top=top):
        con.print(t)
    _err.print(f"wrote {run.csv_path}", highlight=False)
    if plots and run.rows and not run.interrupted:
        for p in plot_sweep(sw, run.rows, out):
            _err.print(f"wrote {p}", highlight=False)
    if run.interrupted:
        _err.print(
            f"[yellow]interrupted:[/] {len(run.rows)} of {run.total} points are in {run.csv_path} (no plots); "
            f"run again with --resume to finish the rest",
            highlight=False,
        )
        raise typer.Exit(130)


def register(app: typer.Typer) -> None:
    """Add the `whatif` group to `app`: `whatif SWEEP` (this sweep) and `whatif defrag` (`placement.cli.commands.repair`)."""
    from placement.cli.commands.repair import whatif_group

    app.add_typer(whatif_group(whatif), name="whatif")
