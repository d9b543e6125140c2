"""`placement import nccl-xml | rocm-smi | ibnetdiscover | topograph`: a cluster file from per-host node files or a
fabric dump, the same native cluster YAML as `import nvidia-smi`/`slurm`/`k8s`, validated before writing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any

import typer

from placement.cli.commands.import_common import cluster_yaml
from placement.cli.errors import err, escape, fail, guard
from placement.cli.help import Command, command_app
from placement.cli.inputs import write_output
from placement.cli.options import ClusterOutOpt, HostGpusOpt, NodeTopoOpt, TierOpt
from placement.io.importers.defaults import apply_tier_specs
from placement.io.importers.detect import refuse_other_format, sniff
from placement.io.importers.ibnetdiscover import read_ibnetdiscover
from placement.io.importers.nccl_xml import NodeTopology, merge_warnings, parse_nccl_xml
from placement.io.importers.nics import nic_warnings
from placement.io.importers.nvidia_smi import parse_nvidia_smi
from placement.io.importers.rocm_smi import parse_rocm_smi
from placement.io.importers.topograph import read_topograph
from placement.io.native import cluster_from_dict
from placement.io.text import read_text
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, Tier, intra_node_tier

__all__ = ["app", "build_cluster", "read_node_file"]

app = command_app()

# Defaults when a source states no bandwidth (GB/s per direction, latency us): the host level of an H100-class
# node; an NVLink domain (NVL72 / accelerator block) at the same per-GPU NVLink rate; then the switch levels of a
# 400G NDR fat-tree, each above the leaf 2:1 tapered (the values `import slurm` uses).
NODE_TIER = (450.0, 2.0)
ACCEL_TIER = (450.0, 3.0)
SWITCH_TIERS = [(50.0, 5.0), (25.0, 7.0), (12.5, 10.0), (6.25, 15.0)]
MAX_WARNINGS = 20


def _say(warnings: Sequence[str]) -> None:
    for w in warnings[:MAX_WARNINGS]:
        err.print(f"[yellow]warning:[/] {escape(w)}", soft_wrap=True)
    if len(warnings) > MAX_WARNINGS:
        err.print(
            f"[yellow]warning:[/] ... and {len(warnings) - MAX_WARNINGS} more warning(s)", soft_wrap=True
        )


def read_node_file(
    path: Path, *, model: str = "MI300X", nvlink: int | None = None, xgmi_gbps: float | None = None
) -> NodeTopology:
    """One host's topology from nvidia-smi, rocm-smi or NCCL XML output, chosen by content."""
    text = read_text(path)
    kind = sniff(text)
    if kind == "rocm-smi":
        return parse_rocm_smi(text, str(path), model=model)
    if kind in ("nccl-xml", "nccl-graph"):
        return parse_nccl_xml(text, str(path), nvlink=nvlink, xgmi_gbps=xgmi_gbps)
    nt = parse_nvidia_smi(text, str(path))
    return NodeTopology(
        nt.gpus,
        "gpu",
        nt.matrix,
        nt.rails,
        nics=nt.nics,
        numa=nt.numa_affinity,
        cpu_affinity=nt.cpu_affinity,
        warnings=nt.warnings,
    )


def _node_tier(nt: NodeTopology | None, nv_gbps: float | None) -> tuple[tuple[float, float], str]:
    """The node level's default tier, and where it comes from (for the tiers note)."""
    if nt is None:
        return NODE_TIER, "no node file: an H100-class host"
    if nt.mesh_link_gbps is not None:
        links = max(len(nt.gpus) - 1, 1)
        return (links * nt.mesh_link_gbps, 1.0), f"xGMI mesh: {links} links of {nt.mesh_link_gbps:g} GB/s"
    if nt.matrix is not None and len(nt.gpus) > 1:
        table = dict(DEFAULT_INTRA_NODE_TIERS) | ({"NV": Tier(nv_gbps, 1.0)} if nv_gbps else {})
        best = max(
            (c for r in nt.matrix for c in r if c != "X"),
            key=lambda c: intra_node_tier(c, table).bandwidth_gbps,
        )
        why = f"the node matrix's best GPU pair, {best}"
        if not best.startswith("NV"):
            why += ": PCIe only, the node file lists no NVLink"
        return (intra_node_tier(best, table).bandwidth_gbps, NODE_TIER[1]), why
    return NODE_TIER, "a one-GPU node: an H100-class host"


