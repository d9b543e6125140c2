"""`placement import nccl-xml | rocm-smi | ibnetdiscover | topograph`: a cluster file from per-host node files or a
fabric dump, the same native cluster YAML as `import nvidia-smi`/`slurm`/`k8s`, validated before writing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from placement.cli.commands.import_common import cluster_yaml
from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import write_output
from placement.cli.options import ClusterOutOpt, HostGpusOpt, NodeTopoOpt, TierOpt
from placement.io.importers.assemble import (
    TOP_FANOUT,
    AssembledCluster,
    cluster_from_fabric,
    cluster_from_node_files,
    host_domains,
    read_node_files,
)
from placement.io.importers.detect import refuse_other_format
from placement.io.importers.fabric import ImportedFabric
from placement.io.importers.ibnetdiscover import read_ibnetdiscover
from placement.io.importers.topograph import read_topograph
from placement.io.text import read_text

__all__ = ["app"]

app = command_app()

MAX_WARNINGS = 20


def _say(warnings: Sequence[str]) -> None:
    for w in warnings[:MAX_WARNINGS]:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    if len(warnings) > MAX_WARNINGS:
        err.print(
            f"[yellow]warning:[/] ... and {len(warnings) - MAX_WARNINGS} more warning(s)", soft_wrap=True
        )


def _write(cluster: AssembledCluster, out_file: Path | None) -> None:
    _say(cluster.warnings)
    for n in cluster.notes:
        err.print(f"[yellow]note:[/] {escape(n)}", soft_wrap=True)
    write_output(cluster_yaml(cluster.doc), out_file)


def _level_spec(spec: str | None, hosts: int) -> tuple[list[str], list[int]]:
    """``rack:4,pod:2,cluster`` -> names and fan-outs (the last level holds everything when it has none)."""
    if not spec:
        return (["cluster"], [hosts]) if hosts > 1 else ([], [])
    names: list[str] = []
    fans: list[int] = []
    parts = spec.split(",")
    for i, part in enumerate(parts):
        m = re.fullmatch(r"\s*([A-Za-z_][\w-]*)\s*(?::\s*(\d+))?\s*", part)
        if (
            m is None
            or (m.group(2) is None and i < len(parts) - 1)
            or (m.group(2) is not None and int(m.group(2)) < 1)
        ):
            fail(
                f"--levels {escape(spec)!r}: write NAME:FANOUT,... bottom up (hosts per domain, then domains per "
                "domain), the last NAME may omit its fan-out, e.g. rack:4,cluster",
                2,
            )
        assert m is not None
        if m.group(1) == "node" or m.group(1) in names:
            fail(f"--levels {escape(spec)!r}: level {m.group(1)!r} is the host level or repeated", 2)
        names.append(m.group(1))
        fans.append(int(m.group(2)) if m.group(2) else TOP_FANOUT)
    return names, fans


def _node_files_cmd(
    files: list[Path],
    host: str | None,
    hosts: str | None,
    levels: str | None,
    kind: str | None,
    tier: list[str] | None,
    out_file: Path | None,
    expect: str,
    **read: Any,
) -> None:
    for f in files:
        refuse_other_format(read_text(f), str(f), expect)
    names = (
        [h.strip() for h in hosts.split(",")]
        if hosts
        else [host]
        if host
        else ([f.stem for f in files] if len(files) > 1 else ["node0"])
    )
    if len(names) != len(files):
        fail(
            f"--hosts names {len(names)} host(s) for {len(files)} file(s); give one name per file, in order",
            2,
        )
    if len(set(names)) != len(names):
        fail("--hosts: each host needs its own name", 2)
    nodes = read_node_files(files, names, **read)
    lv_names, fans = _level_spec(levels, len(files))
    domains = host_domains(names, lv_names, fans)
    tops_top = {d[lv_names[-1]] for d in domains} if lv_names else set()
    if len(tops_top) > 1:
        fail(
            f"--levels {escape(levels or '')!r}: the top level {lv_names[-1]!r} has {len(tops_top)} domains; end with "
            "a level without fan-out (it holds everything), e.g. rack:4,cluster",
            2,
        )
    name = names[0] if len(names) == 1 else Path(files[0]).parent.name or "cluster"
    _write(cluster_from_node_files(name, nodes, lv_names, domains, kind=kind, tiers=tier or []), out_file)


def _node_specs(specs: list[str]) -> list[tuple[str, Path]]:
    """``FILE`` (every host) or ``PATTERN=FILE`` (hosts matching the glob), in order; the first match wins."""
    out: list[tuple[str, Path]] = []
    for spec in specs:
        pattern, sep, file = spec.partition("=")
        if not sep or Path(spec).exists():
            pattern, file = "*", spec
        if not file:
            fail(f"--node-topo {escape(spec)!r}: write FILE or HOST_GLOB=FILE, e.g. 'gpu-a*=a.xml'", 2)
        out.append((pattern, Path(file)))
    return out


def _fabric_cmd(
    fabric: ImportedFabric,
    node_topo: list[str] | None,
    kind: str | None,
    tier: list[str] | None,
    gpus_per_node: int,
    out_file: Path | None,
    *,
    use_rails: bool = True,
) -> None:
    if gpus_per_node < 1:
        fail(f"--gpus-per-node: must be >= 1, got {gpus_per_node}", 2)
    cluster = cluster_from_fabric(
        fabric,
        _node_specs(node_topo or []),
        kind=kind,
        tiers=tier or [],
        gpus_per_node=gpus_per_node,
        use_rails=use_rails,
    )
    _write(cluster, out_file)


@app.command("nccl-xml", cls=Command)
@guard
def import_nccl_xml(
    files: Annotated[list[Path], typer.Argument(help="NCCL/RCCL topology XML, one per host")],
    host: Annotated[str | None, typer.Option(help="host name (one file)")] = None,
    hosts: Annotated[str | None, typer.Option(help="host names, one per file, comma-separated")] = None,
    levels: Annotated[
        str | None,
        typer.Option(help="levels above the hosts, NAME:FANOUT bottom up, e.g. rack:4,cluster"),
    ] = None,
    kind: Annotated[str | None, typer.Option(help="device kind (default: from the XML, e.g. MI300X)")] = None,
    nvlink: Annotated[
        int | None,
        typer.Option(
            help="NVLinks per GPU pair through NVSwitch, for files that list none (12: A100, 18: H100)"
        ),
    ] = None,
    xgmi_gbps: Annotated[
        float | None, typer.Option(help="xGMI GB/s per link and direction (default by GPU arch)")
    ] = None,
    tier: TierOpt = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from NCCL/RCCL topology XML: link matrix, rails and NIC speeds per host."""
    if nvlink is not None and nvlink < 1:
        fail(f"--nvlink: must be >= 1, got {nvlink}", 2)
    if xgmi_gbps is not None and xgmi_gbps <= 0:
        fail(f"--xgmi-gbps: must be > 0, got {xgmi_gbps:g}", 2)
    _node_files_cmd(
        files, host, hosts, levels, kind, tier, out_file, "nccl-xml", nvlink=nvlink, xgmi_gbps=xgmi_gbps
    )


