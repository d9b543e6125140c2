"""Launch files that the tools accept, from a placement: OpenMPI rankfile, SLURM_HOSTFILE and a Slurm script,
torchrun commands, per-rank dotenv files, Kubernetes manifests; json/yaml write the result (the PlaceResponse
JSON, docs/results.md) or the plain mapping as given.

Each format has its module; `export` renders single-file formats, `export_files` the ones with a file per rank.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

from placement.io.export.common import ExportOptions, is_amd
from placement.io.export.document import (
    Seat,
    baseline_costs,
    is_legacy_result,
    launch_seats,
    result_body,
    seats_from_document,
)
from placement.io.export.dotenv import dotenv_files
from placement.io.export.k8s import k8s_manifests
from placement.io.export.rankfile import hostfile, rankfile
from placement.io.export.slurm import slurm_script
from placement.io.export.torchrun import torchrun_script
from placement.model.topology import Topology

__all__ = [
    "FORMATS",
    "MULTI_FILE",
    "ExportOptions",
    "Seat",
    "baseline_costs",
    "export",
    "export_files",
    "is_amd",
    "is_legacy_result",
    "launch_seats",
    "result_body",
    "seats_from_document",
]

FORMATS = ("json", "yaml", "rankfile", "hostfile", "slurm", "torchrun", "dotenv", "k8s")
MULTI_FILE = ("dotenv",)
RETIRED = {
    "env": "--format env wrote lines no tool reads; use --format dotenv (one file per rank) or launch through `placement bind`",
    "kueue": "--format kueue wrote a status field Kueue sets itself; use --format k8s (a Kueue Topology and per-rank Pods)",
}


def _seats(seats: Sequence[tuple[str, int] | Seat], document: Any, topology: Topology | None) -> list[Seat]:
    if all(isinstance(s, Seat) for s in seats):
        return [s for s in seats if isinstance(s, Seat)]
    return launch_seats([(s.host, s.index) if isinstance(s, Seat) else s for s in seats], document, topology)


def _check(fmt: str) -> None:
    if fmt in RETIRED:
        raise ValueError(RETIRED[fmt])
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")


def export(
    fmt: str,
    seats: Sequence[tuple[str, int] | Seat],
    *,
    document: dict[str, Any] | None = None,
    topology: Topology | None = None,
    options: ExportOptions | None = None,
) -> str:
    """Render one format as text (multi-file formats: every file, each after a ``# ==> NAME <==`` line).

    `seats` are (host, GPU index) per rank or `Seat`s; the document's mapping entries and the `topology` add the
    device kind and CPU/NUMA affinity.
    """
    _check(fmt)
    opts = options or ExportOptions(job=str((result_body(document) or {}).get("job", "job")))
    if fmt == "json":
        return (
            json.dumps(
                document
                if document is not None
                else [f"{s[0]}/gpu{s[1]}" if isinstance(s, tuple) else s.device for s in seats],
                indent=2,
            )
            + "\n"
        )
    if fmt == "yaml":
        return yaml.safe_dump(
            document
            if document is not None
            else [f"{s[0]}/gpu{s[1]}" if isinstance(s, tuple) else s.device for s in seats],
            sort_keys=False,
        )
    ss = _seats(seats, document, topology)
    if not ss:
        raise ValueError("the placement has no ranks")
    if fmt in MULTI_FILE:
        return "".join(
            f"# ==> {name} <==\n{text}" for name, text in export_files(fmt, ss, options=opts).items()
        )
    if fmt == "rankfile":
        return rankfile(ss, opts)
    if fmt == "hostfile":
        return hostfile(ss)
    if fmt == "slurm":
        return slurm_script(ss, opts)
    if fmt == "torchrun":
        return torchrun_script(ss, opts)

    return k8s_manifests(ss, opts, topology)


def export_files(
    fmt: str,
    seats: Sequence[tuple[str, int] | Seat],
    *,
    document: dict[str, Any] | None = None,
    topology: Topology | None = None,
    options: ExportOptions | None = None,
) -> dict[str, str]:
    """File name -> text for the formats written as a directory (`MULTI_FILE`)."""
    _check(fmt)
    opts = options or ExportOptions(job=str((result_body(document) or {}).get("job", "job")))
    ss = _seats(seats, document, topology)
    if fmt == "dotenv":
        return dotenv_files(ss, opts)
    raise ValueError(f"--format {fmt} is one file; use export()")
