"""`placement export`: a placement result into the files a launcher reads (see `placement.io.export`): a rankfile,
a SLURM_HOSTFILE, a Slurm or torchrun script, per-rank dotenv files or Kubernetes manifests.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import launch_path, own_command
from placement.errors import InputError, Problem
from placement.io.export import (
    FORMATS,
    MULTI_FILE,
    RETIRED,
    ExportOptions,
    export,
    export_files,
    is_legacy_result,
    result_body,
    seats_from_document,
)
from placement.io.native import load_cluster, load_document
from placement.model.topology import Topology

__all__ = ["app", "export_cmd"]

app = command_app()


FormatOpt = Annotated[
    str, typer.Option("--format", help="rankfile, hostfile, slurm, torchrun, dotenv, k8s, json or yaml")
]
ClusterOpt = Annotated[
    Path | None,
    typer.Option(help="cluster file: CPU/NUMA affinity and kinds of the devices (k8s: the levels)"),
]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="write here (dotenv: a directory, one file per rank)")
]
PlacementPathOpt = Annotated[
    str | None,
    typer.Option(
        help="where `placement bind` finds the result when the launch runs (default: MAPPING's path relative to "
        "this directory, where sbatch, torchrun or mpirun then run)"
    ),
]
BindCmdOpt = Annotated[
    str | None,
    typer.Option(help="the placement command on the compute nodes (default: the one running this export)"),
]
ImageOpt = Annotated[str | None, typer.Option(help="k8s: container image of the rank Pods")]
CommandOpt = Annotated[
    str | None, typer.Option(help="k8s: the command each Pod runs, e.g. 'python train.py'")
]
LabelOpt = Annotated[
    list[str] | None, typer.Option(help="k8s: LEVEL=NODE_LABEL_KEY for each level above the host, repeatable")
]
GpuResourceOpt = Annotated[
    str | None,
    typer.Option(help="k8s: the GPU resource name (default nvidia.com/gpu, amd.com/gpu for AMD kinds)"),
]
GpusPerNodeOpt = Annotated[
    int | None,
    typer.Option(
        help="slurm: GPUs to request per node when more than its ranks (e.g. all free ones, so the allocation "
        "covers the plan)"
    ),
]


def _check(format: str, gpus_per_node: int | None, master_port: int) -> None:
    """The options' own rules (exit 2)."""
    if format in RETIRED:
        fail(f"--format: {RETIRED[format]}", 2)
    if format not in FORMATS:
        fail(f"--format: unknown value {format!r}; use one of {', '.join(FORMATS)}", 2)
    if gpus_per_node is not None and gpus_per_node < 1:
        fail(f"--gpus-per-node: must be >= 1, got {gpus_per_node}", 2)
    if not 1 <= master_port <= 65535:
        fail(f"--master-port: must be in 1..65535, got {master_port}", 2)


def _labels(specs: list[str] | None) -> dict[str, str]:
    """`--label LEVEL=KEY` as level -> node-label key."""
    labels: dict[str, str] = {}
    for spec in specs or []:
        lvl, eq, key = spec.partition("=")
        if not eq or not lvl or not key:
            fail(f"--label {spec!r}: write LEVEL=NODE_LABEL_KEY, e.g. leaf=network.example.com/leaf", 2)
        labels[lvl] = key
    return labels


def _read(mapping: Path, cluster: Path | None) -> tuple[Any, list[tuple[str, int]], Topology | None]:
    """The result document, its seats and the cluster (whose hosts must hold every seat)."""
    doc = load_document(mapping)
    if is_legacy_result(doc):
        err.print(
            f"[yellow]deprecated:[/] {escape(str(mapping))} is a native result of an earlier release; it is read "
            "for one more release. Results are now the PlaceResponse JSON mapping (`placement place --output json`).",
            soft_wrap=True,
        )
    seats = seats_from_document(doc, str(mapping))
    topo = None
    if cluster is not None:
        topo, _ = load_cluster(cluster)
        known = set(topo.host_names)
        bad = sorted({h for h, _ in seats if h not in known})
        if bad:
            raise InputError(str(mapping), [Problem("mapping", f"hosts {bad[:5]} are not in {cluster}")])
    return doc, seats, topo


@app.command("export", cls=Command)
@guard
def export_cmd(
    mapping: Annotated[Path, typer.Argument(help="a result JSON/YAML (placement place --out) or a mapping")],
    format: FormatOpt = "rankfile",
    cluster: ClusterOpt = None,
    out_file: OutOpt = None,
    placement_path: PlacementPathOpt = None,
    bind_cmd: BindCmdOpt = None,
    master_port: Annotated[int, typer.Option(help="MASTER_PORT (torchrun, dotenv, k8s)")] = 29500,
    image: ImageOpt = None,
    command: CommandOpt = None,
    label: LabelOpt = None,
    gpu_resource: GpuResourceOpt = None,
    gpus_per_node: GpusPerNodeOpt = None,
) -> None:
    """Turn a placement into what a launcher reads.

    An OpenMPI rankfile, a SLURM_HOSTFILE, a Slurm script, a torchrun script, per-rank dotenv files or Kubernetes
    manifests. Launched tasks run `placement bind` (this same placement, unless --bind-cmd); paths in them are
    relative to the directory you export in, which is where sbatch, torchrun or mpirun run.
    """
    _check(format, gpus_per_node, master_port)
    doc, seats, topo = _read(mapping, cluster)
    labels = _labels(label)
    body = result_body(doc)
    opts = ExportOptions(
        job=str(body.get("job", mapping.stem)) if isinstance(body, dict) else mapping.stem,
        placement_path=placement_path or launch_path(mapping),
        master_port=master_port,
        bind=bind_cmd or own_command(),
        command=tuple(shlex.split(command)) if command else (),
        image=image,
        level_labels=labels,
        gpu_resource=gpu_resource,
        gpus_per_node=gpus_per_node,
    )
    _write(format, seats, doc if isinstance(doc, dict) else None, topo, opts, out_file)


def _write(
    format: str,
    seats: list[tuple[str, int]],
    document: dict[str, Any] | None,
    topo: Topology | None,
    opts: ExportOptions,
    out_file: Path | None,
) -> None:
    """The format's text on stdout or in `out_file` (a directory for the multi-file formats; scripts
    executable)."""
    try:
        if format in MULTI_FILE and out_file is not None:
            files = export_files(format, seats, document=document, topology=topo, options=opts)
            out_file.mkdir(parents=True, exist_ok=True)
            for name, text in files.items():
                (out_file / name).write_text(text)
            err.print(f"wrote {len(files)} files to {out_file}", soft_wrap=True)
            return
        text = export(format, seats, document=document, topology=topo, options=opts)
    except ValueError as e:
        fail(f"--format {format}: {e}", 2)
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text)
        if format in ("slurm", "torchrun"):
            out_file.chmod(0o755)
        err.print(f"wrote {out_file}", soft_wrap=True)
