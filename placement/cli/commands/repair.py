"""`placement repair`: a running job after failures, repaired with few moves (`placement.decide.repair.run`): a Pareto
table of moved ranks against step seconds, or the RepairResponse.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from placement.cli.errors import fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_cluster_state, load_inputs
from placement.cli.options import JsonOpt, WideOpt, json_output
from placement.cli.serving import is_serving_file
from placement.cli.tables import print_wrapped, table_console
from placement.decide.repair.input import RepairBudget, resolve_current
from placement.decide.repair.run import RepairResult
from placement.decide.repair.run import repair as run_repair
from placement.decide.repair.serving import repair_serving
from placement.errors import InputError, Problem
from placement.io.export.document import result_body
from placement.io.native import load_document, mapping_from_obj
from placement.io.native.serving import load_serving_job
from placement.messages import dump_message
from placement.messages.repair import repair_response
from placement.model.job import Job
from placement.model.topology import Topology
from placement.solve import SolveOptions
from placement.solve.serving import serving_traffic_job

__all__ = ["app", "print_repair", "repair"]

app = command_app()


def _load_current(path: Path, topo: Topology, job: Job, job_path: Path, allow_other_job: bool) -> list[int]:
    """The running job's mapping: a result (what `placement place --out` writes, or its `result`), a list of
    device ids or a {rank: device} map. A result of another job is refused unless `allow_other_job`."""
    doc = result_body(load_document(path))
    if isinstance(doc, dict) and "mapping" in doc:
        named = doc.get("job")
        if isinstance(named, str) and named != job.name and not allow_other_job:
            raise InputError(
                str(path),
                [
                    Problem(
                        "job",
                        f"the result is of job {named!r}, but JOB ({job_path}) is job {job.name!r}; give the "
                        f"result of {job.name!r}, or --allow-other-job to repair {job.name!r} from this mapping",
                    )
                ],
            )
        return mapping_from_obj(doc, topo, str(path))
    if not isinstance(doc, (list, dict)):
        fail(f"{path}: a mapping is a list of device ids, a {{rank: device}} map, or a result document", 2)
    return resolve_current(topo, job, doc, "current")


CurrentArg = Annotated[
    Path, typer.Argument(help="its current mapping: result JSON, list of device ids, or {rank: device}")
]
StateOpt = Annotated[
    Path | None, typer.Option(help="the new state: failed/degraded devices and links, occupancy")
]
DrainOpt = Annotated[
    list[str] | None, typer.Option(help="a host or domain drained for maintenance (repeatable)")
]
SpareOpt = Annotated[
    list[str] | None, typer.Option(help="a spare device, host or domain: preferred target (repeatable)")
]
HorizonOpt = Annotated[
    float, typer.Option(help="steps the job still runs (weighs step seconds against move cost)")
]
TimeLimitOpt = Annotated[
    float,
    typer.Option(
        help="seconds for the whole repair: a wall-clock limit, or a deterministic budget with --deterministic"
    ),
]
WorkersOpt = Annotated[
    int | None, typer.Option(help="CP-SAT workers (default: 2, or 1 with --deterministic)")
]
DeterministicOpt = Annotated[
    bool,
    typer.Option(
        help="budget the searches in deterministic time on one worker: the same answer on every run"
    ),
]
AllowOtherOpt = Annotated[
    bool, typer.Option(help="accept a CURRENT result whose job name is not JOB's (same ranks, another name)")
]


def _check(output: str, time_limit: float, horizon: float, workers: int | None, deterministic: bool) -> None:
    """The options' own rules (exit 2)."""
    if output not in ("table", "json"):
        fail(f"--output: unknown value {output!r}; use table or json", 2)
    if time_limit <= 0:
        fail(f"--time-limit: must be > 0, got {time_limit:g}", 2)
    if horizon <= 0:
        fail(f"--horizon: must be > 0, got {horizon:g}", 2)
    if workers is not None and not 1 <= workers <= 64:
        fail(f"--workers: must be in 1..64, got {workers}", 2)
    if deterministic and workers is not None and workers > 1:
        fail(f"--workers: --deterministic runs one worker (parallel workers race), got {workers}", 2)


