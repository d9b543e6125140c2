"""`placement capacity`: how many disjoint copies of each job shape fit on a state now, per domain at each level, and
how fragmented the free devices are (`placement.decide.capacity`); shapes as job files or ``tp8x4`` strings.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from placement.cli.commands.remote import decision_remote
from placement.cli.errors import fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_cluster_state
from placement.cli.options import JsonOpt, ServerOpt, TokenOpt, WideOpt, json_output
from placement.cli.serving import is_serving_file, serving_shape_job, serving_shape_message
from placement.cli.tables import print_wrapped, table_console
from placement.decide.capacity import MAX_PLACED
from placement.decide.capacity import capacity as run_capacity
from placement.errors import InputError, Problem
from placement.io.native import job_from_dict, load_document, load_job
from placement.messages import dump_message
from placement.messages.decisions import capacity_response
from placement.messages.files import request_from_dict
from placement.model.job import DIMENSIONS, Job
from placement.model.presets import preset_model
from placement.model.topology import Topology
from placement.solve import SolveOptions
from placement.v1 import placement_pb2 as pb

__all__ = ["app", "capacity", "print_capacity", "shape_doc", "shape_job"]

app = command_app()

_TOKEN = re.compile(r"^(tp|cp|ep|dp|pp)?([0-9]+)$")
SHAPE_MODEL = "7b-round"
"""The model of a --shape (`placement.model.presets.MODEL_PRESETS`)."""


def shape_job(spec: str, topology: Topology, tp_level: str | None, kind: str | None) -> Job:
    """The job of a shape string (`shape_doc`)."""
    return job_from_dict(shape_doc(spec, tp_level, kind), f"--shape {spec}")


def shape_doc(spec: str, tp_level: str | None, kind: str | None) -> dict[str, Any]:
    """The job of a shape string: sizes joined by ``x``, each ``tpN``, ``cpN``, ``epN``, ``dpN``, ``ppN`` or a
    bare ``N`` (data parallel), e.g. ``tp8x4`` (TP 8 x DP 4) or ``tp8xpp4x16``; TP groups required inside one
    domain of `tp_level` (None: no requirement). Its traffic is that of the `SHAPE_MODEL` preset, a 7B model (a
    job file gives your model's). The native job document (also sent as the Capacity request's shape)."""
    sizes: dict[str, int] = {}
    for tok in spec.lower().split("x"):
        m = _TOKEN.match(tok)
        if m is None:
            raise InputError(
                "--shape",
                [Problem(spec, f"{tok!r} is not a size; write sizes joined by x, e.g. tp8x4 or tp8xpp2xdp4")],
            )
        dim = m.group(1) or "dp"
        if dim in sizes:
            raise InputError("--shape", [Problem(spec, f"{dim} is given twice")])
        n = int(m.group(2))
        if not 1 <= n <= 1_000_000:
            raise InputError("--shape", [Problem(spec, f"{dim} must be in 1..1000000, got {n}")])
        sizes[dim] = n
    pp = sizes.get("pp", 1)
    model = preset_model(SHAPE_MODEL, pp=pp, micro_batches=max(8, pp))
    doc: dict[str, Any] = {
        "name": spec,
        "parallel": {d: sizes[d] for d in DIMENSIONS if d in sizes},
        "model": {
            "parameters": model.parameters,
            "hidden": model.hidden,
            "layers": model.layers,
            "seq_len": model.seq_len,
            "micro_batches": model.micro_batches,
        },
    }
    if kind:
        doc["device_kind"] = kind
    if tp_level is not None and sizes.get("tp", 1) > 1:
        doc["constraints"] = {"require": {"tp": tp_level}}
    return doc


@app.command("capacity", cls=Command)
@guard
def capacity(
    cluster: Annotated[Path, typer.Argument(help="cluster file")],
    state: Annotated[Path | None, typer.Option(help="state file: occupancy, failures")] = None,
    shape: Annotated[
        list[str] | None,
        typer.Option(help="a shape: sizes joined by x, e.g. tp8x4 (TP 8 x DP 4), tp8xpp2x16 (repeatable)"),
    ] = None,
    job: Annotated[list[Path] | None, typer.Option(help="a job file as a shape (repeatable)")] = None,
    tp_level: Annotated[
        str | None,
        typer.Option(help="level each TP group of a --shape stays inside (default: the lowest; none: free)"),
    ] = None,
    kind: Annotated[str | None, typer.Option(help="device kind of the --shape jobs (default: any)")] = None,
    place: Annotated[
        int, typer.Option(help=f"copies of each shape to place and model (their steps), 0..{MAX_PLACED}")
    ] = 0,
    time_limit: Annotated[float, typer.Option(help="seconds per placed copy")] = 2.0,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
    json_: JsonOpt = False,
    wide: WideOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """How many copies of each job shape fit now, per domain, and how fragmented the free devices are.

    Each shape is counted alone on the state: greedy packing (a lower bound) and an upper bound from the free
    devices per domain; --place N places and models the first N copies. With --server (or PLACEMENT_SERVER) a
    placement-server answers (the Capacity RPC).
    """
    output = json_output(output, json_)
    if output not in ("table", "json"):
        fail(f"--output: unknown value {output!r}; use table or json", 2)
    if not (math.isfinite(time_limit) and time_limit > 0):
        fail(f"--time-limit: must be > 0, got {time_limit:g}", 2)
    if not shape and not job:
        fail("give at least one --shape or --job", 2)
    files = job or []
    serving = {i for i, p in enumerate(files) if is_serving_file(p)}  # serving jobs: placement.cli.serving
    if serving and place:
        fail(
            "--place: a serving job's copies are counted, not modeled (a placed copy carries a training step); "
            "place one with `placement place` for its TTFT and TPOT",
            2,
        )
    if server is not None:  # the same request, solved by the server; --tp-level is checked there by name
        # the default --tp-level is the cluster's lowest level: read here, the cluster is checked by the server
        level: str | None = (
            load_cluster_state(cluster, None)[0].levels[0].name if tp_level is None else tp_level
        )
        if level == "none":
            level = None
        doc: dict[str, Any] = {
            "cluster_file": str(cluster),
            "shapes": [shape_doc(s, level, kind) for s in shape or []]
            + [load_document(p) for i, p in enumerate(files) if i not in serving],
            "place_copies": place,
            "options": {"time_limit_s": time_limit},
        }
        if state is not None:
            doc["state_file"] = str(state)
        req = request_from_dict(doc, pb.CapacityRequest, "<capacity>", Path.cwd())
        if serving:  # the job files in their order, the serving ones as their messages
            read = iter([pb.Job.FromString(m.SerializeToString()) for m in req.shapes[len(shape or []) :]])
            del req.shapes[len(shape or []) :]
            for i, p in enumerate(files):
                req.shapes.append(serving_shape_message(p) if i in serving else next(read))
        response = decision_remote("capacity", req, server, token)
    else:
        topo, st = load_cluster_state(cluster, state)
        level = topo.levels[0].name if tp_level is None else tp_level
        if level == "none":
            level = None
        elif level not in topo.level_names:
            fail(f"--tp-level: unknown level {level!r}; levels are {list(topo.level_names)} or none", 2)
        shapes = [shape_job(s, topo, level, kind) for s in shape or []] + [
            serving_shape_job(p, topo, st) if i in serving else load_job(p) for i, p in enumerate(files)
        ]
        res = run_capacity(
            topo, st, shapes, place_copies=place, options=SolveOptions(time_limit_s=time_limit)
        )
        response = capacity_response(topo, res, time_limit_s=time_limit, deadline_limited=False)
    if output == "json":  # the CapacityResponse JSON mapping, as the Capacity RPC answers
        sys.stdout.write(dump_message(response))
        return
    print_capacity(response, req.cluster.name if server is not None else topo.name, wide)


def print_capacity(response: Any, cluster: str, wide: bool = False) -> None:
    """The tables of a CapacityResponse (counted here or by a server): copies per shape, the best domains per
    level, and the fragmentation per level; in 80 columns when piped, or with `wide` at full width."""
    out = table_console(wide)
    t = Table(
        title=f"{cluster}: copies that fit now, each shape alone ({response.stats.wall_s * 1000:.1f} ms)"
    )
    for c in ("shape", "ranks", "usable", "copies", "at most", "method", "steps s"):
        t.add_column(c, justify="left" if c in ("shape", "method") else "right")
    for s in response.shapes:
        t.add_row(
            s.job,
            str(s.ranks),
            str(s.usable_devices),
            str(s.copies),
            str(s.upper_bound),
            s.method,
            " ".join(f"{p.cost.step_seconds:.3f}" for p in s.placed) or "-",
        )
    out.print(t)
    levels = [lf.level for lf in response.fragmentation]
    for s in response.shapes:
        best: list[str] = []
        for lname in levels[1:]:
            rows = sorted((d for d in s.domains if d.level == lname), key=lambda d: (-d.copies, d.domain))
            if rows:
                shown = ", ".join(f"{d.domain} {d.copies}" for d in rows[:3])
                best.append(f"{lname} {shown}" + (f" (+{len(rows) - 3} more)" if len(rows) > 3 else ""))
        if best:
            print_wrapped(out, f"{s.job} per domain: " + "; ".join(best), wide)
        for n in s.notes:
            print_wrapped(out, f"{s.job}: {n}", wide)
    f = Table(title="fragmentation: 1 - most free devices in one child / free devices, mean over domains")
    for c in ("level", "fragmentation", "free", "domains with free", "largest free block"):
        f.add_column(c, justify="left" if c == "level" else "right")
    for lf in response.fragmentation:
        f.add_row(
            lf.level,
            f"{lf.fragmentation:.3f}",
            str(lf.free_devices),
            str(lf.domains_with_free),
            str(lf.largest_free_block),
        )
    out.print(f)
