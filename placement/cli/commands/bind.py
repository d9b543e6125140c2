"""`placement bind [OPTIONS] -- CMD [ARGS...]`: parse the options, plan with `placement.launch.bind`, print what
was skipped, then exec (or print the plan with --dry-run).
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from placement.cli.errors import err, escape, fail
from placement.cli.help import Command, command_app
from placement.launch.bind import BindError, describe, execute, plan
from placement.launch.bind import dry_run as render

__all__ = ["app", "bind"]

app = command_app()


@app.command(
    "bind",
    cls=Command,
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
def bind(
    command: Annotated[list[str], typer.Argument(help="the command to run, after --")],
    placement: Annotated[
        str | None, typer.Option(help="the placement result (JSON/YAML); default: $PLACEMENT_FILE")
    ] = None,
    rank: Annotated[
        int | None,
        typer.Option(help="this task's rank (default: RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID)"),
    ] = None,
    host_check: Annotated[
        bool,
        typer.Option(
            help="check the rank runs on its planned host (PLACEMENT_HOST, SLURMD_NODENAME or the hostname)"
        ),
    ] = True,
    cpu_bind: Annotated[
        str, typer.Option(help="auto (bind where known and possible), off, or strict (fail if not possible)")
    ] = "auto",
    master_port: Annotated[int, typer.Option(help="MASTER_PORT when it is not set")] = 29500,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan as JSON instead of running the command")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="say on stderr what the task gets")
    ] = False,
) -> None:
    """Run CMD as this task's rank of the placement, on its GPU and that GPU's CPUs.

    Only its planned GPU is visible (CUDA_VISIBLE_DEVICES, or ROCR_VISIBLE_DEVICES for AMD), LOCAL_RANK=0, CPUs
    and memory on the GPU's NUMA node. Use it under any launcher: `mpirun --rankfile F placement bind -- CMD`,
    `srun ... placement bind -- CMD`, `torchrun --no-python ... placement bind -- CMD`.
    """
    env = dict(os.environ)
    try:
        p = plan(
            command,
            env,
            placement=placement,
            rank=rank,
            host_check=host_check,
            cpu_bind=cpu_bind,
            master_port=master_port,
        )
        for note in p.notes[1:]:
            err.print(f"[yellow]placement bind: note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        if verbose:
            err.print(escape(describe(p)), highlight=False, soft_wrap=True)
        if dry_run:
            sys.stdout.write(render(p))
            return
        sys.stdout.flush()
        sys.stderr.flush()
        execute(p, env)
    except BindError as e:
        fail(f"placement bind: {escape(str(e))}", 2)
