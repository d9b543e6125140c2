"""Cluster files: levels and tiers, node types with matrices and rails, hosts (explicit or generated), device kinds
and NICs, read into a Topology (and the static part of a ClusterState)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from placement.errors import InputError, Problem, Problems
from placement.io.affinity import node_type_affinity
from placement.io.importers.nvidia_smi import read_nvidia_smi
from placement.io.native.document import (
    MAX_BANDWIDTH_GBPS,
    MAX_LATENCY_US,
    MAX_SLOWDOWN,
    MIN_BANDWIDTH_GBPS,
    _Reader,
    load_document,
    short,
)
from placement.io.native.state import state_from_dict
from placement.limits import current_limits, tick
from placement.model.devices import DeviceKind, HostSpec, NodeType
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, Level, RailPolicy, Tier
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["cluster_from_dict", "load_cluster"]

_KNOWN_CODES = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")


def _tier(r: _Reader, d: Mapping[str, Any], path: str, allowed_extra: Sequence[str] = ()) -> Tier:
    bw = r.num(d, "bandwidth_gbps", path, minimum=0, exclusive=True, required=True)
    lat = r.num(d, "latency_us", path, minimum=0, default=0.0)
    if bw is not None and not MIN_BANDWIDTH_GBPS <= bw <= MAX_BANDWIDTH_GBPS:
        r.ps.add(
            f"{path}.bandwidth_gbps",
            f"{bw:g} is outside [{MIN_BANDWIDTH_GBPS:g}, {MAX_BANDWIDTH_GBPS:g}] GB/s",
        )
        bw = None
    if lat is not None and lat > MAX_LATENCY_US:
        r.ps.add(f"{path}.latency_us", f"{lat:g} is above {MAX_LATENCY_US:g} us")
        lat = None
    return Tier(bw if bw is not None else 1.0, lat if lat is not None else 0.0)


def _matrix(r: _Reader, rows: Any, path: str, base_dir: Path | None) -> tuple[tuple[str, ...], ...] | None:
    out: list[tuple[str, ...]] = []
    lim = current_limits()
    row_list = r.lst(rows, path)
    lim.check("max_matrix_side", len(row_list), f"{path} (rows)")
    known: dict[str, bool] = {}  # a code seen once is not matched again
    for i, row in enumerate(row_list):
        tick(i, "reading a matrix")
        cells = row.split() if isinstance(row, str) else row if isinstance(row, list) else None
        if cells is None:
            r.ps.add(f"{path}[{i}]", f"must be a row of link codes, got {short(row)}")
            return None
        lim.check("max_matrix_side", len(cells), f"{path}[{i}] (columns)")
        for j, c in enumerate(cells):
            ok = known.get(c) if isinstance(c, str) else False
            if ok is None:
                ok = known[c] = bool(_KNOWN_CODES.match(c))
            if not ok:
                r.ps.add(
                    f"{path}[{i}][{j}]",
                    f"unknown link code {short(c)}; known: X, NV#, PIX, PXB, PHB, NODE, SYS, SOC",
                )
        out.append(tuple(str(c) for c in cells))
    return tuple(out) if out else None


def _node_type(r: _Reader, d: Mapping[str, Any], path: str, name: str, base_dir: Path | None) -> NodeType:
    r.keys(
        d,
        [
            "name",
            "devices",
            "kind",
            "matrix",
            "rails",
            "nvidia_smi",
            "nvidia_smi_table",
            "nics",
            "nic_gbps",
            "mesh_link_gbps",
            "cpu_affinity",
            "numa_affinity",
        ],
        path,
    )
    matrix = _matrix(r, d.get("matrix"), f"{path}.matrix", base_dir)
    rails_raw = d.get("rails")
    rails: tuple[int | None, ...] | None = None
    smi_aff: tuple[tuple[str | None, ...], tuple[int | None, ...]] | None = None
    if d.get("nvidia_smi") is not None:
        f = Path(str(d["nvidia_smi"]))
        if base_dir is not None and not f.is_absolute():
            f = base_dir / f
        try:
            topo = read_nvidia_smi(f, table=d.get("nvidia_smi_table"))
            matrix = tuple(tuple(row) for row in topo.matrix)
            rails = tuple(topo.rails)
            smi_aff = (topo.cpu_affinity, topo.numa_affinity)
        except InputError as e:
            for p in e.problems:
                r.ps.add(f"{path}.nvidia_smi ({e.source}) {p.path}".rstrip(), p.message)
        except OSError as e:
            r.ps.add(f"{path}.nvidia_smi", f"cannot read {str(f)!r}: {e.strerror}")
    if rails_raw is not None:
        rl = r.lst(rails_raw, f"{path}.rails")
        if all(x is None or (isinstance(x, int) and not isinstance(x, bool) and x >= 0) for x in rl):
            rails = tuple(rl)
        else:
            r.ps.add(f"{path}.rails", f"must be non-negative integers or null, got {short(rl)}")
    n = r.int_(d, "devices", path, minimum=1, default=None, maximum=current_limits().max_devices)
    if n is None:
        if matrix is not None:
            n = len(matrix)
        elif (
            "devices" not in d and d.get("nvidia_smi") is None
        ):  # an unreadable nvidia_smi file is reported above
            r.ps.add(f"{path}.devices", "is required (or give a matrix or an nvidia_smi file)")
            n = 1
        else:
            n = 1
    kind = r.str_(d, "kind", path, default="gpu") or "gpu"
    nics = r.int_(d, "nics", path, minimum=1)
    nic_gbps = _gbps(r, d, "nic_gbps", path)
    mesh = _gbps(r, d, "mesh_link_gbps", path)
    cpu, numa = node_type_affinity(r, d, path, n, smi_aff)
    return NodeType(name, n, kind, matrix, rails, nics, nic_gbps, mesh, cpu, numa)


def _gbps(r: _Reader, d: Mapping[str, Any], key: str, path: str) -> float | None:
    """An optional bandwidth in GB/s inside the physical sanity limits."""
    v = r.num(d, key, path, minimum=0, exclusive=True)
    if v is not None and not MIN_BANDWIDTH_GBPS <= v <= MAX_BANDWIDTH_GBPS:
        r.ps.add(f"{path}.{key}", f"{v:g} is outside [{MIN_BANDWIDTH_GBPS:g}, {MAX_BANDWIDTH_GBPS:g}] GB/s")
        return None
    return v


def _device_kinds(r: _Reader, v: Any) -> dict[str, DeviceKind]:
    """User-defined device kinds: ``[{name, tflops, memory_gb}]`` (peak dense BF16/FP16 TFLOP/s, GB)."""
    out: dict[str, DeviceKind] = {}
    for i, item in enumerate(r.lst(v, "device_kinds")):
        p = f"device_kinds[{i}]"
        kd = r.obj(item, p)
        r.keys(kd, ["name", "tflops", "memory_gb"], p)
        name = r.str_(kd, "name", p, required=True)
        tflops = r.num(kd, "tflops", p, minimum=0, exclusive=True, required=True, maximum=1e6)
        mem = r.num(kd, "memory_gb", p, minimum=0, exclusive=True, required=True, maximum=1e6)
        if name is not None and name in out:
            r.ps.add(f"{p}.name", f"device kind {short(name)} is defined twice")
        if name is not None and tflops is not None and mem is not None:
            out[name] = DeviceKind(name, tflops, mem)
    return out


def _host_budget(
    r: _Reader,
    gens: Sequence[Any],
    hosts: Sequence[Any],
    node_types: Mapping[str, NodeType],
    single: str | None,
) -> None:
    """LimitError before any host is built: hosts, devices and matrix cells of every generate entry and host."""
    lim = current_limits()
    n_hosts, n_devices, cells = len(hosts), 0, 0

    def size(entry: Mapping[str, Any]) -> tuple[int, int]:
        nt = node_types.get(str(entry.get("node_type"))) if entry.get("node_type") is not None else None
        if nt is not None:
            return nt.devices, len(nt.matrix) ** 2 if nt.matrix else 0
        dv = entry.get("devices")
        return (dv if isinstance(dv, int) and not isinstance(dv, bool) and dv > 0 else 1), 0

    for gi, g in enumerate(gens):
        if not isinstance(g, dict):
            continue
        nodes = g.get("nodes")
        if isinstance(nodes, float) and math.isfinite(nodes) and nodes.is_integer():
            nodes = int(nodes)
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            continue  # reported by the reader
        where = single or f"generate[{gi}]"
        lim.check("max_hosts", nodes, f"{where}.nodes")
        n_hosts += nodes
        per, c = size(g)
        n_devices += nodes * per
        cells += nodes * c
    for h in hosts:
        if isinstance(h, dict):
            per, c = size(h)
            n_devices += per
            cells += c
    lim.check("max_hosts", n_hosts, "the cluster's hosts")
    lim.check("max_devices", n_devices, "the cluster's devices")
    lim.check("max_matrix_cells", cells, "the cluster's intra-node matrix cells")


_CLUSTER_KEYS = (
    "name",
    "levels",
    "intra_node_tiers",
    "rail_policy",
    "node_types",
    "generate",
    "hosts",
    "fault_domains",
    "device_kinds",
    "description",
)


def cluster_from_dict(
    doc: Any, source: str = "<cluster>", base_dir: Path | None = None
) -> tuple[Topology, ClusterState | None]:
    """Build a Topology (and the static fault domains, as a state, if the file lists any)."""
    ps = Problems(source)
    r = _Reader(ps)
    if not r.kind(doc, "cluster"):
        ps.raise_if_any()
    d = r.obj(doc, "")
    r.keys(d, _CLUSTER_KEYS, "")
    ps.raise_if_any()
    name = r.str_(d, "name", "", default=Path(source).stem) or "cluster"
    levels = _levels(r, d)
    tiers = _intra_node_tiers(r, d)
    rail_policy = _rail_policy(r, d)
    kinds = _device_kinds(r, d.get("device_kinds"))
    node_types = _node_types(r, d, base_dir)
    gens = d.get("generate")
    gen_list = [gens] if isinstance(gens, dict) else r.lst(gens, "generate")
    _host_budget(
        r,
        gen_list,
        r.lst(d.get("hosts"), "hosts"),
        node_types,
        "generate" if isinstance(gens, dict) else None,
    )
    # every host was built: structural checks of the whole cluster are meaningful
    hosts, gen_src, complete = _generated_hosts(r, gen_list, isinstance(gens, dict), levels, node_types)
    hosts += _explicit_hosts(r, d, node_types)
    if gens is None and d.get("hosts") is None:
        ps.add("", "the cluster names no hosts: give `generate` (compact) and/or `hosts` (explicit)")
    try:
        topo = Topology.build(
            name,
            levels,
            hosts,
            intra_node_tiers=tiers,
            rail_policy=rail_policy,
            source=source,
            device_kinds=kinds,
        )
    except InputError as e:
        # structural problems (a host listed twice...) are reported with the reader's, all at once; Topology.build
        # numbers generated and explicit hosts together: name them as the file does
        if (complete and hosts) or not ps:
            ps.extend(_file_host_paths(e.problems, gen_src, hosts))
        ps.raise_if_any()
        raise
    ps.raise_if_any()
    fd = d.get("fault_domains")
    state = state_from_dict({"fault_domains": fd}, topo, source) if fd is not None else None
    return topo, state


def _levels(r: _Reader, d: Mapping[str, Any]) -> list[Level]:
    """The domain levels, bottom up, each with its tier."""
    levels: list[Level] = []
    for i, lv in enumerate(r.lst(d.get("levels"), "levels")):
        lvd = r.obj(lv, f"levels[{i}]")
        r.keys(
            lvd,
            ["name", "bandwidth_gbps", "latency_us", "oversubscription", "nvlink", "sharp"],
            f"levels[{i}]",
        )
        lname = r.str_(lvd, "name", f"levels[{i}]", required=True) or f"level{i}"
        over = r.num(
            lvd, "oversubscription", f"levels[{i}]", minimum=0, exclusive=True, default=1.0, maximum=1e3
        )
        levels.append(
            Level(
                lname,
                _tier(r, lvd, f"levels[{i}]"),
                over if over is not None else 1.0,
                nvlink=r.bool_(lvd, "nvlink", f"levels[{i}]"),
                sharp=r.bool_(lvd, "sharp", f"levels[{i}]"),
            )
        )
    if "levels" not in d:
        r.ps.add(
            "levels", "is required: the domain levels bottom up, e.g. [{name: node, ...}, {name: leaf, ...}]"
        )
    return levels


def _intra_node_tiers(r: _Reader, d: Mapping[str, Any]) -> dict[str, Tier]:
    """Overrides of the built-in tiers of the intra-node matrix codes."""
    tiers: dict[str, Tier] = {}
    for code, td in r.obj(d.get("intra_node_tiers"), "intra_node_tiers").items():
        if code not in DEFAULT_INTRA_NODE_TIERS and code != "SOC":
            r.ps.add(
                f"intra_node_tiers.{code}",
                f"unknown code; known: {sorted(DEFAULT_INTRA_NODE_TIERS)} (NV is per link)",
            )
            continue
        tiers[code] = _tier(r, r.obj(td, f"intra_node_tiers.{code}"), f"intra_node_tiers.{code}")
    return tiers


def _rail_policy(r: _Reader, d: Mapping[str, Any]) -> RailPolicy | None:
    if d.get("rail_policy") is None:
        return None
    rp = r.obj(d["rail_policy"], "rail_policy")
    r.keys(rp, ["extra_latency_us", "bandwidth_factor"], "rail_policy")
    return RailPolicy(
        r.num(rp, "extra_latency_us", "rail_policy", default=2.0, minimum=0, maximum=MAX_LATENCY_US) or 0.0,
        r.num(rp, "bandwidth_factor", "rail_policy", default=1.0, minimum=1 / MAX_SLOWDOWN, maximum=1.0)
        or 1.0,
    )


def _node_types(r: _Reader, d: Mapping[str, Any], base_dir: Path | None) -> dict[str, NodeType]:
    node_types: dict[str, NodeType] = {}
    for i, nt in enumerate(r.lst(d.get("node_types"), "node_types")):
        ntd = r.obj(nt, f"node_types[{i}]")
        ntn = r.str_(ntd, "name", f"node_types[{i}]", required=True) or f"type{i}"
        if ntn in node_types:
            r.ps.add(f"node_types[{i}].name", f"node type {short(ntn)} is defined twice")
        node_types[ntn] = _node_type(r, ntd, f"node_types[{i}]", ntn, base_dir)
    return node_types


def _host_type(r: _Reader, hd: Mapping[str, Any], path: str, node_types: Mapping[str, NodeType]) -> NodeType:
    """The node type a generate block or a host names, or the one its `devices` and `kind` make."""
    tname = hd.get("node_type")
    if tname is not None:
        if not isinstance(tname, str | int) or str(tname) not in node_types:
            r.ps.add(f"{path}.node_type", f"unknown node type {short(tname)}; defined: {sorted(node_types)}")
            return NodeType("?", 1)
        return node_types[str(tname)]
    n = r.int_(hd, "devices", path, minimum=1, default=None, maximum=current_limits().max_devices)
    if n is None:
        if "devices" not in hd:
            r.ps.add(f"{path}.devices", "is required (or a node_type)")
        n = 1
    return NodeType(f"{n}x", n, r.str_(hd, "kind", path, default="gpu") or "gpu")


def _generated_hosts(
    r: _Reader,
    gen_list: Sequence[Any],
    single: bool,
    levels: Sequence[Level],
    node_types: Mapping[str, NodeType],
) -> tuple[list[HostSpec], list[str], bool]:
    """The hosts of every generate block; the block of each (to name it in structural errors); whether every
    block was built (else the structural checks of the whole cluster would report what the blocks already do)."""
    ps = r.ps
    level_names = [lv.name for lv in levels]
    hosts: list[HostSpec] = []
    gen_src: list[str] = []
    complete = bool(levels)
    for gi, g in enumerate(gen_list):
        gp = "generate" if single else f"generate[{gi}]"
        entry_start = len(ps)
        gd = r.obj(g, gp)
        r.keys(gd, ["nodes", "node_type", "devices", "kind", "fanout", "prefix", "host_format"], gp)
        nodes = r.int_(gd, "nodes", gp, minimum=1, required=True) or 0
        nt = _host_type(r, gd, gp, node_types)
        fan = r.obj(gd.get("fanout"), f"{gp}.fanout")
        prefix = r.str_(gd, "prefix", gp, default="") or ""
        for k in fan:
            if k not in level_names[1:]:
                ps.add(f"{gp}.fanout.{k}", f"unknown level; the levels above the host are {level_names[1:]}")
        counts, fanouts = _fanouts(r, gp, fan, nodes, level_names)
        hfmt = gd.get("host_format")
        if hfmt:
            try:
                str(hfmt).format(1)
            except (KeyError, IndexError, ValueError) as e:
                ps.add(
                    f"{gp}.host_format",
                    f"{short(hfmt)} is not a format with one positional field like 'gpu-{{:03d}}': {e}",
                )
        if len(ps) > entry_start or not levels:
            complete = False
            continue
        width = max(2, len(str(nodes)))
        for h in range(nodes):
            tick(h, "building the hosts")
            hname = str(hfmt).format(h + 1) if hfmt else f"{prefix}{level_names[0]}{h + 1:0{width}d}"
            doms: dict[str, str] = {}
            idx = h
            for li, lname in enumerate(level_names[1:], start=1):
                idx //= fanouts[li - 1]
                w = max(2, len(str(counts[li])))
                doms[lname] = (
                    lname
                    if li == len(level_names) - 1 and counts[li] == 1
                    else f"{prefix}{lname}{idx + 1:0{w}d}"
                )
            hosts.append(HostSpec(hname, doms, nt))
            gen_src.append(gp)
    return hosts, gen_src, complete


def _fanouts(
    r: _Reader, gp: str, fan: Mapping[str, Any], nodes: int, level_names: Sequence[str]
) -> tuple[list[int], list[int]]:
    """The domain count at each level (the hosts first) and the fanout of each level above the host."""
    ps = r.ps
    counts = [nodes]
    fanouts: list[int] = []
    bad_fanout = False
    for li, lname in enumerate(level_names[1:], start=1):
        top = li == len(level_names) - 1
        f = r.int_(fan, lname, f"{gp}.fanout", minimum=1, default=None)
        if f is None:
            if fan.get(lname) is not None:  # reported by int_; no follow-up error about the counts
                f, bad_fanout = 1, True
            elif top:
                f = max(1, counts[-1])  # nodes may be invalid (0): reported above
            else:
                ps.add(
                    f"{gp}.fanout.{lname}",
                    f"is required: how many {level_names[li - 1]} domains one {lname} holds",
                )
                f = 1
        fanouts.append(f)
        counts.append(-(-counts[-1] // f))
    if len(level_names) > 1 and counts[-1] > 1 and not bad_fanout:
        ps.add(
            f"{gp}.fanout.{level_names[-1]}",
            f"gives {counts[-1]} {level_names[-1]} domains; the top level must be one domain: raise it to >= {counts[-2]} or add a level above",
        )
    return counts, fanouts


def _explicit_hosts(r: _Reader, d: Mapping[str, Any], node_types: Mapping[str, NodeType]) -> list[HostSpec]:
    hosts: list[HostSpec] = []
    for hi, h in enumerate(r.lst(d.get("hosts"), "hosts")):
        tick(hi, "reading the hosts")
        hp = f"hosts[{hi}]"
        hd = r.obj(h, hp)
        r.keys(hd, ["name", "domains", "node_type", "devices", "kind"], hp)
        hname = r.str_(hd, "name", hp, required=True) or f"?{hi}"
        doms = {str(k): str(v) for k, v in r.obj(hd.get("domains"), f"{hp}.domains").items()}
        hosts.append(HostSpec(hname, doms, _host_type(r, hd, hp, node_types)))
    return hosts


def _file_host_paths(
    problems: Sequence[Problem], gen_src: Sequence[str], hosts: Sequence[HostSpec]
) -> list[Problem]:
    """Rewrite ``hosts[i]`` of Topology.build (generated hosts first) into the file's own references."""
    if not gen_src:
        return list(problems)

    def ref(m: re.Match[str]) -> str:
        i = int(m.group(1))
        return f"hosts[{i - len(gen_src)}]" if i >= len(gen_src) else f"{gen_src[i]} (host {hosts[i].name!r})"

    return [
        Problem(re.sub(r"\bhosts\[(\d+)\]", ref, p.path), re.sub(r"\bhosts\[(\d+)\]", ref, p.message))
        for p in problems
    ]


def load_cluster(path: str | Path) -> tuple[Topology, ClusterState | None]:
    p = Path(path)
    return cluster_from_dict(load_document(p), str(path), p.parent)
