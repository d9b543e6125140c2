"""Command-line options that several commands share, declared once: the `--tier` override, the cluster file
`--out`, and the fabric importers' `--node-topo` and `--gpus-per-node`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

TierOpt = Annotated[list[str] | None, typer.Option(help="LEVEL=GBPS:US, repeatable")]
ClusterOutOpt = Annotated[Path | None, typer.Option("--out", help="write the cluster YAML here")]
NodeTopoOpt = Annotated[
    list[str] | None,
    typer.Option(
        help="FILE or HOST_GLOB=FILE (nvidia-smi, rocm-smi or NCCL XML); repeatable, first match wins"
    ),
]
HostGpusOpt = Annotated[int, typer.Option(help="GPUs per host (without --node-topo)")]
