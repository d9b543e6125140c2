"""`placement export`: a placement result into the files a launcher reads (see `placement.io.export`): a rankfile,
a SLURM_HOSTFILE, a Slurm or torchrun script, per-rank dotenv files or Kubernetes manifests.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
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

__all__ = ["app", "export_cmd"]

app = command_app()


@app.command("export", cls=Command)
@guard
def export_cmd(
    mapping: Annotated[Path, typer.Argument(help="a result JSON/YAML (placement place --out) or a mapping")],
    format: Annotated[
        str, typer.Option("--format", help="rankfile, hostfile, slurm, torchrun, dotenv, k8s, json or yaml")
    ] = "rankfile",
    cluster: Annotated[
        Path | None,
        typer.Option(help="cluster file: CPU/NUMA affinity and kinds of the devices (k8s: the levels)"),
    ] = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="write here (dotenv: a directory, one file per rank)")
    ] = None,
    placement_path: Annotated[
        str | None,
        typer.Option(
            help="where `placement bind` finds the result on the compute nodes (default: MAPPING's absolute path)"
        ),
    ] = None,
    bind_cmd: Annotated[
        str, typer.Option(help="the placement executable on the compute nodes")
    ] = "placement",
    master_port: Annotated[int, typer.Option(help="MASTER_PORT (torchrun, dotenv, k8s)")] = 29500,
    image: Annotated[str | None, typer.Option(help="k8s: container image of the rank Pods")] = None,
    command: Annotated[
        str | None, typer.Option(help="k8s: the command each Pod runs, e.g. 'python train.py'")
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(help="k8s: LEVEL=NODE_LABEL_KEY for each level above the host, repeatable"),
    ] = None,
    gpu_resource: Annotated[
        str | None,
        typer.Option(help="k8s: the GPU resource name (default nvidia.com/gpu, amd.com/gpu for AMD kinds)"),
    ] = None,
    gpus_per_node: Annotated[
        int | None,
        typer.Option(
            help="slurm: GPUs to request per node when more than its ranks (e.g. all free ones, so the allocation covers the plan)"
        ),
    ] = None,
) -> None:
    """Turn a placement into what a launcher reads.

    An OpenMPI rankfile, a SLURM_HOSTFILE, a Slurm script, a torchrun script, per-rank dotenv files or Kubernetes
    manifests. Launched tasks run `placement bind`.
    """
    if format in RETIRED:
        fail(f"--format: {RETIRED[format]}", 2)
    if format not in FORMATS:
        fail(f"--format: unknown value {format!r}; use one of {', '.join(FORMATS)}", 2)
    if gpus_per_node is not None and gpus_per_node < 1:
        fail(f"--gpus-per-node: must be >= 1, got {gpus_per_node}", 2)
    if not 1 <= master_port <= 65535:
        fail(f"--master-port: must be in 1..65535, got {master_port}", 2)
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
    labels: dict[str, str] = {}
    for spec in label or []:
        lvl, eq, key = spec.partition("=")
        if not eq or not lvl or not key:
            fail(f"--label {spec!r}: write LEVEL=NODE_LABEL_KEY, e.g. leaf=network.example.com/leaf", 2)
        labels[lvl] = key
    body = result_body(doc)
    job = str(body.get("job", mapping.stem)) if isinstance(body, dict) else mapping.stem
    opts = ExportOptions(
        job=job,
        placement_path=placement_path or str(mapping.resolve()),
        master_port=master_port,
        bind=bind_cmd,
        command=tuple(shlex.split(command)) if command else (),
        image=image,
        level_labels=labels,
        gpu_resource=gpu_resource,
        gpus_per_node=gpus_per_node,
    )
    document = doc if isinstance(doc, dict) else None
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
        return
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text)
        if format in ("slurm", "torchrun"):
            out_file.chmod(0o755)
        err.print(f"wrote {out_file}", soft_wrap=True)
