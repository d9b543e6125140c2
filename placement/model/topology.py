"""The cluster: devices in a tree of named domain levels, link tiers per level, intra-node pair matrices, rails.

A `Topology` is immutable and built once (checked by `placement.model.topology_checks`) from the parts in
`placement.model.links` (tiers, levels, intra-node codes, rails) and `placement.model.devices` (device kinds, node
types, hosts); per-request facts (occupancy, failures) live in `placement.model.state`.

Levels are bottom up. Level 0 is the host (``node``); the top level is a single domain. The tier of level ``l``
is the path two devices use when the lowest domain they share is at level ``l``. Two devices on one host use
the host's intra-node matrix (``NV18``, ``PIX``, ``SYS``...) when the host has one, else the level-0 tier.

>>> t = Topology.build("demo", [Level("node", Tier(450, 2)), Level("leaf", Tier(50, 5))],
...                    [HostSpec("h1", {"leaf": "l1"}, NodeType("dgx", 8)),
...                     HostSpec("h2", {"leaf": "l1"}, NodeType("dgx", 8))])
>>> t.num_devices, t.devices[9].id, t.lca_level(0, 9)
(16, 'h2/gpu1', 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from placement.errors import Problems
from placement.model.devices import Device, DeviceKind, HostSpec, NodeType
from placement.model.links import DEFAULT_INTRA_NODE_TIERS, Level, RailPolicy, Tier, intra_node_tier
from placement.model.topology_checks import check_levels, check_node_types, check_pair_paths, resolve_domains

__all__ = ["Topology"]


@dataclass(frozen=True, eq=False)
class Topology:
    """Immutable cluster structure. Build with `Topology.build`; see the module docstring for the semantics."""

    name: str
    levels: tuple[Level, ...]
    devices: tuple[Device, ...]
    host_names: tuple[str, ...]
    host_types: tuple[NodeType, ...]
    # domain_names[l][k]: name of domain k at level l (level 0: host names); parent[l][k]: its parent at l+1
    domain_names: tuple[tuple[str, ...], ...]
    parent: tuple[tuple[int, ...], ...]
    intra_node_tiers: Mapping[str, Tier] = field(default_factory=lambda: dict(DEFAULT_INTRA_NODE_TIERS))
    rail_policy: RailPolicy | None = None
    # A non-tree device graph (rail-optimized fabric, torus, a distance matrix): when set, pair_paths[a][b] is
    # the tier from device a to device b and overrides levels and matrices for every pair (may be asymmetric).
    pair_paths: tuple[tuple[Tier, ...], ...] | None = None
    # User-defined device kinds (peak TFLOP/s, memory) from the cluster file; built-in kinds: placement.model.devices
    device_kinds: Mapping[str, DeviceKind] = field(default_factory=dict)

    # ---- construction -------------------------------------------------------------------------------------

    @staticmethod
    def build(
        name: str,
        levels: Sequence[Level],
        hosts: Sequence[HostSpec],
        *,
        intra_node_tiers: Mapping[str, Tier] | None = None,
        rail_policy: RailPolicy | None = None,
        source: str = "<cluster>",
        device_kinds: Mapping[str, DeviceKind] | None = None,
    ) -> Topology:
        """Build from levels and hosts; all structural problems are raised together as `InputError`."""
        ps = Problems(source)
        check_levels(ps, levels)
        dom_index, dom_parent = resolve_domains(ps, levels, hosts)
        check_node_types(ps, hosts, intra_node_tiers)
        ps.raise_if_any()

        devices: list[Device] = []
        for hi, h in enumerate(hosts):
            nt = h.node_type
            for k in range(nt.devices):
                rail = nt.rails[k] if nt.rails is not None else None
                devices.append(Device(len(devices), f"{h.name}/gpu{k}", h.name, hi, k, nt.kind, rail))
        names = tuple(tuple(sorted(d, key=d.__getitem__)) for d in dom_index)
        parents = tuple(
            tuple(dom_parent[li][k] for k in range(len(dom_index[li]))) for li in range(len(levels) - 1)
        )
        return Topology(
            name=name,
            levels=tuple(levels),
            devices=tuple(devices),
            host_names=tuple(h.name for h in hosts),
            host_types=tuple(h.node_type for h in hosts),
            domain_names=names,
            parent=parents,
            intra_node_tiers=dict(DEFAULT_INTRA_NODE_TIERS) | dict(intra_node_tiers or {}),
            rail_policy=rail_policy,
            device_kinds=dict(device_kinds or {}),
        )

    # ---- structure ----------------------------------------------------------------------------------------

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def level_names(self) -> tuple[str, ...]:
        return tuple(lv.name for lv in self.levels)

    def level_index(self, name: str) -> int:
        """Index of a level by name; raises KeyError naming the known levels."""
        for i, lv in enumerate(self.levels):
            if lv.name == name:
                return i
        raise KeyError(f"unknown level {name!r}; levels are {list(self.level_names)}")

    @cached_property
    def _device_domains(self) -> tuple[tuple[int, ...], ...]:
        """dom[l][device] = index of the device's domain at level l."""
        out: list[tuple[int, ...]] = []
        cur = [d.host_index for d in self.devices]
        out.append(tuple(cur))
        for li in range(len(self.levels) - 1):
            par = self.parent[li]
            cur = [par[c] for c in cur]
            out.append(tuple(cur))
        return tuple(out)

    def domain_of(self, device: int, level: int) -> int:
        """Index (within its level) of the domain holding `device` at `level`."""
        return self._device_domains[level][device]

    def domain_column(self, level: int) -> tuple[int, ...]:
        """Domain index at `level` of every device, in device order."""
        return self._device_domains[level]

    @cached_property
    def _device_by_id(self) -> dict[str, int]:
        return {d.id: d.index for d in self.devices}

    def device_index(self, device_id: str) -> int | None:
        return self._device_by_id.get(device_id)

    @cached_property
    def devices_in_domain(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """devices_in_domain[l][k]: device indices under domain k of level l, in device order."""
        out = []
        for li in range(len(self.levels)):
            buckets: list[list[int]] = [[] for _ in self.domain_names[li]]
            for d, k in enumerate(self._device_domains[li]):
                buckets[k].append(d)
            out.append(tuple(tuple(b) for b in buckets))
        return tuple(out)

    @cached_property
    def children(self) -> tuple[tuple[tuple[int, ...], ...], ...]:
        """children[l][k]: indices (at level l-1) of the child domains of domain k at level l; level 0: empty."""
        out: list[tuple[tuple[int, ...], ...]] = [tuple(() for _ in self.domain_names[0])]
        for li in range(1, len(self.levels)):
            buckets: list[list[int]] = [[] for _ in self.domain_names[li]]
            for c, p in enumerate(self.parent[li - 1]):
                buckets[p].append(c)
            out.append(tuple(tuple(b) for b in buckets))
        return tuple(out)

    @cached_property
    def _domain_lookup(self) -> dict[str, list[tuple[int, int]]]:
        out: dict[str, list[tuple[int, int]]] = {}
        for li, names in enumerate(self.domain_names):
            for k, n in enumerate(names):
                out.setdefault(n, []).append((li, k))
        return out

    def resolve(self, selector: str) -> tuple[int, ...]:
        """Devices named by a selector: a device id (``h1/gpu3``), a host, a domain, or ``level:domain``.

        Raises KeyError with a readable message for an unknown or ambiguous name.
        """
        if selector in self._device_by_id:
            return (self._device_by_id[selector],)
        if ":" in selector:
            lname, dname = selector.split(":", 1)
            li = self.level_index(lname)
            for k, n in enumerate(self.domain_names[li]):
                if n == dname:
                    return self.devices_in_domain[li][k]
            raise KeyError(f"no {lname} named {dname!r}")
        hits = self._domain_lookup.get(selector, [])
        if not hits:
            raise KeyError(f"unknown device, host or domain {selector!r}")
        if len(hits) > 1:
            lv = ", ".join(f"{self.levels[li].name}:{selector}" for li, _ in hits)
            raise KeyError(f"{selector!r} names domains at several levels; write one of {lv}")
        li, k = hits[0]
        return self.devices_in_domain[li][k]

    # ---- distances ----------------------------------------------------------------------------------------

    def lca_level(self, a: int, b: int) -> int:
        """Level of the lowest domain shared by devices a and b (0: same host)."""
        dom = self._device_domains
        for li in range(len(self.levels)):
            if dom[li][a] == dom[li][b]:
                return li
        return len(self.levels) - 1

    def group_lca_level(self, devices: Iterable[int]) -> int:
        """Level of the lowest domain holding every device of the set."""
        devs = list(devices)
        if len(devs) <= 1:
            return 0
        dom = self._device_domains
        for li in range(len(self.levels)):
            col = dom[li]
            first = col[devs[0]]
            if all(col[d] == first for d in devs):
                return li
        return len(self.levels) - 1

    def pair_code(self, a: int, b: int) -> str | None:
        """The intra-node matrix code between two devices on one host, if that host has a matrix."""
        da, db = self.devices[a], self.devices[b]
        if da.host_index != db.host_index:
            return None
        m = self.host_types[da.host_index].matrix
        return None if m is None else m[da.local_index][db.local_index]

    def pair_tier(self, a: int, b: int) -> tuple[Tier, str]:
        """Tier between two devices (before degradation and rails) and its name for breakdowns."""
        if self.pair_paths is not None:
            return self.pair_paths[a][b], "graph"
        code = self.pair_code(a, b)
        if code is not None:
            return intra_node_tier(code, self.intra_node_tiers), f"{self.levels[0].name}:{code}"
        li = self.lca_level(a, b)
        return self.levels[li].tier, self.levels[li].name

    @cached_property
    def uniform_hosts(self) -> tuple[bool, ...]:
        """Per host: True when every device pair on it has the same tier (no matrix, or a uniform one)."""
        out = []
        for nt in self.host_types:
            if nt.matrix is None:
                out.append(True)
                continue
            codes = {nt.matrix[a][b] for a in range(nt.devices) for b in range(nt.devices) if a != b}
            out.append(len(codes) <= 1)
        return tuple(out)

    @staticmethod
    def from_pair_paths(
        name: str,
        paths: Sequence[Sequence[Tier]],
        *,
        kind: str = "gpu",
        device_names: Sequence[str] | None = None,
        source: str = "<graph>",
    ) -> Topology:
        """A topology given as all-pairs paths (n x n tiers) instead of a tree: each device is its own host,
        under one top domain. `placement.io.importers.graph` builds the matrix from a networkx graph or distances."""
        n = len(paths)
        ps = Problems(source)
        check_pair_paths(ps, paths)
        ps.raise_if_any()
        names = list(device_names) if device_names is not None else [f"d{i}" for i in range(n)]
        nt = NodeType("single", 1, kind)
        hosts = [HostSpec(names[i], {}, nt) for i in range(n)]
        worst = min(
            (t.bandwidth_gbps for i, r in enumerate(paths) for j, t in enumerate(r) if i != j), default=1.0
        )
        base = Topology.build(
            name, [Level("device", Tier(1e12, 0.0)), Level("graph", Tier(worst, 0.0))], hosts, source=source
        )
        return Topology(
            base.name,
            base.levels,
            base.devices,
            base.host_names,
            base.host_types,
            base.domain_names,
            base.parent,
            base.intra_node_tiers,
            None,
            tuple(tuple(r) for r in paths),
        )

    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({d.kind for d in self.devices}))
