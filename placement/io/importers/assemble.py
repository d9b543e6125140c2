"""A native cluster document assembled from what the importers read: per-host node files (nvidia-smi, rocm-smi,
NCCL XML) and a fabric dump (`ImportedFabric`), with default link tiers, validated before it is returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from placement.io.importers.defaults import apply_tier_specs
from placement.io.importers.detect import sniff
from placement.io.importers.fabric import ImportedFabric
from placement.io.importers.nccl_xml import NodeTopology, merge_warnings, parse_nccl_xml
from placement.io.importers.nics import nic_warnings
from placement.io.importers.nvidia_smi import parse_nvidia_smi
from placement.io.importers.rocm_smi import parse_rocm_smi
from placement.io.native import cluster_from_dict
from placement.io.text import read_text
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, Tier, intra_node_tier

__all__ = [
    "TOP_FANOUT",
    "AssembledCluster",
    "NodeFiles",
    "build_cluster",
    "cluster_from_fabric",
    "cluster_from_node_files",
    "host_domains",
    "read_node_file",
    "read_node_files",
]

# Defaults when a source states no bandwidth (GB/s per direction, latency us): the host level of an H100-class
# node; an NVLink domain (NVL72 / accelerator block) at the same per-GPU NVLink rate; then the switch levels of a
# 400G NDR fat-tree, each above the leaf 2:1 tapered (the values `import slurm` uses).
NODE_TIER = (450.0, 2.0)
ACCEL_TIER = (450.0, 3.0)
SWITCH_TIERS = [(50.0, 5.0), (25.0, 7.0), (12.5, 10.0), (6.25, 15.0)]


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
    over: dict[str, float] = {}
    for name in apply_tier_specs(specs, out, over):
        why.pop(name, None)
    defaults = [f"{n} {out[n][0]:g} GB/s ({w})" for n, w in why.items()]
    levels = [
        # an NVLink domain (role accel) is marked: NVLS runs across its trays
        {
            "name": n,
            "bandwidth_gbps": out[n][0],
            "latency_us": out[n][1],
            **({"oversubscription": over[n]} if n in over else {}),
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
        notes.append(
            f"link tiers are defaults: {'; '.join(defaults)}; set them with --tier LEVEL=GBPS:US[:OVERSUBSCRIPTION]"
        )
    return doc, notes


@dataclass
class AssembledCluster:
    """The native cluster dict, and the warnings (about the inputs) and notes (about defaults) to print."""

    doc: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class NodeFiles:
    """Per-host node files read: the distinct node topologies by key, each host's key, and each host's topology
    in order (for the warnings)."""

    topologies: dict[str, NodeTopology]
    key_of: dict[str, str]
    per_host: list[tuple[str, NodeTopology]]


def read_node_files(files: Sequence[Path], hosts: Sequence[str], **read: Any) -> NodeFiles:
    """Read one node file per host (`read_node_file`); hosts whose files describe the same node type share a key
    (the first file's stem)."""
    tops: dict[str, NodeTopology] = {}
    key_of: dict[str, str] = {}
    per_host: list[tuple[str, NodeTopology]] = []
    for f, h in zip(files, hosts, strict=True):
        nt = read_node_file(f, **read)
        per_host.append((h, nt))
        same = next((k for k, v in tops.items() if v == nt or v.node_type("") == nt.node_type("")), None)
        if same is None:
            same = f.stem if f.stem not in tops else f"{f.stem}-{len(tops)}"
            tops[same] = nt
        key_of[h] = same
    return NodeFiles(tops, key_of, per_host)


TOP_FANOUT = 1 << 30
"""The fan-out of a top level given without one: it holds every domain below."""


def host_domains(hosts: Sequence[str], levels: Sequence[str], fans: Sequence[int]) -> list[dict[str, str]]:
    """Each host's domain per level, hosts in order filling the levels by fan-out bottom up (``rack1``,
    ``rack2``...; a top level of fan-out `TOP_FANOUT` is one domain named after the level)."""
    out: list[dict[str, str]] = []
    for i in range(len(hosts)):
        doms: dict[str, str] = {}
        idx = i
        for li, (ln, fan) in enumerate(zip(levels, fans, strict=True)):
            idx //= fan
            top = li == len(levels) - 1
            doms[ln] = ln if top and fan >= TOP_FANOUT else f"{ln}{idx + 1}"
        out.append(doms)
    return out


def cluster_from_node_files(
    name: str,
    nodes: NodeFiles,
    levels: Sequence[str],
    domains: Sequence[dict[str, str]],
    *,
    kind: str | None,
    tiers: list[str],
) -> AssembledCluster:
    """A cluster of the hosts of `nodes` (in order) in `domains` (one per host, `host_domains`), switch levels
    `levels` above the hosts."""
    host_docs = [
        {"name": h, "domains": doms, "node_file": nodes.key_of[h]}
        for (h, _), doms in zip(nodes.per_host, domains, strict=True)
    ]
    doc, notes = build_cluster(
        name,
        ["node", *levels],
        ["node", *(["switch"] * len(levels))],
        host_docs,
        nodes.topologies,
        kind=kind,
        tiers=tiers,
    )
    return AssembledCluster(doc, merge_warnings(nodes.per_host), notes)


def cluster_from_fabric(
    fabric: ImportedFabric,
    node_files: Sequence[tuple[str, Path]],
    *,
    kind: str | None,
    tiers: list[str],
    gpus_per_node: int,
    use_rails: bool = True,
) -> AssembledCluster:
    """A cluster of a fabric dump's hosts and levels; `node_files` are (host glob, node file) in order, the first
    match wins; hosts matching none get `gpus_per_node` devices and rails from their HCAs."""
    names = [lv["name"] for lv in fabric.doc["levels"]]
    node_types: dict[str, NodeTopology] = {}
    warnings = list(fabric.warnings)
    keys: list[tuple[str, str]] = []
    for pattern, path in node_files:
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
        tiers=tiers,
        host_nics=fabric.host_nics,
        gpus_per_node=gpus_per_node,
        rail_optimized=fabric.rail_optimized and use_rails,
    )
    return AssembledCluster(doc, warnings + nic_warnings(doc, "the fabric file"), notes)
