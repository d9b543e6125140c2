"""Command-line options that several commands share, declared once: the server a command talks to and its token,
`--wide` tables, `--json` (the alias of `--output json`), the `--tier` override, the cluster file's `--out`, and the importers' `--node-topo` and
`--gpus-per-node`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

SERVER_ENV = "PLACEMENT_SERVER"
TOKEN_ENV = "PLACEMENT_TOKEN"

ServerOpt = Annotated[
    str | None,
    typer.Option(
        "--server", "-s", envvar=SERVER_ENV, help="HOST:PORT of a placement-server: solve there, not here"
    ),
]
RequiredServerOpt = Annotated[
    str, typer.Option("--server", "-s", envvar=SERVER_ENV, help="HOST:PORT of the placement-server")
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar=TOKEN_ENV, help="bearer token for the server")
]
WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="every column at full width (default: the tables fit the terminal, 80 columns when piped)",
    ),
]
TierOpt = Annotated[list[str] | None, typer.Option(help="LEVEL=GBPS:US[:OVERSUBSCRIPTION], repeatable")]
ClusterOutOpt = Annotated[Path | None, typer.Option("--out", help="write the cluster YAML here")]
NodeTopoOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="FILE or HOST_GLOB=FILE (nvidia-smi, rocm-smi or NCCL XML); repeatable, first match wins"
    ),
]
HostGpusOpt = Annotated[int, typer.Option(help="GPUs per host (without --node-topo)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="the same as --output json")]


def json_output(output: str, json_: bool) -> str:
    """The `--output` a command runs with: ``json`` when `--json` was given (its alias on every command with
    `--output`), else `output`."""
    return "json" if json_ else output
