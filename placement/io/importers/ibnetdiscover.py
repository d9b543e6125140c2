"""Import an `ibnetdiscover` InfiniBand fabric dump as a native cluster: switch tree, hosts, rails, NIC speeds.

Owns the dump's syntax and the fabric's reading; `placement.io.importers.fabric.nest_levels` makes the levels a tree.

Syntax (infiniband-diags ``ibnetdiscover(8)``; NVIDIA topograph's ``pkg/ib/ib.go`` parses the same lines):
blocks separated by blank lines, each ``Switch <ports> "S-<guid>" # "<description>" ...`` or ``Ca <ports>
"H-<guid>" # "<description>"`` followed by port lines ``[p](portguid) "S-<guid>"[q] # ... 4xNDR``.

Reading:

* An HCA belongs to a host by its node description ``"<host> <hca>"`` (``a08-p1-dgx-04-c01 mlx5_5``);
  descriptions of another shape (``MT4129 ConnectX7 Mellanox Technologies``, SHARP's ``Aggregation Node``)
  are not hosts and are counted in a warning.
* The HCA's rail is its index: ``mlx5_N`` -> N, ``HCA-N`` -> N-1 (1-based names; the dump pairs
  ``HCA-1, 2, 5, 6`` with ``mlx5_0, 1, 4, 5``), another trailing number -> that number. A host's NICs are
  its HCAs; their speed is the link's width x lane rate (``4xNDR`` = 400 Gb/s = 50 GB/s).
* A switch's level is its distance in switch hops from a switch with host HCAs (leaf 1, spine 2, core 3).
  The domain of a host at level L is the connected part of the fabric it reaches over switches of level <= L
  (hosts with one HCA per rail join the rail leaves of their scalable unit into one domain). Levels are named
  ``leaf``, ``spine``, ``core`` (``switch4``... above).
* Rail-optimized (on every leaf, at least 75% of the host HCAs have one rail index; the others are named): the cluster gets a ``rail_policy`` (cross-rail traffic
  takes a spine hop). A link between two switches of the same level (dragonfly, torus) makes the fabric not a
  tree: the tree above is still written, with a warning, and `fabric_graph` gives the networkx graph for
  `placement.io.importers.graph.topology_from_graph` (the pair-path model of non-tree fabrics).
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx

from placement.errors import InputError, Problem, Problems
from placement.io.importers.detect import refuse_other_format
from placement.io.importers.fabric import ImportedFabric, fabric_from_levels
from placement.io.text import read_text

__all__ = ["IbFabric", "fabric_graph", "parse_ibnetdiscover", "read_ibnetdiscover"]

_NODE_RE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR]-[0-9a-fA-F]+)"\s*(?:#\s*"([^"]*)")?')
_PORT_RE = re.compile(
    r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s*"([SHR]-[0-9a-fA-F]+)"\[(\d+)\](?:\([0-9a-fA-F]+\))?\s*(.*)$'
)
_RATE_RE = re.compile(r"\b(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\b")
_HOST_RE = re.compile(r"^(\S+)\s(\S+)$")  # "<host> <hca>", as topograph's reNodeName
_SWITCH_NAME_RE = re.compile(r"^[^;:]+;([^;:]+):[^;:]+$")  # "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1"
_LANE_GBPS = {
    "SDR": 2.5,
    "DDR": 5.0,
    "QDR": 10.0,
    "FDR10": 10.0,
    "FDR": 14.0625,
    "EDR": 25.0,
    "HDR": 50.0,
    "NDR": 100.0,
    "XDR": 200.0,
}
_LEVEL_NAMES = ("leaf", "spine", "core")
_RAIL_SHARE = 0.75  # a leaf serves one rail when at least this share of its host HCAs has that rail index


@dataclass
class _Node:
    kind: str
    guid: str
    desc: str
    line: int
    ports: dict[int, tuple[str, int, float | None]] = field(
        default_factory=dict
    )  # port -> (peer, peer port, GB/s)


@dataclass
class IbFabric:
    """The parsed dump: switches and HCAs by GUID, and the host / HCA name / rail of each mapped HCA."""

    nodes: dict[str, _Node]
    hca_host: dict[str, tuple[str, str, int | None]]  # HCA guid -> (host, hca name, rail)
    skipped: Counter[str]


def _switch_name(desc: str, guid: str) -> str:
    m = _SWITCH_NAME_RE.match(desc)
    if m:
        return m.group(1)
    return desc if desc and not any(c in desc for c in " ;:") else guid


def _natural(name: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (-1, p.lower()) for p in re.split(r"(\d+)", name) if p)


def _rail(hca: str) -> int | None:
    m = re.fullmatch(r"mlx\d+_(\d+)", hca)
    if m:
        return int(m.group(1))
    m = re.fullmatch(r"HCA-(\d+)", hca, re.I)
    if m:
        return max(int(m.group(1)) - 1, 0)
    m = re.search(r"(\d+)$", hca)
    return int(m.group(1)) if m else None


def _parse(text: str, source: str) -> IbFabric:
    ps = Problems(source)
    nodes: dict[str, _Node] = {}
    cur: _Node | None = None
    for no, line in enumerate(re.split(r"\r\n|\r|\n", text), 1):
        s = line.strip()
        if not s:
            cur = None
            continue
        if s.startswith("#") or re.match(r"^[a-z]+=", s):
            continue
        m = _NODE_RE.match(s)
        if m:
            guid = m.group(3)
            if guid in nodes:
                ps.add(f"line {no}", f"{guid} is described twice (also at line {nodes[guid].line})")
            cur = nodes[guid] = _Node(m.group(1), guid, m.group(4) or "", no)
            continue
        m = _PORT_RE.match(s)
        if m and cur is not None:
            rate = _RATE_RE.search(m.group(4))
            gbps = int(rate.group(1)) * _LANE_GBPS[rate.group(2)] / 8 if rate else None
            cur.ports[int(m.group(1))] = (m.group(2), int(m.group(3)), gbps)
            continue
        ps.add(
            f"line {no}",
            f"unexpected line {s[:50]!r}; expected a Switch/Ca header, a [port] line or a blank line",
        )
    ps.raise_if_any()
    hca_host: dict[str, tuple[str, str, int | None]] = {}
    skipped: Counter[str] = Counter()
    for n in nodes.values():
        if n.kind != "Ca":
            continue
        m = _HOST_RE.match(n.desc)
        if m is None:
            skipped[n.desc or "(no description)"] += 1
        else:
            hca_host[n.guid] = (m.group(1), m.group(2), _rail(m.group(2)))
    return IbFabric(nodes, hca_host, skipped)


def _links(fab: IbFabric) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for n in fab.nodes.values():
        for peer, _, _ in n.ports.values():
            if peer in fab.nodes and peer != n.guid:
                out.add((min(n.guid, peer), max(n.guid, peer)))
    return out


def fabric_graph(fab: IbFabric, *, gpus_per_host: int = 1) -> nx.Graph:
    """The fabric as a networkx graph for `topology_from_graph`: switches, host nodes (``device=True`` when
    `gpus_per_host` is 1, else ``host/gpuK`` device nodes on each host) and links with their bandwidth."""
    g: nx.Graph = nx.Graph()
    for a, b in _links(fab):
        ends = []
        for x in (a, b):
            ends.append(
                fab.hca_host[x][0] if x in fab.hca_host else x if fab.nodes[x].kind == "Switch" else None
            )
        if None in ends or ends[0] == ends[1]:
            continue
        bw = next((p[2] for p in fab.nodes[a].ports.values() if p[0] == b and p[2]), 50.0)
        g.add_edge(ends[0], ends[1], bandwidth_gbps=bw, latency_us=1.0)
    for host in {h for h, _, _ in fab.hca_host.values()}:
        if host not in g:
            continue
        if gpus_per_host == 1:
            g.nodes[host]["device"] = True
        else:
            for k in range(gpus_per_host):
                g.add_edge(f"{host}/gpu{k}", host, bandwidth_gbps=450.0, latency_us=0.0)
                g.nodes[f"{host}/gpu{k}"]["device"] = True
    return g


def parse_ibnetdiscover(
    text: str,
    source: str = "<ibnetdiscover>",
    *,
    level_names: Sequence[str] | None = None,
    name: str | None = None,
) -> tuple[ImportedFabric, IbFabric]:
    """Read an ibnetdiscover dump into an `ImportedFabric` (tree levels, hosts, NICs per host) and the parsed dump."""
    if not text.strip():
        raise InputError(source, [Problem("", "the file is empty; expected the output of `ibnetdiscover`")])
    refuse_other_format(text, source, "ibnetdiscover")
    fab = _parse(text, source)
    switches = [n for n in fab.nodes.values() if n.kind == "Switch"]
    cas = [n for n in fab.nodes.values() if n.kind == "Ca"]
    if not switches:
        shown = ", ".join(f'"{n.desc}"' for n in cas[:2])
        raise InputError(
            source,
            [
                Problem(
                    "",
                    f"the dump holds no switch ({len(cas)} HCA(s){': ' + shown if shown else ''}"
                    "); a fabric needs its switches: run ibnetdiscover on a host cabled "
                    "to the fabric",
                )
            ],
        )
    warnings: list[str] = []
    up = _host_uplinks(fab, len(cas), source, warnings)
    adj, level = _switch_levels(fab, switches, up, warnings)
    hosts = sorted({h for h, _, _ in fab.hca_host.values() if h in up.leaves}, key=_natural)
    height = max(level.values())
    candidates: list[tuple[str, str, Mapping[str, str]]] = []
    for lv in range(1, height + 1):
        col = _components(hosts, up.leaves, adj, level, lv, fab)
        label = _LEVEL_NAMES[lv - 1] if height <= len(_LEVEL_NAMES) else f"switch{lv}"
        candidates.append((label, "switch", col))
    out = fabric_from_levels(name or Path(source).stem, hosts, candidates, warnings, level_names, source)
    out.host_nics = {h: sorted(up.nics[h], key=lambda x: (x[0] is None, x[0] or 0)) for h in hosts}
    out.rail_optimized = _rail_optimized(fab, up, warnings)
    multi = Counter(h for h in up.leaves if len(up.nics[h]) != len({r for r, _ in up.nics[h]}))
    if multi:
        warnings.append(f"{len(multi)} host(s) list two HCAs with one rail index (e.g. {next(iter(multi))})")
    return out, fab


@dataclass
class _Uplinks:
    """Per host, the leaf switches its HCAs are cabled to and its NICs (rail, GB/s); per leaf, its HCAs by rail."""

    leaves: dict[str, set[str]] = field(default_factory=dict)
    nics: dict[str, list[tuple[int | None, float | None]]] = field(default_factory=dict)
    leaf_rails: dict[str, Counter[int | None]] = field(default_factory=dict)


def _host_uplinks(fab: IbFabric, cas: int, source: str, warnings: list[str]) -> _Uplinks:
    """Each host HCA's switch ports; InputError when no HCA names a host, warnings for the HCAs left out."""
    up = _Uplinks()
    unlinked = 0
    for guid, (host, _, rail) in fab.hca_host.items():
        ups = [
            (p, bw)
            for p, _, bw in fab.nodes[guid].ports.values()
            if p in fab.nodes and fab.nodes[p].kind == "Switch"
        ]
        if not ups:
            unlinked += 1
            continue
        up.nics.setdefault(host, []).append((rail, min((bw for _, bw in ups if bw), default=None)))
        for sw, _ in ups:
            up.leaves.setdefault(host, set()).add(sw)
            up.leaf_rails.setdefault(sw, Counter())[rail] += 1
    if not up.leaves:
        raise InputError(
            source,
            [
                Problem(
                    "",
                    f"no HCA names a host: {cas} HCA(s), none described as "
                    '"<host> <hca>" and cabled to a switch',
                )
            ],
        )
    if fab.skipped:
        top = ", ".join(f'"{d.strip()}" x{c}' for d, c in fab.skipped.most_common(3))
        warnings.append(
            f'{sum(fab.skipped.values())} HCA(s) whose description is not "<host> <hca>" are not hosts: {top}'
        )
    if unlinked:
        warnings.append(f"{unlinked} host HCA(s) are not cabled to a switch in this dump; skipped")
    return up