def _tiers(
    names: list[str],
    roles: list[str],
    specs: list[str],
    node: tuple[float, float],
    node_source: str,
    leaf_gbps: float | None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The levels with their tiers, and a description of each tier left at its default (for the note)."""
    out: dict[str, tuple[float, float]] = {}
    why: dict[str, str] = {}
    k = 0
    for name, role in zip(names, roles, strict=True):
        if role == "node":
            out[name] = node
            why[name] = node_source
        elif role == "accel":
            out[name] = ACCEL_TIER
            why[name] = "NVLink domain default"
        else:
            bw, lat = SWITCH_TIERS[min(k, len(SWITCH_TIERS) - 1)]
            out[name] = (leaf_gbps, lat) if k == 0 and leaf_gbps else (bw, lat)
            why[name] = (
                "leaf: the fabric's link speed"
                if k == 0 and leaf_gbps
                else "leaf: a 400G link"
                if k == 0
                else "a 400G fat-tree tapered 2:1 per level"
            )
            k += 1
    for name in apply_tier_specs(specs, out):
        why.pop(name, None)
    defaults = [f"{n} {out[n][0]:g} GB/s ({w})" for n, w in why.items()]
    levels = [
        # an NVLink domain (role accel) is marked: NVLS runs across its trays
        {
            "name": n,
            "bandwidth_gbps": out[n][0],
            "latency_us": out[n][1],
            **({"nvlink": True} if r == "accel" else {}),
        }
        for n, r in zip(names, roles, strict=True)
    ]
    return levels, defaults


def _hca_rails(devices: int, rails: list[int]) -> list[int | None]:
    """Device k is on rail number k * len(rails) // devices of the fabric's rails (HCA indices in order): a host
    whose HCA of a rail is missing from the dump keeps the rail its GPUs are cabled for."""
    if not rails:
        return [None] * devices
    return [rails[k * len(rails) // devices] for k in range(devices)]


def build_cluster(
    name: str,
    levels: list[str],
    roles: list[str],
    hosts: list[dict[str, Any]],
    node_types: dict[str, NodeTopology],
    *,
    kind: str | None,
    tiers: list[str],
    host_nics: dict[str, list[tuple[int | None, float | None]]] | None = None,
    gpus_per_node: int = 8,
    rail_optimized: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """The native cluster dict: levels with tiers, node types (from node files, or from the fabric's HCAs),
    hosts referring to them; validated with `cluster_from_dict`. Returns it and the notes to print."""
    notes: list[str] = []
    doc: dict[str, Any] = {"name": name}
    nv = {nt.nv_link_gbps for nt in node_types.values() if nt.nv_link_gbps}
    nv_gbps = max(nv) if nv else None
    if len(nv) > 1:
        notes.append(
            f"node files state NV links of {sorted(nv)} GB/s; the cluster has one NV tier: {nv_gbps:g}"
        )
    first = next(iter(node_types.values()), None)
    leaf = None
    if host_nics:
        speeds = [g for v in host_nics.values() for _, g in v if g]
        leaf = min(speeds) if speeds else None
    level_list, defaults = _tiers(levels, roles, tiers, *_node_tier(first, nv_gbps), leaf)
    doc["levels"] = level_list
    if nv_gbps:
        doc["intra_node_tiers"] = {"NV": {"bandwidth_gbps": nv_gbps, "latency_us": 1.0}}
        notes.append(f"NV# codes stand for # links of {nv_gbps:g} GB/s (intra_node_tiers.NV)")
    if rail_optimized:
        doc["rail_policy"] = {"extra_latency_us": 2.0, "bandwidth_factor": 1.0}
    all_rails = sorted({r for v in (host_nics or {}).values() for r, _ in v if r is not None})
    types: list[dict[str, Any]] = []
    out_hosts: list[dict[str, Any]] = []
    by_sig: dict[tuple[Any, ...], str] = {}
    for h in hosts:
        hname = h["name"]
        entry: dict[str, Any] = {"name": hname}
        if h.get("domains"):
            entry["domains"] = h["domains"]
        nics = (host_nics or {}).get(hname, [])
        nt = node_types.get(h.get("node_file", ""))
        if nt is not None:
            t = nt.node_type(h.get("node_file", "node"), kind)
            if "nic_gbps" not in t and nics and nics[0][1]:
                t["nic_gbps"] = min(g for _, g in nics if g)
            if "nics" not in t and nics:
                t["nics"] = len(nics)
        else:
            t = {"name": "", "devices": gpus_per_node, "kind": kind or "gpu"}
            if nics:
                t["nics"] = len(nics)
                speeds = [g for _, g in nics if g]
                if speeds:
                    t["nic_gbps"] = min(speeds)
                rails = _hca_rails(gpus_per_node, all_rails)
                if any(r is not None for r in rails):
                    t["rails"] = rails
        sig = tuple(sorted((k, str(v)) for k, v in t.items() if k != "name"))
        if sig not in by_sig:
            t["name"] = t["name"] or f"type{len(types)}"
            if any(x["name"] == t["name"] for x in types):
                t["name"] = f"{t['name']}-{len(types)}"
            by_sig[sig] = t["name"]
            types.append(t)
        entry["node_type"] = by_sig[sig]
        out_hosts.append(entry)
    doc["node_types"] = types
    doc["hosts"] = out_hosts
    cluster_from_dict(doc, "<imported>")
    if defaults:
        notes.append(f"link tiers are defaults: {'; '.join(defaults)}; set them with --tier LEVEL=GBPS:US")
    return doc, notes


def _write(doc: dict[str, Any], warnings: list[str], notes: list[str], out_file: Path | None) -> None:
    _say(warnings)
    for n in notes:
        err.print(f"[yellow]note:[/] {escape(n)}", soft_wrap=True)
    write_output(cluster_yaml(doc), out_file)


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
        fans.append(int(m.group(2)) if m.group(2) else 1 << 30)
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
    tops: dict[str, NodeTopology] = {}
    key_of: dict[str, str] = {}
    per_host: list[tuple[str, NodeTopology]] = []
    for f, h in zip(files, names, strict=True):
        nt = read_node_file(f, **read)
        per_host.append((h, nt))
        same = next((k for k, v in tops.items() if v == nt or v.node_type("") == nt.node_type("")), None)
        if same is None:
            same = f.stem if f.stem not in tops else f"{f.stem}-{len(tops)}"
            tops[same] = nt
        key_of[h] = same
    lv_names, fans = _level_spec(levels, len(files))
    host_docs: list[dict[str, Any]] = []
    for i, h in enumerate(names):
        doms: dict[str, str] = {}
        idx = i
        for li, (ln, fan) in enumerate(zip(lv_names, fans, strict=True)):
            idx //= fan
            top = li == len(lv_names) - 1
            doms[ln] = ln if top and fan >= 1 << 30 else f"{ln}{idx + 1}"
        host_docs.append({"name": h, "domains": doms, "node_file": key_of[h]})
    tops_top = {d["domains"][lv_names[-1]] for d in host_docs} if lv_names else set()
    if len(tops_top) > 1:
        fail(
            f"--levels {escape(levels or '')!r}: the top level {lv_names[-1]!r} has {len(tops_top)} domains; end with "
            "a level without fan-out (it holds everything), e.g. rack:4,cluster",
            2,
        )
    name = names[0] if len(names) == 1 else Path(files[0]).parent.name or "cluster"
    doc, notes = build_cluster(
        name,
        ["node", *lv_names],
        ["node", *(["switch"] * len(lv_names))],
        host_docs,
        tops,
        kind=kind,
        tiers=tier or [],
    )
    _write(doc, merge_warnings(per_host), notes, out_file)


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
    fabric: Any,
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
    names = [lv["name"] for lv in fabric.doc["levels"]]
    node_types: dict[str, NodeTopology] = {}
    warnings = list(fabric.warnings)
    specs = _node_specs(node_topo or [])
    keys: list[tuple[str, str]] = []
    for pattern, path in specs:
        nt = read_node_file(path)
        key = path.stem if path.stem not in node_types else f"{path.stem}-{len(node_types)}"
        node_types[key] = nt
        keys.append((pattern, key))
        warnings.extend(f"{path}: {w}" for w in nt.warnings)
    hosts: list[dict[str, Any]] = []
    used: set[str] = set()
    for h in fabric.doc["hosts"]:
        key = next((k for pattern, k in keys if fnmatchcase(h["name"], pattern)), "")
        used.add(key)
        hosts.append({"name": h["name"], "domains": h["domains"], "node_file": key})
    unused = [f"{p}={k}" for p, k in keys if k not in used]
    if unused:
        warnings.append(f"--node-topo {', '.join(unused)} matched no host")
    doc, notes = build_cluster(
        fabric.doc["name"],
        names,
        fabric.roles,
        hosts,
        node_types,
        kind=kind,
        tiers=tier or [],
        host_nics=fabric.host_nics,
        gpus_per_node=gpus_per_node,
        rail_optimized=fabric.rail_optimized and use_rails,
    )
    _write(doc, warnings + nic_warnings(doc, "the fabric file"), notes, out_file)


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
