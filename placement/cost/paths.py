"""The slowest path a group or an edge of a mapping spans (`Path`: bandwidth, latency, bottleneck tier, level),
after degradation and rails; the v1 surrogate prices on it and `placement.cost.collectives` uses it on device graphs.

A group's path (bandwidth W in GB/s, latency a in µs) is that of the slowest link its members span:

- the tier of the lowest domain level holding every member (hosts sharing a leaf: the leaf tier);
- between members on one host, the host's intra-node matrix code (NV12, PIX, SYS...) when it has one, else the
  host (level-0) tier: a group split 4+4 over two PCIe hosts still pays PCIe, however fast the leaf;
- divided by the largest slowdown among its members' devices, the intra-node links between two members,
  and the uplinks of domains it crosses (some members inside, some outside);
- on rail-optimized fabrics (`RailPolicy`), a multi-host group whose hosts do not use the same set of rails,
  or an edge between different rails, pays the extra hop.

On a device graph (`Topology.pair_paths`) the path is the slowest pair of members.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from placement.model.links import Tier, intra_node_tier
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["Path", "group_path", "health_key", "pair_path"]

_PATH_CACHE_LIMIT = 65_536
"""Paths one (topology, health) keeps; past it the cache starts again (memory stays bounded)."""
_HEALTHS_PER_TOPOLOGY = 8

_health_of: weakref.WeakKeyDictionary[ClusterState, Hashable] = weakref.WeakKeyDictionary()
_paths: weakref.WeakKeyDictionary[Topology, dict[Hashable, dict[tuple[int, ...], Path]]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()
_last: tuple[Topology, ClusterState, dict[tuple[int, ...], Path]] | None = None
"""The (topology, state) priced last and its cache: a solve prices many mappings on one pair (the lookup by weak
reference costs more than a path it saves). It keeps that one pair alive until the next."""


def health_key(state: ClusterState) -> Hashable:
    """What of a state prices a valid mapping: the device, intra-node pair and uplink slowdowns (occupancy,
    failures and fault domains change which mappings are valid, not what a valid one costs). Computed once per
    state object (states are immutable)."""
    key = _health_of.get(state)
    if key is None:
        key = (
            frozenset(state.device_slowdown.items()),
            frozenset(state.pair_slowdown.items()),
            frozenset(state.uplink_slowdown.items()),
        )
        _health_of[state] = key
    return key


def _cache(topology: Topology, state: ClusterState) -> dict[tuple[int, ...], Path]:
    """The paths already priced on `topology` under the health of `state`: groups by their devices in member
    order, edges by (a, b, -1) (a group's key has no negative entry)."""
    last = _last
    if last is not None and last[0] is topology and last[1] is state:
        return last[2]
    key = health_key(state)
    per = _paths.get(topology)
    if per is not None:
        hit = per.get(key)
        if hit is not None:
            _remember(topology, state, hit)
            return hit
    with _lock:
        per = _paths.setdefault(topology, {})
        if key not in per and len(per) >= _HEALTHS_PER_TOPOLOGY:
            del per[next(iter(per))]
        out = per.setdefault(key, {})
    _remember(topology, state, out)
    return out


def _remember(topology: Topology, state: ClusterState, cache: dict[tuple[int, ...], Path]) -> None:
    global _last
    _last = (topology, state, cache)


@dataclass(frozen=True)
class Path:
    """The effective path of a group or edge: bandwidth GB/s, latency µs, the bottleneck tier's name, LCA level."""

    bandwidth_gbps: float
    latency_us: float
    tier: str
    level: int


def _slowdown(topology: Topology, state: ClusterState, devices: Sequence[int]) -> float:
    worst = 1.0
    if state.device_slowdown:
        for d in devices:
            worst = max(worst, state.device_slowdown.get(d, 1.0))
    if state.pair_slowdown:
        dset = set(devices)
        for (a, b), f in state.pair_slowdown.items():
            if a in dset and b in dset:
                worst = max(worst, f)
    if state.uplink_slowdown:
        n = len(devices)
        for up, f in state.uplink_slowdown.items():
            col = topology.domain_column(up.level)
            inside = sum(1 for d in devices if col[d] == up.domain)
            if 0 < inside < n:
                worst = max(worst, f)
    return worst


def group_path(topology: Topology, state: ClusterState, devices: Sequence[int]) -> Path:
    """The slowest path a set of devices spans, after degradation and rails (see the module docstring). Priced
    once per (topology, slowdowns, devices) and then reused: a pure function of the three."""
    cache = _cache(topology, state)
    key = tuple(devices)
    hit = cache.get(key)
    if hit is None:
        hit = _group_path(topology, state, devices)
        if len(cache) >= _PATH_CACHE_LIMIT:
            cache.clear()
        cache[key] = hit
    return hit


def _group_path(topology: Topology, state: ClusterState, devices: Sequence[int]) -> Path:
    if topology.pair_paths is not None:
        pp = topology.pair_paths
        bw, lat = math.inf, 0.0
        for i, a in enumerate(devices):
            for b in devices[i + 1 :]:
                for t in (pp[a][b], pp[b][a]):
                    bw, lat = min(bw, t.bandwidth_gbps), max(lat, t.latency_us)
        return Path(bw / _slowdown(topology, state, devices), lat, "graph", 1 if len(devices) > 1 else 0)
    level = topology.group_lca_level(devices)
    tier: Tier = topology.levels[level].tier
    name = topology.levels[level].name
    # intra-node codes between co-hosted members
    by_host: dict[int, list[int]] = defaultdict(list)
    for d in devices:
        by_host[topology.devices[d].host_index].append(d)
    if level > 0 or any(topology.host_types[h].matrix is not None for h in by_host):
        found_matrix = False
        best: Tier | None = None
        best_name = name
        for h, members in by_host.items():
            mat = topology.host_types[h].matrix
            if mat is None or len(members) < 2:
                continue
            for i, a in enumerate(members):
                la = topology.devices[a].local_index
                for b in members[i + 1 :]:
                    code = mat[la][topology.devices[b].local_index]
                    t = intra_node_tier(code, topology.intra_node_tiers)
                    if (
                        best is None
                        or t.bandwidth_gbps < best.bandwidth_gbps
                        or (t.bandwidth_gbps == best.bandwidth_gbps and t.latency_us > best.latency_us)
                    ):
                        best, best_name = t, f"{topology.levels[0].name}:{code}"
                    found_matrix = True
        if found_matrix and best is not None:
            if level == 0:
                tier, name = best, best_name
            elif best.bandwidth_gbps < tier.bandwidth_gbps:
                tier, name = Tier(best.bandwidth_gbps, max(best.latency_us, tier.latency_us)), best_name
            else:
                tier = Tier(tier.bandwidth_gbps, max(best.latency_us, tier.latency_us))
    if level > 0 and any(len(m) > 1 and topology.host_types[h].matrix is None for h, m in by_host.items()):
        # co-hosted members of a multi-host group still talk over the host tier (PCIe hosts under a faster NIC)
        t0 = topology.levels[0].tier
        if t0.bandwidth_gbps < tier.bandwidth_gbps:
            tier, name = Tier(t0.bandwidth_gbps, max(t0.latency_us, tier.latency_us)), topology.levels[0].name
        elif t0.latency_us > tier.latency_us:
            tier = Tier(tier.bandwidth_gbps, t0.latency_us)
    bw, lat = tier.bandwidth_gbps, tier.latency_us
    rp = topology.rail_policy
    if rp is not None and level > 0 and len(by_host) > 1:
        rail_sets = set()
        for members in by_host.values():
            rails = [topology.devices[d].rail for d in members]
            rail_sets.add(tuple(sorted(-1 if x is None else x for x in rails)))
        if len(rail_sets) > 1:
            bw *= rp.bandwidth_factor
            lat += rp.extra_latency_us
    slow = _slowdown(topology, state, devices)
    return Path(bw / slow, lat, name, level)


def pair_path(topology: Topology, state: ClusterState, a: int, b: int) -> Path:
    """The path between two devices (a point-to-point edge); priced once per (topology, slowdowns, a, b)."""
    cache = _cache(topology, state)
    key = (a, b, -1)
    hit = cache.get(key)
    if hit is None:
        hit = _pair_path(topology, state, a, b)
        if len(cache) >= _PATH_CACHE_LIMIT:
            cache.clear()
        cache[key] = hit
    return hit


def _pair_path(topology: Topology, state: ClusterState, a: int, b: int) -> Path:
    tier, name = topology.pair_tier(a, b)
    bw, lat = tier.bandwidth_gbps, tier.latency_us
    level = topology.lca_level(a, b)
    rp = topology.rail_policy
    da, db = topology.devices[a], topology.devices[b]
    if rp is not None and level > 0 and da.rail != db.rail:
        bw *= rp.bandwidth_factor
        lat += rp.extra_latency_us
    slow = _slowdown(topology, state, (a, b))
    return Path(bw / slow, lat, name, level)