def _switch_levels(
    fab: IbFabric, switches: list[_Node], up: _Uplinks, warnings: list[str]
) -> tuple[dict[str, set[str]], dict[str, int]]:
    """The switch graph and each switch's level: BFS over switch-switch links from the leaves (level 1), with
    warnings for switches no host reaches and links inside a level (not a tree)."""
    adj: dict[str, set[str]] = {s.guid: set() for s in switches}
    for a, b in _links(fab):
        if a in adj and b in adj:
            adj[a].add(b)
            adj[b].add(a)
    level: dict[str, int] = {}
    queue: deque[str] = deque()
    for sw in up.leaf_rails:
        level[sw] = 1
        queue.append(sw)
    while queue:
        s = queue.popleft()
        for t in adj[s]:
            if t not in level:
                level[t] = level[s] + 1
                queue.append(t)
    lost = [s for s in adj if s not in level]
    if lost:
        warnings.append(f"{len(lost)} switch(es) reach no host and are left out")
    same = sorted({(a, b) for a in level for b in adj[a] if b in level and a < b and level[a] == level[b]})
    if same:
        a, b = same[0]
        warnings.append(
            f"not a tree: {len(same)} link(s) join switches of the same level (e.g. "
            f"{_switch_name(fab.nodes[a].desc, a)} - {_switch_name(fab.nodes[b].desc, b)}); the levels below "
            "group hosts by reach, and fabric_graph() gives the pair-path model (placement.io.importers.graph)"
        )
    return adj, level


