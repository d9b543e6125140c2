"""`placement calibrate nccl-tests | step`: fit a cluster's tiers, latencies and NICs to a user's nccl-tests logs,
and a job's compute efficiency to a measured step; print what was fitted and how close the fitted model comes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_inputs, write_output
from placement.cli.tables import out
from placement.cost.calibrate import (
    LARGE,
    Fit,
    Measured,
    fit_compute_efficiency,
    fit_topology,
    large_points,
    predict_seconds,
)
from placement.io.calibration import log_points, write_fitted
from placement.io.importers.nccl_tests import read_nccl_tests
from placement.io.native import cluster_from_dict, load_document, load_mapping
from placement.model.topology import Topology

__all__ = ["app"]

app = command_app(
    name="calibrate",
    no_args_is_help=True,
    help="Fit a cluster's links to nccl-tests logs, or a job's compute efficiency to a measured step.",
)


def _fit_table(fit: Fit) -> Table:
    t = Table(title="fitted (the runs each value came from)", title_justify="left")
    for h, j in (("value", "left"), ("before", "right"), ("after", "right"), ("runs", "left")):
        t.add_column(h, justify=j)  # type: ignore[arg-type]
    for k in fit.knobs:
        t.add_row(k.name, f"{k.before:.4g}", f"{k.after:.4g}", ", ".join(Path(r).name for r in k.runs))
    for nt in dict.fromkeys(fit.topology.host_types):
        if nt.nic_gbps is not None and any(k.name == f"node_types.{nt.name}.nic_gbps" for k in fit.knobs):
            t.add_row(
                f"NIC bus bandwidth of a {nt.name} host",
                "",
                f"{nt.nics} x {nt.nic_gbps:.4g} = {(nt.nics or 0) * nt.nic_gbps:.4g}",
                "GB/s",
            )
    return t


def _check_table(topo: Topology, before: Topology, points: Sequence[Measured]) -> tuple[Table, float]:
    """Measured vs modeled bus bandwidth of each run at its large sizes; the worst relative error after the fit."""
    pred_after = predict_seconds(topo, points)
    pred_before = predict_seconds(before, points)
    t = Table(
        title=f"bus bandwidth at the large sizes (within {LARGE}x of each run's largest), GB/s",
        title_justify="left",
    )
    for h in ("run", "size", "measured", "model before", "model after", "after/measured"):
        t.add_column(h, justify="left" if h == "run" else "right")
    worst = 0.0
    for i in (i for i, lg in enumerate(large_points(points)) if lg):
        p = points[i]
        n = len(p.devices)
        factor = (
            2.0 * (n - 1) / n
            if p.collective == "all_reduce"
            else (n - 1) / n
            if p.collective != "sendrecv"
            else 1.0
        )
        meas = p.size * factor / (math.exp(sum(math.log(s) for s in p.seconds) / len(p.seconds)) * 1e9)
        b = p.size * factor / (pred_before[i] * 1e9)
        a = p.size * factor / (pred_after[i] * 1e9)
        worst = max(worst, abs(a / meas - 1.0))
        t.add_row(Path(p.run).name, f"{p.size:.4g}", f"{meas:.4g}", f"{b:.4g}", f"{a:.4g}", f"{a / meas:.3f}")
    return t, worst


@app.command("nccl-tests", cls=Command)
@guard
def calibrate_nccl_tests(
    logs: Annotated[list[Path], typer.Argument(help="nccl-tests output files (all_reduce_perf, ...)")],
    cluster: Annotated[Path, typer.Option(help="the cluster file the runs ran on")],
    out_file: Annotated[Path | None, typer.Option("--out", help="write the fitted cluster YAML here")] = None,
    collective: Annotated[
        str | None, typer.Option(help="the collective, when a log names none (all_reduce, all_gather, ...)")
    ] = None,
) -> None:
    """Fit the tiers, latencies and NIC bandwidth the runs exercised; write a copy of the cluster with them.

    Every logged point is priced by the model's own collectives; the fit is least squares on log-time. Prints
    each fitted value with the runs it came from, and each run's measured against modeled bus bandwidth at its
    large sizes. Hosts are matched by name, else in order onto the cluster's first hosts.
    """
    doc = load_document(cluster)
    topo, _ = cluster_from_dict(doc, str(cluster), cluster.parent)
    points: list[Measured] = []
    try:
        for path in logs:
            pts, notes = log_points(topo, read_nccl_tests(path, collective=collective))
            for n in notes:
                err.print(f"[yellow]note:[/] {escape(n)}", soft_wrap=True)
            points += pts
        fit = fit_topology(topo, points)
    except ValueError as e:
        fail(escape(str(e)), 2)
    if not fit.knobs:
        fail("the runs exercise no tier, latency or NIC of this cluster (every point is priced the same)", 2)
    warnings = write_fitted(doc, fit)
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None)
    fitted, _ = cluster_from_dict(yaml.safe_load(text), str(out_file or "<fitted>"), cluster.parent)
    for w in warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    con = out if out_file is not None else err
    con.print(_fit_table(fit))
    table, worst = _check_table(fitted, topo, points)
    con.print(table)
    con.print(
        f"log-time RMS {fit.rms_before:.3f} -> {fit.rms_after:.3f}; worst large-size bus bandwidth after the fit "
        f"{100 * worst:.1f}% off the logs"
    )
    write_output(text, out_file)


@app.command("step", cls=Command)
@guard
def calibrate_step(
    cluster: Annotated[Path, typer.Option(help="cluster file")],
    job: Annotated[Path, typer.Option(help="job file (with a model shape)")],
    mapping: Annotated[
        Path, typer.Option(help="mapping: result JSON, list of device ids, or {rank: device}")
    ],
    measured_step: Annotated[float, typer.Option(help="the measured step time in seconds")],
    state: Annotated[Path | None, typer.Option(help="state file")] = None,
) -> None:
    """Fit the compute efficiency (the job's mfu) so the modeled step matches a measured one.

    Prints the modeled step before and after, its compute and communication, and the efficiency to put in the
    job file (model.mfu).
    """
    topo, st, jb = load_inputs(cluster, job, state)
    mp = load_mapping(mapping, topo)
    try:
        res = fit_compute_efficiency(topo, st, jb, mp, measured_step)
    except ValueError as e:
        fail(escape(str(e)), 2)
    t = Table(
        title=f"{jb.name}: compute efficiency fitted to a measured step of {measured_step:.4g} s",
        title_justify="left",
    )
    for h in ("", "efficiency (mfu)", "step s", "compute s", "bubble s", "exposed comm s", "reported MFU"):
        t.add_column(h, justify="left" if not h else "right")
    for name, eff, rep in (
        ("before", res.efficiency_before, res.before),
        ("after", res.efficiency_after, res.after),
    ):
        t.add_row(
            name,
            f"{eff:.4f}",
            f"{rep.step_seconds:.4f}",
            f"{rep.compute_seconds or 0.0:.4f}",
            f"{rep.bubble_seconds or 0.0:.4f}",
            f"{rep.comm_seconds:.4f}",
            "-" if rep.mfu is None else f"{rep.mfu:.3f}",
        )
    out.print(t)
    out.print(f"set model.mfu: {res.efficiency_after:.4f} in {escape(str(job))}")