@app.command("rocm-smi", cls=Command)
@guard
def import_rocm_smi(
    files: Annotated[list[Path], typer.Argument(help="output of `rocm-smi --showtopo`, one per host")],
    host: Annotated[str | None, typer.Option(help="host name (one file)")] = None,
    hosts: Annotated[str | None, typer.Option(help="host names, one per file, comma-separated")] = None,
    model: Annotated[
        str, typer.Option(help="GPU model for link defaults: MI300X, MI250, MI100, MI355X")
    ] = "MI300X",
    levels: Annotated[str | None, typer.Option(help="levels above the hosts, NAME:FANOUT bottom up")] = None,
    kind: Annotated[str | None, typer.Option(help="device kind (default: the model)")] = None,
    tier: TierOpt = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from `rocm-smi --showtopo`: XGMI/PCIe link types, hops and NUMA, per-model defaults."""
    _node_files_cmd(files, host, hosts, levels, kind, tier, out_file, "rocm-smi", model=model)


@app.command("ibnetdiscover", cls=Command)
@guard
def import_ibnetdiscover(
    file: Annotated[Path, typer.Argument(help="output of `ibnetdiscover`")],
    levels: Annotated[
        str | None, typer.Option(help="names for the switch levels bottom up (default leaf,spine,core)")
    ] = None,
    gpus_per_node: HostGpusOpt = 8,
    kind: Annotated[str | None, typer.Option(help="device kind")] = None,
    node_topo: NodeTopoOpt = None,
    rail_policy: Annotated[
        bool, typer.Option(help="add a rail policy when the fabric is rail-optimized")
    ] = True,
    tier: TierOpt = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from an InfiniBand fabric dump: switch tree, hosts by HCA description, rails by HCA."""
    fabric, _ = read_ibnetdiscover(file, level_names=levels.split(",") if levels else None)
    _fabric_cmd(fabric, node_topo, kind, tier, gpus_per_node, out_file, use_rails=rail_policy)


@app.command("topograph", cls=Command)
@guard
def import_topograph(
    file: Annotated[Path, typer.Argument(help="a topograph model (YAML) or request payload (JSON)")],
    levels: Annotated[
        str | None, typer.Option(help="names for the levels above the hosts, bottom up")
    ] = None,
    gpus_per_node: HostGpusOpt = 8,
    kind: Annotated[str | None, typer.Option(help="device kind")] = None,
    node_topo: NodeTopoOpt = None,
    tier: TierOpt = None,
    out_file: ClusterOutOpt = None,
) -> None:
    """A cluster file from an NVIDIA topograph model or payload: NVLink domains and the switch tree."""
    fabric = read_topograph(file, level_names=levels.split(",") if levels else None)
    _fabric_cmd(fabric, node_topo, kind, tier, gpus_per_node, out_file)