def _rail_optimized(fab: IbFabric, up: _Uplinks, warnings: list[str]) -> bool:
    """Rail-optimized: every leaf serves one rail (its main rail holds at least `_RAIL_SHARE` of its HCAs) and
    some host reaches several leaves; a warning names the HCAs on a leaf of another rail."""
    leaf_rails = up.leaf_rails
    main_rail = {sw: c.most_common(1)[0] for sw, c in leaf_rails.items()}
    optimized = all(
        r is not None and k >= _RAIL_SHARE * sum(leaf_rails[sw].values()) for sw, (r, k) in main_rail.items()
    ) and any(len(v) > 1 for v in up.leaves.values())
    if optimized:
        off = {sw: c for sw, c in leaf_rails.items() if len(c) > 1}
        if off:
            sw, c = next(iter(sorted(off.items())))
            others = ", ".join(f"rail {r} x{k}" for r, k in c.items() if r != main_rail[sw][0])
            warnings.append(
                f"rail-optimized fabric, but {sum(sum(c.values()) - main_rail[w][1] for w, c in off.items())} HCA(s) "
                f"sit on a leaf of another rail (e.g. {_switch_name(fab.nodes[sw].desc, sw)} serves rail "
                f"{main_rail[sw][0]} and has {others})"
            )
    return optimized