@app.command("repair", cls=Command)
@guard
def repair(
    cluster: Annotated[Path, typer.Argument(help="cluster file")],
    job: Annotated[
        Path,
        typer.Argument(help="job file of the running job (a training job, or a serving job: kind: serving)"),
    ],
    current: CurrentArg,
    state: StateOpt = None,
    drain: DrainOpt = None,
    spare: SpareOpt = None,
    spares_only: Annotated[bool, typer.Option(help="move ranks only onto spares")] = False,
    max_moved_ranks: Annotated[int | None, typer.Option(help="move budget in ranks")] = None,
    max_moved_hosts: Annotated[
        int | None, typer.Option(help="move budget in hosts that receive moved ranks")
    ] = None,
    move_cost: Annotated[float, typer.Option(help="seconds one moved rank costs (checkpoint restore)")] = 0.0,
    horizon: HorizonOpt = 1000.0,
    time_limit: TimeLimitOpt = 5.0,
    workers: WorkersOpt = None,
    seed: Annotated[int, typer.Option(help="random seed")] = 0,
    deterministic: DeterministicOpt = False,
    allow_other_job: AllowOtherOpt = False,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
    json_: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Repair a running job after failures with few moves.

    A Pareto table of moved ranks against step seconds, from the least repair to a full re-place; the recommended
    row weighs --move-cost against --horizon steps.
    """
    output = json_output(output, json_)
    _check(output, time_limit, horizon, workers, deterministic)
    sj = None
    if is_serving_file(job):  # a serving deployment: placement.decide.repair.serving (priced by TPOT)
        topo, st = load_cluster_state(cluster, state)
        sj = load_serving_job(job)
        jb = serving_traffic_job(topo, st, sj)
    else:
        topo, st, jb = load_inputs(cluster, job, state)
    cur = _load_current(current, topo, jb, job, allow_other_job)
    budget = RepairBudget(max_moved_ranks, max_moved_hosts, move_cost, horizon)
    opts = SolveOptions(
        time_limit_s=time_limit,
        workers=workers or (1 if deterministic else 2),
        seed=seed,
        deterministic=deterministic,
    )
    # the arguments grouped by meaning: what is repaired, then how
    if sj is None:
        res = run_repair(
            topo, st, jb, cur,
            drain=drain or [], spares=spare or [], spares_only=spares_only, budget=budget, options=opts,
        )  # fmt: skip
    else:
        res = repair_serving(
            topo, st, sj, cur,
            drain=drain or [], spares=spare or [], spares_only=spares_only, budget=budget, options=opts,
        )  # fmt: skip
    if output == "json":  # the RepairResponse JSON mapping, as the Repair RPC answers (docs/results.md)
        sys.stdout.write(
            dump_message(repair_response(topo, res, time_limit_s=time_limit, deadline_limited=False))
        )
        return
    print_repair(topo, jb, res, wide)


def print_repair(topo: Topology, jb: Job, res: RepairResult, wide: bool = False) -> None:
    """The Pareto table of a repair (moved ranks against step seconds) and the recommended answer's moves."""
    what = "TPOT" if res.before_serving is not None else "step"
    title = (
        f"{jb.name}: {len(res.forced)} rank(s) on failed or drained devices; {what} before "
        f"{res.before.step_seconds:.4f} s; least repair {res.min_moves} moves; {res.stats.get('wall_s', 0):.2f} s"
    )
    t = Table(title=title)
    for c in ("", "answer", "moved ranks", "moved hosts", f"{what} s", "vs before", "proven"):
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
    con = table_console(wide)
    con.print(t)
    rec = res.answers[res.recommended]
    for m in rec.moves[:16]:
        con.print(
            f"  rank {m.rank}: {topo.devices[m.src].id} -> {topo.devices[m.dst].id}",
            highlight=False,
            soft_wrap=True,
        )
    if len(rec.moves) > 16:
        con.print(f"  ... {len(rec.moves) - 16} more (use --json)", highlight=False, soft_wrap=True)
    if rec.serving is not None:  # a serving deployment: its step is one decode step
        sv = rec.serving
        print_wrapped(
            con,
            f"recommended: TTFT {sv.ttft_seconds * 1e3:.3f} ms, TPOT {sv.tpot_seconds * 1e3:.3f} ms, tokens/s per "
            f"GPU {sv.tokens_per_s_per_gpu:.1f} (bottleneck tier {sv.bottleneck_tier})",
            wide,
            indent=0,
        )
