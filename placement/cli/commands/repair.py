"""The `placement repair` command (a running job after failures: a Pareto table of moves against step seconds)
and `placement whatif defrag`; `register(app)` adds `repair`, `whatif_group(sweep)` builds the `whatif` group.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from placement.cli.errors import err, fail, guard
from placement.model.job import Job
from placement.model.topology import Topology
from placement.sim.whatif.defrag import DefragResult

__all__ = ["register", "whatif_group"]

_out = Console()


def _load_current(path: Path, topo: Topology, job: Job) -> list[int]:
    from placement.io.export.document import result_body
    from placement.io.native import load_document, mapping_from_obj
    from placement.solve.repair.input import resolve_current

    doc = result_body(
        load_document(path)
    )  # a PlaceResponse (what `placement place --out` writes) or its result
    if isinstance(doc, dict) and "mapping" in doc:
        return mapping_from_obj(doc, topo, str(path))
    if not isinstance(doc, (list, dict)):
        fail(f"{path}: a mapping is a list of device ids, a {{rank: device}} map, or a result document", 2)
    return resolve_current(topo, job, doc, "current")


@guard
def repair(
    cluster: Annotated[Path, typer.Argument(help="cluster file")],
    job: Annotated[Path, typer.Argument(help="job file of the running job")],
    current: Annotated[
        Path, typer.Argument(help="its current mapping: result JSON, list of device ids, or {rank: device}")
    ],
    state: Annotated[
        Path | None, typer.Option(help="the new state: failed/degraded devices and links, occupancy")
    ] = None,
    drain: Annotated[
        list[str] | None, typer.Option(help="a host or domain drained for maintenance (repeatable)")
    ] = None,
    spare: Annotated[
        list[str] | None, typer.Option(help="a spare device, host or domain: preferred target (repeatable)")
    ] = None,
    spares_only: Annotated[bool, typer.Option(help="move ranks only onto spares")] = False,
    max_moved_ranks: Annotated[int | None, typer.Option(help="move budget in ranks")] = None,
    max_moved_hosts: Annotated[
        int | None, typer.Option(help="move budget in hosts that receive moved ranks")
    ] = None,
    move_cost: Annotated[float, typer.Option(help="seconds one moved rank costs (checkpoint restore)")] = 0.0,
    horizon: Annotated[
        float, typer.Option(help="steps the job still runs (weighs step seconds against move cost)")
    ] = 1000.0,
    time_limit: Annotated[float, typer.Option(help="seconds for the whole repair")] = 5.0,
    workers: Annotated[int, typer.Option(help="CP-SAT workers")] = 2,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
) -> None:
    """Repair a running job after failures with few moves: a Pareto table of moved ranks against step seconds,
    from the least repair to a full re-place; the recommended row weighs --move-cost against --horizon steps."""
    from placement.io.native import load_cluster, load_job, load_state
    from placement.model.state import ClusterState
    from placement.solve import SolveOptions
    from placement.solve.repair.input import RepairBudget
    from placement.solve.repair.run import repair as run_repair

    if output not in ("table", "json"):
        fail(f"--output: unknown value {output!r}; use table or json", 2)
    if time_limit <= 0:
        fail(f"--time-limit: must be > 0, got {time_limit:g}", 2)
    if horizon <= 0:
        fail(f"--horizon: must be > 0, got {horizon:g}", 2)
    topo, static = load_cluster(cluster)
    st = load_state(state, topo, static) if state else (static or ClusterState())
    jb = load_job(job)
    cur = _load_current(current, topo, jb)
    res = run_repair(
        topo,
        st,
        jb,
        cur,
        drain=drain or [],
        spares=spare or [],
        spares_only=spares_only,
        budget=RepairBudget(max_moved_ranks, max_moved_hosts, move_cost, horizon),
        options=SolveOptions(time_limit_s=time_limit, workers=workers, seed=seed),
    )
    if output == "json":  # the RepairResponse JSON mapping, as the Repair RPC answers (docs/results.md)
        from placement.messages import dump_message
        from placement.messages.repair import repair_response

        sys.stdout.write(
            dump_message(repair_response(topo, res, time_limit_s=time_limit, deadline_limited=False))
        )
        return
    title = (
        f"{jb.name}: {len(res.forced)} rank(s) on failed or drained devices; step before "
        f"{res.before.step_seconds:.4f} s; least repair {res.min_moves} moves; {res.stats.get('wall_s', 0):.2f} s"
    )
    t = Table(title=title)
    for c in ("", "answer", "moved ranks", "moved hosts", "step s", "vs before", "proven"):
        t.add_column(c, justify="left" if c in ("", "answer") else "right")
    rows = list(res.answers)
    if res.replace is not None and all(a is not res.replace for a in rows):
        rows.append(res.replace)
    for i, a in enumerate(rows):
        mark = "*" if i == res.recommended and a in res.answers else ("x" if not a.within_budget else "")
        name = a.name if a is not res.replace or a in res.answers else "re-place (dominated)"
        t.add_row(
            mark,
            name,
            str(a.moved_ranks),
            str(a.moved_hosts),
            f"{a.report.step_seconds:.4f}",
            f"{a.report.step_seconds / res.before.step_seconds - 1:+.1%}" if res.before.step_seconds else "-",
            "yes" if a.optimal else "",
        )
    _out.print(t)
    rec = res.answers[res.recommended]
    for m in rec.moves[:16]:
        _out.print(f"  rank {m.rank}: {topo.devices[m.src].id} -> {topo.devices[m.dst].id}", highlight=False)
    if len(rec.moves) > 16:
        _out.print(f"  ... {len(rec.moves) - 16} more (use --output json)", highlight=False)


@guard
def defrag(
    cluster: Annotated[Path, typer.Argument(help="cluster file")],
    state: Annotated[Path | None, typer.Option(help="state file with the running jobs' occupancy")] = None,
    level: Annotated[str, typer.Option(help="the level of the domain to free, e.g. leaf")] = "leaf",
    hosts: Annotated[int | None, typer.Option(help="whole hosts the waiting job needs")] = None,
    job: Annotated[
        Path | None, typer.Option(help="the waiting job (its ranks give --hosts and its device kind)")
    ] = None,
    keep: Annotated[list[str] | None, typer.Option(help="a job id that must not move (repeatable)")] = None,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
) -> None:
    """Which running jobs must move, and how many of their ranks, to free whole hosts under one domain of
    --level for a job that does not fit today (a Pareto set of moved ranks against jobs touched)."""
    from placement.io.native import load_cluster, load_job, load_state
    from placement.model.state import ClusterState
    from placement.sim.whatif.defrag import defrag as run_defrag
    from placement.sim.whatif.defrag import hosts_needed

    if output not in ("table", "json"):
        fail(f"--output: unknown value {output!r}; use table or json", 2)
    topo, static = load_cluster(cluster)
    st = load_state(state, topo, static) if state else (static or ClusterState())
    jb = load_job(job) if job else None
    if hosts is None and jb is None:
        fail("give --hosts N or --job FILE (the waiting job)", 2)
    n = hosts if hosts is not None else hosts_needed(topo, jb)  # type: ignore[arg-type]
    res = run_defrag(topo, st, level, n, kind=jb.device_kind if jb else None, keep=tuple(keep or ()))
    if output == "json":
        sys.stdout.write(json.dumps(_defrag_document(res), indent=2) + "\n")
    else:
        _print_defrag(res)
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


def _print_defrag(res: DefragResult) -> None:
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
    _out.print(t)
    for r in res.reasons:
        err.print(f"[bold red]no answer:[/] {r}", highlight=False)


class _WhatifGroup(TyperGroup):
    """`whatif SWEEP ...` runs a sweep (the default command); `whatif defrag ...` the defragmentation hint."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] not in self.commands:
            args = ["sweep", *args]
        return super().resolve_command(ctx, args)


def whatif_group(sweep: Any) -> typer.Typer:
    """The `whatif` group: `sweep` (also the default: `whatif SWEEP`) and `defrag`."""
    grp = typer.Typer(
        cls=_WhatifGroup,
        no_args_is_help=True,
        help="What-if studies: `whatif SWEEP` (a sweep file) or `whatif defrag CLUSTER`.",
    )
    grp.command("sweep")(sweep)
    grp.command("defrag")(defrag)
    return grp


def register(app: typer.Typer) -> None:
    """Add the `repair` command to `app`."""
    app.command("repair")(repair)
