"""`placement import nvidia-smi | slurm | k8s`: a cluster file from one node's `nvidia-smi topo -m`, from Slurm's
topology.conf or topology.yaml, or from Kubernetes node labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from placement.cli.commands.import_common import cluster_yaml, finish_import
from placement.cli.errors import err, escape, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import write_output
from placement.cli.options import ClusterOutOpt, TierOpt
from placement.io.affinity import affinity_fields
from placement.io.importers.defaults import DEFAULT_TIERS
from placement.io.importers.k8s import parse_k8s_nodes
from placement.io.importers.nics import nic_fields, nic_warnings
from placement.io.importers.nvidia_smi import read_nvidia_smi
from placement.io.importers.slurm import read_slurm
from placement.io.native import cluster_from_dict
from placement.io.native.document import read_text

__all__ = ["app", "import_k8s", "import_nvidia_smi", "import_slurm"]

app = command_app()


@app.command("nvidia-smi", cls=Command)
@guard
def import_nvidia_smi(
    file: Annotated[Path, typer.Argument(help="output of `nvidia-smi topo -m`")],
    host: Annotated[str, typer.Option(help="host name for the node")] = "node0",
    kind: Annotated[str, typer.Option(help="device kind, e.g. H100")] = "gpu",
    table: Annotated[
        int | None, typer.Option(help="which table, when the file holds several (0-based)")
    ] = None,
    partial: Annotated[bool, typer.Option(help="accept a truncated table, filling missing pairs")] = False,
    out_file: ClusterOutOpt = None,
) -> None:
    """A one-node cluster file with the node's intra-node matrix and rails."""
    nt = read_nvidia_smi(file, table=table, allow_partial=partial)
    for w in nt.warnings:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    doc = {
        "name": host,
        "levels": [
            {"name": "node", "bandwidth_gbps": DEFAULT_TIERS[0][0], "latency_us": DEFAULT_TIERS[0][1]}
        ],
        "node_types": [
            {
                "name": file.stem,
                "devices": len(nt.gpus),
                "kind": kind,
                "matrix": [" ".join(r) for r in nt.matrix],
                "rails": list(nt.rails),
                **nic_fields(nt.nics),
                **affinity_fields(nt.cpu_affinity, nt.numa_affinity),
            }
        ],
        "hosts": [{"name": host, "node_type": file.stem}],
    }
    cluster_from_dict(doc, str(file))
    for w in nic_warnings(doc, "the nvidia-smi table"):
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    write_output(cluster_yaml(doc), out_file)


@app.command("slurm", cls=Command)
@guard
def import_slurm(
    file: Annotated[Path, typer.Argument(help="topology.conf or topology.yaml")],
    levels: Annotated[str | None, typer.Option(help="level names bottom-up, e.g. leaf,spine,core")] = None,
    topology: Annotated[
        str | None, typer.Option(help="which topology (topology.yaml) or plugin (tree/block/ring)")
    ] = None,
    tier: TierOpt = None,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs per node")] = 8,
    kind: Annotated[str | None, typer.Option(help="device kind")] = None,
    node_topo: Annotated[
        Path | None, typer.Option(help="nvidia-smi topo -m of one node, applied to every node")
    ] = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from Slurm's topology.conf (tree, block, ring) or topology.yaml."""
    doc, warnings = read_slurm(file, topology=topology, level_names=levels.split(",") if levels else None)
    finish_import(doc, list(warnings), tier or [], gpus_per_node, kind, node_topo, out_file)


@app.command("k8s", cls=Command)
@guard
def import_k8s(
    file: Annotated[Path, typer.Argument(help="kubectl get nodes -o json")],
    levels: Annotated[str, typer.Option(help="topology label keys, coarse to fine (Kueue TAS order)")],
    level_names: Annotated[str | None, typer.Option(help="names for those levels")] = None,
    gpu_resource: Annotated[
        str, typer.Option(help="extended resource holding the GPU count")
    ] = "nvidia.com/gpu",
    tier: TierOpt = None,
    node_topo: Annotated[Path | None, typer.Option(help="nvidia-smi topo -m applied to every node")] = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from Kubernetes node labels."""
    text = read_text(file)
    doc, warnings = parse_k8s_nodes(
        text,
        str(file),
        levels=levels.split(","),
        level_names=level_names.split(",") if level_names else None,
        gpu_resource=gpu_resource,
    )
    finish_import(doc, list(warnings), tier or [], None, None, node_topo, out_file)
