"""`placement evaluate`: the modeled step of a given mapping (step, exposed and total communication, compute, MFU,
tokens/s, per phase and per group kind and tier), as tables or as an EvaluateResponse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import load_inputs, write_output
from placement.cli.options import JsonOpt, WideOpt, json_output
from placement.cli.picture import render_picture
from placement.cli.serving import evaluate_serving_file, is_serving_file
from placement.cli.tables import headline, print_report, table_console
from placement.cost.evaluate import evaluate as evaluate_cost
from placement.io.native import load_mapping
from placement.messages import domain, dump_message

__all__ = ["app", "evaluate"]

app = command_app()


@app.command("evaluate", cls=Command)
@guard
def evaluate(
    cluster: Annotated[Path, typer.Argument(help="cluster file (YAML/JSON)")],
    job: Annotated[Path, typer.Argument(help="job file")],
    mapping: Annotated[
        Path, typer.Argument(help="mapping: result JSON, list of device ids, or {rank: device}")
    ],
    state: Annotated[Path | None, typer.Option(help="state file: occupancy, failures, fault domains")] = None,
    output: Annotated[str, typer.Option(help="table or json")] = "table",
    json_: JsonOpt = False,
    wide: WideOpt = False,
    picture: Annotated[
        Path | None, typer.Option(help="also draw the placement (SVG or PNG by suffix)")
    ] = None,
) -> None:
    """The modeled step of a given mapping.

    Step, exposed and total communication, compute, MFU, tokens/s, and the breakdown per phase and per group
    kind and tier.
    """
    output = json_output(output, json_)
    if is_serving_file(job):  # a serving job (kind: serving): placement.cli.serving
        return evaluate_serving_file(cluster, job, mapping, state, output)
    topo, st, jb = load_inputs(cluster, job, state)
    mp = load_mapping(mapping, topo)
    rep = evaluate_cost(topo, st, jb, mp)
    if picture is not None:
        render_picture(topo, st, jb, mp, rep, picture)
        err.print(f"wrote {escape(str(picture))}", highlight=False, soft_wrap=True)
    if output == "json":
        write_output(dump_message(domain.evaluate_response(topo, jb, mp, rep)), None)
    elif output == "table":
        print_report(f"{jb.name} on {topo.name}: {headline(rep)}", rep, console=table_console(wide))
    else:
        fail(f"--output: unknown value {output!r}; use table or json", 2)