def _components(
    hosts: Sequence[str],
    host_leaves: dict[str, set[str]],
    adj: dict[str, set[str]],
    level: dict[str, int],
    lv: int,
    fab: IbFabric,
) -> dict[str, str]:
    """Host -> name of its connected part over switches of level <= lv (named by its top switches)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    for h in hosts:
        for sw in host_leaves[h]:
            union("h:" + h, sw)
    for s, lvl in level.items():
        if lvl <= lv:
            for t in adj[s]:
                if level.get(t, lv + 1) <= lv:
                    union(s, t)
    members: dict[str, list[str]] = {}
    for s, lvl in level.items():
        if lvl <= lv:
            members.setdefault(find(s), []).append(s)
    names: dict[str, str] = {}
    for root, sws in members.items():
        best = max(level[s] for s in sws)
        tops = sorted(_switch_name(fab.nodes[s].desc, s) for s in sws if level[s] == best)
        names[root] = tops[0] if len(tops) == 1 else f"{tops[0]}+{len(tops) - 1}"
    return {h: names[find("h:" + h)] for h in hosts}


def read_ibnetdiscover(
    path: str | Path, *, level_names: Sequence[str] | None = None, name: str | None = None
) -> tuple[ImportedFabric, IbFabric]:
    """Read an ibnetdiscover dump file."""
    return parse_ibnetdiscover(read_text(path), str(path), level_names=level_names, name=name)
