"""Collectives as NCCL runs them: ring orders over a host's links, ring and tree across hosts, shared links.

Owns the price of one collective or transfer (`Plan`) and how concurrent plans of a phase divide shared links.

**Links.** Bandwidths are GB/s per direction; an operation of S bytes prices ``latency + bytes/bandwidth`` per link
it loads (alpha-beta, Hockney 1994), and a pipelined algorithm takes its most loaded link.

- *Inside a host*: with an intra-node matrix, device pairs are links of the code's tier (NV# = # NVLinks). Without
  one, a switch (NVSwitch) gives every device the level-0 tier; a full mesh (`NodeType.mesh_link_gbps`, AMD XGMI)
  gives each pair its own link. These links belong to the devices of one group, so groups do not share them.
- *Host NICs*: the devices of a host share ``nics * nic_gbps`` (default: one NIC per device at the level-1 tier,
  so today's per-device tiers keep their meaning); one group's flows out of a host use at most
  ``min(members there, nics)`` NICs, and reach them over each device's host link (on a host with no matrix and
  no mesh, the level-0 tier: a PCIe host cannot feed its NICs faster than PCIe).
- *Uplinks*: a domain at level l >= 1 (a leaf) leaves through ``devices(domain) * tier(l+1) / oversubscription(l)``.
- *Per flow*: a device's flow whose lowest common level is L runs at most at the slowest tier of levels 1..L (the
  per-device rate a tier states, as in v1); the shared NICs and uplinks above divide further.
- *Degradation* (`placement.model.state`): a slow device divides every bandwidth term of the groups it is in, a slow
  intra-node link the capacity of that pair, a slow uplink (level 0: the host's NICs) its capacity. Failed links
  and devices make a mapping invalid (`placement.model.validate`) and are not priced here.

**Algorithms** (NCCL's, github.com/NVIDIA/nccl `src/graph/search.cc`, `src/graph/tuning.cc`; Patarasuk & Yuan 2009;
Sanders, Speck & Träff 2009 for the double binary tree). For S bytes over n members:

- *Ring* (all-reduce ``2(n-1)/n S`` in ``2(n-1)`` steps; all-gather, reduce-scatter ``(n-1)/n S`` in ``n-1``). Inside
  a host the ring order is searched like NCCL's: the best single ring maximises its weakest hop (bottleneck
  Hamiltonian cycle, exact search), and NVLink rings are packed greedily (each ring takes its bottleneck from
  every hop it uses, as NCCL's channels do) while one exists: the host's ring bandwidth is the larger of the
  packed NVLink rings' sum and the best single ring (`placement.cost.host_rings`). Behind an NVSwitch (`nvswitch`:
  NV18 on every pair of an HGX H100) the code is the device's bandwidth, not a link per pair: one ring, no
  packing. A DGX-1 8-GPU ring rides NVLink only (2 x NV2 + 2 x NV1 rings = 6 links), a fully connected XGMI
  mesh carries ``(k-1) * link`` with k members. Across hosts the ring is host contiguous: every host and every
  crossed domain sends and receives the ring volume once. A ring step waits for its slowest hop (network or
  intra-host latency).
- *Tree* (all-reduce across hosts: NCCL's double binary tree, a chain inside each host). The chain carries ``2 S``
  (reduce up, broadcast down); out of every host ``S`` with 2 hosts (each roots one tree and is a leaf of the
  other) and ``2 S`` with more (interior in one tree, leaf in the other). NCCL's tuner counts 92% of the links
  (`TREE_EFFICIENCY`) and at most `placement.cost.compute.tree_channel_gbps` bus GB/s per channel, one channel per
  NIC a host uses (algorithm bandwidth ``<= channels * cap / 2``): a 2-host V100 tree over one NIC: 9.25 GB/s.
  Latency ``2 (ceil(log2 h) a_inter + (g-1) a_intra)``.
- No hierarchical all-reduce: NCCL has none for one communicator (ring, tree; CollNet / NVLS need SHARP or NVLink
  SHARP: `ncclTopoTuneModel`). All-gather and reduce-scatter run as rings (NCCL's PAT needs one GPU per host).
- *All-to-all*: direct sends, ``S/n`` to each peer; a host sends ``g (n-g)/n S``.

NCCL's tuner takes the fastest algorithm for the size alone; so does `Fabric.plan_group` (contention is not
known to the tuner), and `PhaseCost.algorithm` reports the choice.

**Sharing** (`max_min_phase_seconds`): the operations of one phase run at the same time and share NICs and uplinks
max-min fairly (Bertsekas & Gallager, Data Networks, 1992, sec. 6.5.2), by progressive filling: every unfrozen
operation's rate, in bytes per second on its most loaded link, rises together; a full link freezes the operations
crossing it, an operation's own links (its plan's time alone) freeze it; then time runs to the next completion and
the filling starts again with what is left. Alone on its shared links an operation takes its plan's time. Only
operations that share a link need the filling: `share_phase` splits a phase into components of the link-sharing
graph, and a component's times depend on its plans alone. `phase_seconds` is the older rule, in proportion to
bytes (every flow ends when the link has carried the sum), kept for `alone` and calibration.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from placement.cost.compute import nccl_generation, tree_channel_gbps
from placement.cost.host_rings import matrix_ring, nvswitch
from placement.cost.paths import group_path, health_key, pair_path
from placement.model.job import CollectiveKind
from placement.model.state import ClusterState, Uplink
from placement.model.topology import Topology

__all__ = [
    "BACKGROUND_SECONDS",
    "TREE_EFFICIENCY",
    "Background",
    "Fabric",
    "Plan",
    "Stage",
    "background_flow",
    "collective_floor",
    "fabric_for",
    "max_min_phase_seconds",
    "phase_seconds",
    "share_phase",
]

TREE_EFFICIENCY = 0.92  # share of the link rate NCCL's tree reaches (busBw * .92 in src/graph/tuning.cc)

# NCCL's tuner, github.com/NVIDIA/nccl src/graph/tuning.cc @ 5067397c (our code, its constants):
# hwLatencies per step, µs, (LL, LL128, Simple), for a hop of NVLink, PCI or the network, ring and tree. A tier's
# latency is taken as the Simple one; LL and LL128 scale it by their ratio to Simple.
_HW_LATENCY: Mapping[tuple[str, str], tuple[float, float, float]] = {
    ("ring", "nvlink"): (0.6, 1.9, 3.4),
    ("ring", "pci"): (1.0, 2.5, 5.7),
    ("ring", "net"): (2.7, 4.0, 14.0),
    ("tree", "nvlink"): (0.6, 1.25, 4.0),
    ("tree", "pci"): (1.0, 1.9, 4.0),
    ("tree", "net"): (5.0, 8.5, 14.0),
}
# llMaxBws: the LL protocol's bus GB/s cap; one host by GPU generation, several hosts (2, more) by CPU (x86 row)
_LL_MAX_ONE_HOST: Mapping[str, float] = {"volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0}
_LL_MAX_HOSTS = (39.0, 20.4)
NVLS_EFFICIENCY: Mapping[str, float] = {"hopper": 0.85, "blackwell": 0.74}
"""nvlsEfficiency by generation (Volta and Ampere switches have no NVLink SHARP)."""
NVLS_CHANNELS = 16
"""NVLS channels NCCL opens (NCCL_NVLS_NCHANNELS default); one of them does not carry data: (n-1)/n."""
NVLS_LATENCY_US = 25.0
"""hwLatencies of NVLS and NVLSTree over NVLink (Simple), µs."""
COLLNET_HOPPER_FACTOR = 0.85
"""CollNet Direct's bus bandwidth factor from compute capability 9.0 on (NCCL's tuner: ``busBw *= .85``)."""
COLLNET_ARITY_US = 0.4
"""CollNet Direct's arity serialization latency per local rank, µs (NCCL's tuner)."""
PROTOCOLS = ("LL", "LL128", "Simple")


def collective_floor(
    kind: CollectiveKind,
    n: int,
    size: float,
    hosts: int,
    step_latency_s: float,
    own_bytes_per_s: float,
    host_bytes_per_s: float,
    *,
    generations: Iterable[str | None] = (),
    nvls: float = 0.0,
    hop: str | None = None,
    simple: bool = True,
    nvlink: bool = False,
    sharp: bool = False,
    device_bytes_per_s: float = math.inf,
) -> float:
    """Seconds at least of any algorithm and protocol `Fabric.plan_group` can choose for one collective of `size`
    bytes over `n` members on `hosts` hosts, alone: the same candidates (module doc) priced with a lower bound on
    one step's Simple latency (`step_latency_s`: inside a host the fastest link's, across hosts the LCA tier's)
    and upper bounds on the group's own ring rate per device (`own_bytes_per_s`) and on the rate out of one host
    (`host_bytes_per_s`, e.g. ``min(nics, members) x nic_gbps``); `generations`: the NCCL generations
    (`Fabric.generation`) of the hosts it may run on, `nvls`: the largest `Fabric.nvls_efficiency` among them,
    `hop`: ``nvlink`` or ``pci`` when every such host's ring is of that kind (None: the cheaper latencies of both).
    Every candidate's time rises with latency and falls with rates, so this is a lower bound for
    `placement.solve.bound`, and exact where the binding terms are the ones given (e.g. an NVSwitch host).
    `simple` False leaves out the Simple-protocol ring and tree (a caller that prices those more tightly itself
    takes the lesser of its price and this; inf when nothing is left). Across hosts, `nvlink`: the hosts are in one
    NVLink domain (NVLS across them, each device at most `device_bytes_per_s`); `sharp`: the levels crossed reduce
    in the network (CollNet)."""
    if n <= 1 or size <= 0:
        return 0.0
    vol, steps = _volume(kind, n, size)
    gens = set(generations)
    ll128 = any(g is not None for g in gens)
    ll_one = max(
        (_LL_MAX_ONE_HOST.get(g or "", _LL_MAX_HOSTS[0]) for g in gens), default=_LL_MAX_ONE_HOST["blackwell"]
    )
    a = step_latency_s
    if hosts <= 1:
        bw = own_bytes_per_s
        if kind is CollectiveKind.ALL_TO_ALL:
            return steps * a + vol / bw
        rows = [_HW_LATENCY[("ring", h)] for h in ((hop,) if hop else ("nvlink", "pci"))]
        r_ll = min(r[0] / r[2] for r in rows)
        r_128 = min(r[1] / r[2] for r in rows)
        best = steps * a * r_ll + max(vol / (0.5 * bw), vol / (ll_one * 1e9))
        if simple:
            best = min(best, steps * a + vol / bw)
        if ll128:
            best = min(best, steps * a * r_128 + vol / (0.92 * bw))
        if nvls > 0 and kind is CollectiveKind.ALL_REDUCE:
            best = min(best, NVLS_LATENCY_US * 1e-6 + size / (bw * nvls))
        return best
    f = host_bytes_per_s
    if kind is CollectiveKind.ALL_TO_ALL:
        return steps * a + vol / f  # a host sends g (n-g)/n S >= (n-1)/n S
    ll_h = _LL_MAX_HOSTS[0 if hosts <= 2 else 1] * 1e9
    ring = _HW_LATENCY[("ring", "net")]
    cands = [steps * a * ring[0] / ring[2] + max(vol / (0.5 * f), vol / ll_h)]
    if simple:
        cands.append(steps * a + vol / f)
    if ll128:
        cands.append(steps * a * ring[1] / ring[2] + vol / (0.92 * f))
    if kind is CollectiveKind.ALL_REDUCE:
        tree = _HW_LATENCY[("tree", "net")]
        lat = 2 * math.ceil(math.log2(hosts)) * a
        tb = (size if hosts == 2 else 2 * size) / TREE_EFFICIENCY
        if simple:
            cands.append(lat + tb / f)
        cands.append(lat * tree[0] / tree[2] + max(3.8 * tb / f, 2 * size / ll_h))
        if ll128:
            cands.append(lat * tree[1] / tree[2] + tb / (f * 120 / 128))
        if nvls > 0:
            cands.append(NVLS_LATENCY_US * 1e-6 + lat + (size if hosts == 2 else 2 * size) / f)
            if nvlink:
                cands.append(NVLS_LATENCY_US * 1e-6 + size / (device_bytes_per_s * nvls))
        if sharp:
            cands.append(2 * a + size / f)
    return min(cands)


@dataclass(frozen=True)
class Stage:
    """One stage of an operation: seconds on its own links (`local`, tier `local_tier`) and bytes on shared links."""

    local: float
    local_tier: str
    loads: tuple[tuple[int, float], ...] = ()
    shape: _Shape | None = field(default=None, init=False, repr=False, compare=False)
    """Its loads as sharing reads them (`_shape`), computed on first use."""


@dataclass(frozen=True)
class Plan:
    """How one collective or transfer runs: algorithm (with its protocol when not Simple, ``ring/LL``), latency
    seconds, stages in sequence, device slowdown."""

    algorithm: str
    latency: float
    stages: tuple[Stage, ...]
    slowdown: float = 1.0


def _protocols(
    algo: str, hop: str, gen: str | None, hosts: int, lat: float, own: float, vol: float, size: float, n: int
) -> list[tuple[str, float, float, float]]:
    """NCCL's protocols for one algorithm priced with Simple: (name, latency s, seconds on the group's own links,
    bytes on shared links) each. LL: half the bandwidth (8-byte lines carry 4 bytes of data; a tree a 3.8th), capped
    at llMaxBw bus GB/s; LL128: 120/128 of it (a ring 0.92; a tree inside one host 7/9); both at NCCL's per-step
    latency ratios to Simple. LL128 only on NVIDIA generations NCCL tunes (`placement.cost.compute.nccl_generation`)."""
    base = algo.split("/")[0]
    out = [(algo, lat, own, vol)]
    if base not in ("ring", "tree"):
        return out
    ll, ll128, simple = _HW_LATENCY[(base, hop)]
    if hosts == 1:
        ll_max = _LL_MAX_ONE_HOST.get(gen or "", _LL_MAX_HOSTS[0]) * 1e9
    else:
        ll_max = _LL_MAX_HOSTS[0 if hosts <= 2 else 1] * 1e9
    # the fastest an LL operation can go: llMaxBw bus bandwidth, as algorithm time (ring n/nsteps, tree 1/2)
    ll_floor = (vol if base == "ring" else 2 * size) / ll_max
    f_ll = 0.5 if base == "ring" else 1 / 3.8
    out.append((f"{base}/LL", lat * ll / simple, max(own / f_ll, ll_floor), vol / f_ll))
    if gen is not None:
        f = 0.92 if base == "ring" else (7 / 9 if hosts == 1 else 120 / 128)
        out.append((f"{base}/LL128", lat * ll128 / simple, own / f, vol / f))
    return out


NO_PLAN = Plan("none", 0.0, ())


def _sharp(
    nvls: float, g: int, a_inter: float, a_intra: float, intra: float, size: float, hopper: bool
) -> tuple[str, float, float, float]:
    """An all-reduce where the switches of every level crossed reduce (SHARP), as (algorithm, latency s, seconds on
    the nodes' own links, bytes out of every node and crossed domain): S leaves and enters each node once. Inside
    the nodes NVLS at efficiency `nvls` where they have NVLink SHARP (NCCL's NVLS across nodes), else a ring
    reduce-scatter / all-gather over `intra` bytes/s among `g` members (CollNet; 0.85 of its bandwidth from Hopper
    on, 0.4 µs per local rank each way). Latencies `a_inter`, `a_intra` in µs; Simple only."""
    if nvls > 0:
        return "nvls", (NVLS_LATENCY_US + 2 * a_inter) * 1e-6, size / (intra * nvls), size
    scale = COLLNET_HOPPER_FACTOR if hopper else 1.0
    lat = (2 * a_inter + 2 * a_intra + 2 * COLLNET_ARITY_US * (g - 1)) * 1e-6
    return "collnet", lat, 2 * (g - 1) / g * size / intra / scale, size / scale


def _flat(x: float) -> Callable[[int], float]:
    """The same bytes through every crossed domain, whatever it holds."""
    return lambda _m: x


def _volume(kind: CollectiveKind, n: int, size: float) -> tuple[float, int]:
    if kind is CollectiveKind.ALL_REDUCE:
        return 2.0 * (n - 1) / n * size, 2 * (n - 1)
    return (n - 1) / n * size, n - 1


class Fabric:
    """The links of one topology under one state, with the resources phases share (host NICs, domain uplinks)."""

    def __init__(self, topology: Topology, state: ClusterState) -> None:
        self.topology = topology
        self.state = state
        lv = topology.levels
        self.host_of = topology.domain_column(0)
        self.cols = [topology.domain_column(li) for li in range(len(lv))]
        # NVLink domains across hosts (`Level.nvlink`): a group whose lowest common level is L is inside one when
        # L or a level above it is marked (its hosts talk over NVLink, not their NICs); otherwise its NVLink
        # domains are those of the highest marked level below L (NCCL's nodes), or there are none
        self.nvl_inside = [any(x.nvlink for x in lv[li:]) and li >= 1 for li in range(len(lv))]
        self.nvl_level: list[int | None] = [
            max((j for j in range(1, li) if lv[j].nvlink), default=None) for li in range(len(lv))
        ]
        self.latency = [x.tier.latency_us for x in lv]
        # tier_min[L]: the per-device rate of a flow whose lowest common level is L (the slowest tier of 1..L)
        self.tier_min = [math.inf]
        self.tier_min_name = [lv[0].name]
        for x in lv[1:]:
            slower = x.tier.bandwidth_gbps < self.tier_min[-1]
            self.tier_min.append(x.tier.bandwidth_gbps if slower else self.tier_min[-1])
            self.tier_min_name.append(x.name if slower else self.tier_min_name[-1])
        self._edges: dict[tuple[int, int, float, float, bool], Plan] = {}
        self._single: dict[tuple[int, tuple[int, ...], CollectiveKind, float], Plan] = {}
        # `share_phase` per list of plan objects (by identity; the entry keeps them, so an id is not reused)
        self._shares: dict[
            tuple[int, ...], tuple[tuple[Plan, ...], tuple[list[tuple[float, str]], list[int]]]
        ] = {}
        self.local_of = tuple(d.local_index for d in topology.devices)
        self.tiers_key = tuple(
            sorted((c, t.bandwidth_gbps, t.latency_us) for c, t in topology.intra_node_tiers.items())
        )
        nic_default = lv[1].tier.bandwidth_gbps if len(lv) > 1 else lv[0].tier.bandwidth_gbps
        up_slow = state.uplink_slowdown
        # resource r = base[l] + 2 * domain + direction (0 out/up, 1 in/down); caps in GB/s
        self.base: list[int] = []
        caps: list[float] = []
        self.names: list[str] = []
        self.nic_gbps: list[float] = []
        self.nics: list[int] = []
        self.dev_link: list[float] = []
        for li in range(len(lv) - 1):
            self.base.append(len(caps))
            upper = lv[li + 1].name
            if li == 0:
                for h, nt in enumerate(topology.host_types):
                    nics = nt.nics or nt.devices
                    per = nt.nic_gbps or nic_default
                    f = up_slow.get(Uplink(0, h), 1.0) if up_slow else 1.0
                    self.nics.append(nics)
                    self.nic_gbps.append(per / f)
                    plain = (
                        nt.matrix is None and not nt.mesh_link_gbps
                    )  # the level-0 tier is the device's host link
                    self.dev_link.append(lv[0].tier.bandwidth_gbps if plain else math.inf)
                    caps += [nics * per / lv[0].oversubscription / f] * 2
            else:
                counts = Counter(topology.domain_column(li))
                for k in range(len(topology.domain_names[li])):
                    f = up_slow.get(Uplink(li, k), 1.0) if up_slow else 1.0
                    caps += [counts[k] * lv[li + 1].tier.bandwidth_gbps / lv[li].oversubscription / f] * 2
            self.names += [upper] * (len(caps) - len(self.names))
        self.caps = caps
        self.caps_bytes = [c * 1e9 for c in caps]  # bytes/s, as the sharing rules divide by them
        self._pair_slow: dict[int, list[tuple[int, int, float]]] = {}
        for (a, b), f in state.pair_slowdown.items():
            self._pair_slow.setdefault(self.host_of[a], []).append((a, b, f))
        self._ring_cache: dict[tuple[int, tuple[int, ...]], tuple[float, float, str]] = {}
        self._tree_rows: dict[int, tuple[float, float, float] | None] = {}
        self._gens: dict[int, str | None] = {}
        self._nvls_eff: dict[int, float] = {}
        # plans of groups over several hosts, by (kind, devices in member order, bytes): a scheduler's requests
        # and a solver's candidates price the same groups again and again
        self._multi: dict[tuple[CollectiveKind, tuple[int, ...], float], Plan] = {}

    # ---- inside one host ----------------------------------------------------------------------------------------

    def host_ring(self, host: int, devices: Sequence[int]) -> tuple[float, float, str]:
        """Ring bandwidth GB/s, per-step latency µs and bottleneck tier name of `devices` (all on `host`)."""
        t = self.topology
        k = len(devices)
        if k < 2:
            return math.inf, 0.0, t.levels[0].name
        nt = t.host_types[host]
        slow = self._pair_slow.get(host)
        if nt.matrix is None:
            tier0 = t.levels[0].tier
            bw = tier0.bandwidth_gbps
            if nt.mesh_link_gbps:
                bw = min(bw, (k - 1) * nt.mesh_link_gbps)
            if slow:
                ds = set(devices)
                bw /= max((f for a, b, f in slow if a in ds and b in ds), default=1.0)
            return bw, tier0.latency_us, t.levels[0].name
        locs = tuple(sorted(self.local_of[d] for d in devices))
        key = (id(nt), locs)
        if not slow and key in self._ring_cache:
            return self._ring_cache[key]
        pos = {self.local_of[d]: i for i, d in enumerate(sorted(devices, key=lambda d: self.local_of[d]))}
        sl: tuple[tuple[int, int, float], ...] = ()
        if slow:
            sl = tuple(
                (pos[self.local_of[a]], pos[self.local_of[b]], f)
                for a, b, f in slow
                if self.local_of[a] in pos and self.local_of[b] in pos and self.host_of[b] == host
            )
        bw, lat, code = matrix_ring(nt.matrix, self.tiers_key, locs, sl)
        out = (bw, lat, f"{t.levels[0].name}:{code}")
        if not slow:
            self._ring_cache[key] = out
        return out

    def _slow(self, devices: Sequence[int]) -> float:
        ds = self.state.device_slowdown
        return max((ds.get(d, 1.0) for d in devices), default=1.0) if ds else 1.0

    # ---- one operation ------------------------------------------------------------------------------------------

    def alone(self, plan: Plan) -> float:
        """Seconds of one operation with no other traffic on its shared links."""
        return phase_seconds(self, [plan])[0][0]

    def plan_group(self, kind: CollectiveKind, devices: Sequence[int], size: float) -> Plan:
        """The fastest algorithm for one collective of `size` bytes over `devices` (NCCL's tuner: size alone)."""
        n = len(devices)
        if n <= 1 or size <= 0:
            return NO_PLAN
        t = self.topology
        slow = self._slow(devices)
        if t.pair_paths is not None:
            path = group_path(t, self.state, devices)
            vol, steps = _volume(kind, n, size)
            return Plan(
                "ring", steps * path.latency_us * 1e-6, (Stage(vol / (path.bandwidth_gbps * 1e9), "graph"),)
            )
        by_host: dict[int, list[int]] = {}
        host_of = self.host_of
        for d in devices:
            by_host.setdefault(host_of[d], []).append(d)
        if len(by_host) == 1:
            ((h, devs),) = by_host.items()
            nt = t.host_types[h]
            cacheable = slow == 1.0 and h not in self._pair_slow
            key = (
                id(nt),
                tuple(sorted(self.local_of[d] for d in devs)) if nt.matrix is not None else (n,),
                kind,
                size,
            )
            if cacheable and key in self._single:
                return self._single[key]
            bw, lat, name = self.host_ring(h, devs)
            vol, steps = _volume(kind, n, size)
            if kind is CollectiveKind.ALL_TO_ALL:
                plan = Plan("direct", steps * lat * 1e-6, (Stage(vol / (bw * 1e9), name),), slow)
            else:
                gen = self.generation(h)
                hop = "nvlink" if gen is not None and (nt.matrix is None or ":NV" in name) else "pci"
                cands = _protocols("ring", hop, gen, 1, steps * lat * 1e-6, vol / (bw * 1e9), vol, size, n)
                eff = self.nvls_efficiency(h)
                if eff and kind is CollectiveKind.ALL_REDUCE:
                    # NVLink SHARP: the switch reduces and multicasts; each device's link carries S once each way
                    cands.append(("nvls", NVLS_LATENCY_US * 1e-6, size / (bw * 1e9 * eff), size))
                algo, lat_s, own, _ = min(cands, key=lambda c: c[1] + c[2])
                plan = Plan(algo, lat_s, (Stage(own, name),), slow)
            if cacheable:
                if len(self._single) >= _PLAN_CACHE_LIMIT:
                    self._single.clear()
                self._single[key] = plan
            return plan
        mkey = (kind, tuple(devices), size)
        hit = self._multi.get(mkey)
        if hit is not None:
            return hit
        plan = self._multi_host(kind, by_host, n, size, slow)
        if len(self._multi) >= _PLAN_CACHE_LIMIT:
            self._multi.clear()
        self._multi[mkey] = plan
        return plan

    def _crossed(self, hosts: Sequence[int], reps: Sequence[int]) -> tuple[int, list[tuple[int, int]]]:
        """LCA level of the hosts and the (level, domain) uplinks between level 1 and it, with member hosts."""
        t = self.topology
        lca = t.group_lca_level(reps)
        ups: list[tuple[int, int]] = []
        for li in range(1, lca):
            col = t.domain_column(li)
            ups += [(li, k) for k in sorted({col[r] for r in reps})]
        return lca, ups

    def _multi_host(
        self, kind: CollectiveKind, by_host: Mapping[int, list[int]], n: int, size: float, slow: float
    ) -> Plan:
        t = self.topology
        hosts = list(by_host)
        reps = [by_host[h][0] for h in hosts]
        lca, ups = self._crossed(hosts, reps)
        a_inter = t.levels[lca].tier.latency_us
        rf = 1.0
        rp = t.rail_policy
        if rp is not None:
            rails = {
                tuple(sorted(-1 if (x := t.devices[d].rail) is None else x for d in by_host[h]))
                for h in hosts
            }
            if len(rails) > 1:
                rf, a_inter = rp.bandwidth_factor, a_inter + rp.extra_latency_us
        if self.nvl_inside[lca]:
            return self._inside_nvlink(kind, by_host, lca, ups, n, size, slow, rf, a_inter)
        dom_level = self.nvl_level[lca]
        if dom_level is not None:
            return self._across_nvlink(kind, by_host, dom_level, lca, ups, n, size, slow, rf, a_inter)
        rings = {h: self.host_ring(h, by_host[h]) for h in hosts if len(by_host[h]) > 1}
        a_intra = max((r[1] for r in rings.values()), default=0.0)
        intra_bw = min((r[0] for r in rings.values()), default=math.inf) * 1e9
        intra_name = min(rings.values(), key=lambda r: r[0])[2] if rings else t.levels[0].name
        b0, caps = self.base[0], self.caps
        cap_tier = self.tier_min[lca]
        flow = {
            h: min(
                self.nic_gbps[h] * min(len(by_host[h]), self.nics[h]),
                min(self.dev_link[h], cap_tier) * len(by_host[h]),
            )
            * rf
            * 1e9
            for h in hosts
        }
        host_res = [(h, b0 + 2 * h) for h in hosts]
        up_res = [self.base[li] + 2 * k for li, k in ups]
        min_flow = min(flow.values())
        h_min = min(flow, key=flow.__getitem__)
        nic_name = self.tier_min_name[lca] if cap_tier < self.nic_gbps[h_min] else self.names[b0]
        min_host = min(caps[r] for _, r in host_res) * 1e9
        min_up = min((caps[r] for r in up_res), default=math.inf) * 1e9

        if kind is CollectiveKind.ALL_TO_ALL:
            # A2A loads differ per host and are priced directly
            per_host = {h: len(v) * size * (n - len(v)) / n for h, v in by_host.items()}
            loads: list[tuple[int, float]] = []
            for h, r in host_res:
                loads += [(r, per_host[h]), (r + 1, per_host[h])]
            loads += self._up_loads(by_host, ups, lambda m: m * size * (n - m) / n)
            intra = max(
                ((len(by_host[h]) - 1) / n * size / (r[0] * 1e9) for h, r in rings.items()), default=0.0
            )
            nic = max(x / flow[h] for h, x in per_host.items())
            st = Stage(max(intra, nic), intra_name if intra >= nic else nic_name, tuple(loads))
            return Plan("direct", (n - 1) * max(a_inter, a_intra) * 1e-6, (st,), slow)
        vol, steps = _volume(kind, n, size)
        # candidates: (algorithm, latency s, seconds on the group's own links and the tier that sets them, bytes
        # out of every host and crossed domain); a ring step waits for its slowest hop (network or intra-host)
        cands: list[tuple[str, float, float, str, float]] = [
            ("ring", steps * max(a_inter, a_intra) * 1e-6, vol / intra_bw, intra_name, vol)
        ]
        h = len(hosts)
        if kind is CollectiveKind.ALL_REDUCE:
            cands += self._host_reduces(by_host, lca, size, a_inter, a_intra, intra_bw, intra_name, nic_name)
        gen = self._gen_of(hosts)
        cands = [
            (a, lt, own, c[3], v)
            for c in cands
            for a, lt, own, v in _protocols(c[0], "net", gen, h, c[1], c[2], c[4], size, n)
        ]

        def alone(c: tuple[str, float, float, str, float]) -> float:
            v = c[4]
            return c[1] + slow * max(c[2], v / min_flow, v / min_host, v / min_up)

        algo, lat, intra, name, v = min(cands, key=alone)
        nic = v / min_flow
        ld: list[tuple[int, float]] = []
        for _, r in host_res:
            ld += [(r, v), (r + 1, v)]
        for r in up_res:
            ld += [(r, v), (r + 1, v)]
        return Plan(algo, lat, (Stage(max(intra, nic), name if intra >= nic else nic_name, tuple(ld)),), slow)

    def _host_reduces(
        self,
        by_host: Mapping[int, list[int]],
        lca: int,
        size: float,
        a_inter: float,
        a_intra: float,
        intra_bw: float,
        intra_name: str,
        nic_name: str,
    ) -> list[tuple[str, float, float, str, float]]:
        """The all-reduce candidates across hosts beside the ring (`_multi_host`): NCCL's tree, NVLSTree, and
        SHARP (NVLS or CollNet) where every level crossed reduces; as (algorithm, latency s, seconds on the
        group's own links, the tier that sets them, bytes out of every host and crossed domain)."""
        hosts = list(by_host)
        h = len(hosts)
        # NCCL's double binary tree: 2 S through the chain, S (2 hosts) or 2 S out of each host (module doc)
        gmax = max(len(v) for v in by_host.values())
        lat = 2 * (math.ceil(math.log2(h)) * a_inter + (gmax - 1) * a_intra) * 1e-6
        chain = 2 * size / (intra_bw * TREE_EFFICIENCY)
        channels = size / self._tree_cap(by_host, h)
        nic_vol = (size if h == 2 else 2 * size) / TREE_EFFICIENCY
        cands = [("tree", lat, max(chain, channels), intra_name if chain >= channels else nic_name, nic_vol)]
        effs = [self.nvls_efficiency(x) for x in hosts]
        if all(effs) and gmax > 1:
            # NVLSTree: NVLink SHARP inside each host, a tree between hosts (S out of each of 2 hosts, else 2 S)
            eff = min(e for e in effs if e)
            lat = (NVLS_LATENCY_US + 2 * math.ceil(math.log2(h)) * a_inter) * 1e-6
            cands.append(("nvlstree", lat, size / (intra_bw * eff), intra_name, size if h == 2 else 2 * size))
        levels = self.topology.levels
        if all(levels[li].sharp for li in range(1, lca + 1)):
            # the switches of every level crossed reduce (`_sharp`): NVLS across nodes, or CollNet
            eff = min(effs) if all(effs) and gmax > 1 else 0.0
            algo, lat, own, out = _sharp(
                eff,
                gmax,
                a_inter,
                a_intra if gmax > 1 else 0.0,
                intra_bw,
                size,
                self._hopper_or_later(hosts),
            )
            cands.append((algo, lat, own, intra_name, out))
        return cands

    def _gen_of(self, hosts: Iterable[int]) -> str | None:
        """The hosts' one NCCL generation (None: none, or several)."""
        gens = {self.generation(h) for h in hosts}
        return gens.pop() if len(gens) == 1 else None

    def _up_loads(
        self,
        by_host: Mapping[int, list[int]],
        ups: Sequence[tuple[int, int]],
        bytes_of: Callable[[int], float],
        lowest: int = 1,
    ) -> list[tuple[int, float]]:
        """Loads on the crossed uplinks of levels >= `lowest`: `bytes_of(m)` each way for a domain holding m
        members of the group."""
        loads: list[tuple[int, float]] = []
        for li, k in ups:
            if li < lowest:
                continue
            col = self.cols[li]
            x = bytes_of(sum(len(v) for v in by_host.values() if col[v[0]] == k))
            r = self.base[li] + 2 * k
            loads += [(r, x), (r + 1, x)]
        return loads

    def _inside_nvlink(
        self,
        kind: CollectiveKind,
        by_host: Mapping[int, list[int]],
        lca: int,
        ups: Sequence[tuple[int, int]],
        n: int,
        size: float,
        slow: float,
        rf: float,
        a_inter: float,
    ) -> Plan:
        """A group over the hosts of one NVLink domain (multi-node NVLink, a GB200 NVL72 rack: NCCL sees it as one
        node). Every device talks over its own NVLink (at most the domain's tier), never the hosts' NICs: a ring
        (all-to-all: direct) as inside a host, and for all-reduce NVLS where every host has NVLink SHARP (each
        device sends S into the switches and receives S, at `nvls_efficiency` of its link)."""
        dev = min(min(self.dev_link[h], self.tier_min[lca]) for h in by_host) * rf * 1e9
        name = self.tier_min_name[lca]
        a = max([a_inter] + [self.host_ring(h, v)[1] for h, v in by_host.items() if len(v) > 1]) * 1e-6
        vol, steps = _volume(kind, n, size)
        if kind is CollectiveKind.ALL_TO_ALL:
            loads = self._up_loads(by_host, ups, lambda m: m * size * (n - m) / n)
            return Plan("direct", steps * a, (Stage(vol / dev, name, tuple(loads)),), slow)
        gen = self._gen_of(by_host)
        # (algorithm, latency s, seconds on the devices' own links, bytes through a crossed domain of m members)
        cands: list[tuple[str, float, float, Callable[[int], float]]] = [
            (x[0], x[1], x[2], _flat(x[3]))
            for x in _protocols("ring", "nvlink", gen, 1, steps * a, vol / dev, vol, size, n)
        ]
        effs = [self.nvls_efficiency(h) for h in by_host]
        if kind is CollectiveKind.ALL_REDUCE and all(effs):
            cands.append(("nvls", NVLS_LATENCY_US * 1e-6, size / (dev * min(effs)), lambda m: m * size))
        caps = self.caps_bytes

        def alone(c: tuple[str, float, float, Callable[[int], float]]) -> float:
            # the crossed uplinks with the bytes each really carries (NVLS: its members' S each)
            ups_t = max((x / caps[r] for r, x in self._up_loads(by_host, ups, c[3])), default=0.0)
            return c[1] + slow * max(c[2], ups_t)

        algo, lat, own, through = min(cands, key=alone)
        return Plan(algo, lat, (Stage(own, name, tuple(self._up_loads(by_host, ups, through))),), slow)

    def _across_nvlink(
        self,
        kind: CollectiveKind,
        by_host: Mapping[int, list[int]],
        dom_level: int,
        lca: int,
        ups: Sequence[tuple[int, int]],
        n: int,
        size: float,
        slow: float,
        rf: float,
        a_inter: float,
    ) -> Plan:
        """A group over several NVLink domains (the domains of `dom_level`; NCCL's nodes): inside each, NVLink at
        each device's rate (at most the domain's tier); between them the NICs of all the domain's hosts together,
        as between hosts: a ring (`vol` out of each domain), NCCL's tree (S out of each of 2 domains, 2 S with
        more; the chain inside at the devices' rate), NVLSTree where every host has NVLink SHARP (NVLS inside each
        domain), and with SHARP on every level crossed NVLS or CollNet (S out of each domain). All-to-all: direct,
        m (n-m)/n S out of a domain of m members. A host's NICs carry its share of its domain's bytes."""
        col = self.cols[dom_level]
        doms: dict[int, list[int]] = {}
        for h, v in by_host.items():
            doms.setdefault(col[v[0]], []).append(h)
        c = len(doms)
        dev = min(min(self.dev_link[h], self.tier_min[dom_level]) for h in by_host) * rf * 1e9
        # a host's NICs, each flow at most at the slowest tier crossed (as between hosts)
        cap_tier = self.tier_min[lca]
        nic = {
            h: min(self.nic_gbps[h] * min(len(v), self.nics[h]), min(self.dev_link[h], cap_tier) * len(v))
            * rf
            * 1e9
            for h, v in by_host.items()
        }
        dom_nic = {k: sum(nic[h] for h in hs) for k, hs in doms.items()}
        members = {k: sum(len(by_host[h]) for h in hs) for k, hs in doms.items()}
        a_dom = self.latency[dom_level]
        a = max(a_inter, a_dom) * 1e-6
        vol, steps = _volume(kind, n, size)
        caps = self.caps_bytes
        cross = [(li, k) for li, k in ups if li >= dom_level]
        min_up = min((caps[self.base[li] + 2 * k] for li, k in cross), default=math.inf)
        net_name, dom_name = self.names[self.base[0]], self.tier_min_name[dom_level]

        def nic_loads(out: Mapping[int, float]) -> list[tuple[int, float]]:
            # each host's NICs carry its share of its domain's bytes out (and in)
            loads: list[tuple[int, float]] = []
            for k, hs in doms.items():
                for h in hs:
                    x = out[k] * nic[h] / dom_nic[k] if dom_nic[k] > 0 else 0.0
                    r = self.base[0] + 2 * h
                    loads += [(r, x), (r + 1, x)]
            return loads

        if kind is CollectiveKind.ALL_TO_ALL:
            out = {k: m * size * (n - m) / n for k, m in members.items()}
            own = vol / dev
            net = max(out[k] / dom_nic[k] for k in doms)
            loads = nic_loads(out) + self._up_loads(
                by_host, cross, lambda m: m * size * (n - m) / n, dom_level
            )
            name = dom_name if own >= net else net_name
            return Plan("direct", (n - 1) * a, (Stage(max(own, net), name, tuple(loads)),), slow)
        # (algorithm, latency s, seconds on the devices' own links, bytes out of every domain)
        cands: list[tuple[str, float, float, float]] = [("ring", steps * a, vol / dev, vol)]
        if kind is CollectiveKind.ALL_REDUCE:
            gmax = max(members.values())
            cands += self._domain_reduces(by_host, c, gmax, dom_level, lca, size, dev, a_inter, a_dom)
        gen = self._gen_of(by_host)
        every = [
            x
            for cand in cands
            for x in _protocols(cand[0], "net", gen, c, cand[1], cand[2], cand[3], size, n)
        ]
        min_dom = min(dom_nic.values())

        def alone(x: tuple[str, float, float, float]) -> float:
            return x[1] + slow * max(x[2], x[3] / min_dom, x[3] / min_up)

        algo, lat, own, out_bytes = min(every, key=alone)
        net = max(out_bytes / min_dom, out_bytes / min_up)
        loads = nic_loads(dict.fromkeys(doms, out_bytes)) + self._up_loads(
            by_host, cross, _flat(out_bytes), dom_level
        )
        name = dom_name if own >= net else net_name
        return Plan(algo, lat, (Stage(max(own, net), name, tuple(loads)),), slow)

    def _domain_reduces(
        self,
        by_host: Mapping[int, list[int]],
        c: int,
        gmax: int,
        dom_level: int,
        lca: int,
        size: float,
        dev: float,
        a_inter: float,
        a_dom: float,
    ) -> list[tuple[str, float, float, float]]:
        """The all-reduce candidates across `c` NVLink domains beside the ring (`_across_nvlink`): NCCL's tree,
        NVLSTree, and SHARP where every level above the domains reduces; as (algorithm, latency s, seconds on the
        devices' own links, bytes out of every domain)."""
        effs = [self.nvls_efficiency(h) for h in by_host]
        lat = 2 * (math.ceil(math.log2(c)) * a_inter + (gmax - 1) * a_dom) * 1e-6
        cands = [
            (
                "tree",
                lat,
                2 * size / (dev * TREE_EFFICIENCY),
                (size if c == 2 else 2 * size) / TREE_EFFICIENCY,
            )
        ]
        if all(effs):
            lat = (NVLS_LATENCY_US + 2 * math.ceil(math.log2(c)) * a_inter) * 1e-6
            cands.append(("nvlstree", lat, size / (dev * min(effs)), size if c == 2 else 2 * size))
        levels = self.topology.levels
        if all(levels[li].sharp for li in range(dom_level + 1, lca + 1)):
            eff = min(effs) if all(effs) else 0.0
            cands.append(_sharp(eff, gmax, a_inter, a_dom, dev, size, self._hopper_or_later(by_host)))
        return cands

    def _hopper_or_later(self, hosts: Iterable[int]) -> bool:
        return all(self.generation(h) in ("hopper", "blackwell") for h in hosts)

    def _tree_cap(self, by_host: Mapping[int, list[int]], h: int) -> float:
        """Algorithm bytes/s of NCCL's tree channels: half the bus cap of one channel per NIC used (inf: no cap)."""
        t = self.topology
        caps = set()
        for host in by_host:
            nt = t.host_types[host]
            if id(nt) not in self._tree_rows:
                self._tree_rows[id(nt)] = tree_channel_gbps(nt.kind, t)
            row = self._tree_rows[id(nt)]
            if row is None:
                return math.inf
            caps.add(row[1 if h == 2 else 2])
        channels = min(min(len(v), self.nics[host]) for host, v in by_host.items())
        return channels * min(caps) / 2 * 1e9

    def generation(self, host: int) -> str | None:
        """The NCCL generation of `host`'s devices (`placement.cost.compute.nccl_generation`)."""
        nt = self.topology.host_types[host]
        if id(nt) not in self._gens:
            self._gens[id(nt)] = nccl_generation(nt.kind, self.topology)
        return self._gens[id(nt)]

    def nvls_efficiency(self, host: int) -> float:
        """NVLS's share of a device's NVLink bandwidth on `host` (0: no NVLink SHARP). NVSwitch hosts of
        Hopper and Blackwell (HGX H100/H200/B200, GB200 trays) have it: no matrix and no mesh (the level-0 tier
        is the switch), or NVSwitch codes (`placement.cost.host_rings.nvswitch`)."""
        nt = self.topology.host_types[host]
        hit = self._nvls_eff.get(id(nt))
        if hit is not None:
            return hit
        eff = NVLS_EFFICIENCY.get(self.generation(host) or "", 0.0)
        if not eff or nt.mesh_link_gbps or (nt.matrix is not None and not nvswitch(nt.matrix)):
            eff = 0.0
        out = eff * (NVLS_CHANNELS - 1) / NVLS_CHANNELS
        self._nvls_eff[id(nt)] = out
        return out

    def plan_edge(self, a: int, b: int, size: float) -> Plan:
        """One point-to-point transfer of `size` bytes from device `a` to device `b`."""
        t = self.topology
        if size <= 0 or a == b:
            return NO_PLAN
        ds = self.state.device_slowdown
        slow = max(ds.get(a, 1.0), ds.get(b, 1.0)) if ds else 1.0
        ha, hb = self.host_of[a], self.host_of[b]
        if t.pair_paths is not None or ha == hb:
            p = pair_path(t, self.state, a, b)
            return Plan("p2p", p.latency_us * 1e-6, (Stage(size / (p.bandwidth_gbps * 1e9), p.tier),))
        rp = t.rail_policy
        same_rail = rp is None or t.devices[a].rail == t.devices[b].rail
        key = (ha, hb, size, slow, same_rail)
        hit = self._edges.get(key)
        if hit is not None:
            return hit
        cols, base = self.cols, self.base
        b0 = base[0]
        loads = [(b0 + 2 * ha, size), (b0 + 2 * hb + 1, size)]
        lca = 1
        while lca < len(cols) - 1 and cols[lca][a] != cols[lca][b]:
            loads += [(base[lca] + 2 * cols[lca][a], size), (base[lca] + 2 * cols[lca][b] + 1, size)]
            lca += 1
        lat = self.latency[lca]
        rf = 1.0
        if rp is not None and not same_rail:
            rf, lat = rp.bandwidth_factor, lat + rp.extra_latency_us
        if self.nvl_inside[lca]:
            # inside one NVLink domain: over NVLink at the device's rate, the NICs stay free
            loads = [x for x in loads if len(base) > 1 and x[0] >= base[1]]
            flow = min(self.dev_link[ha], self.dev_link[hb], self.tier_min[lca]) * rf * 1e9
            name = self.tier_min_name[lca]
        else:
            flow = (
                min(
                    self.nic_gbps[ha],
                    self.nic_gbps[hb],
                    self.dev_link[ha],
                    self.dev_link[hb],
                    self.tier_min[lca],
                )
                * rf
                * 1e9
            )
            name = (
                self.tier_min_name[lca]
                if self.tier_min[lca] < min(self.nic_gbps[ha], self.nic_gbps[hb])
                else self.names[b0]
            )
        plan = Plan("p2p", lat * 1e-6, (Stage(size / flow, name, tuple(loads)),), slow)
        if len(self._edges) >= _PLAN_CACHE_LIMIT:
            self._edges.clear()
        self._edges[key] = plan
        return plan


_PLAN_CACHE_LIMIT = 65_536
"""Plans one fabric keeps per kind of cache; past it the cache starts again (memory stays bounded)."""
_FABRICS_PER_TOPOLOGY = 8
"""Fabrics kept per topology, one per health (slowdowns) seen; the oldest goes first."""

_fabrics: weakref.WeakKeyDictionary[Topology, dict[Hashable, Fabric]] = weakref.WeakKeyDictionary()
_fabrics_lock = threading.Lock()


def fabric_for(topology: Topology, state: ClusterState) -> Fabric:
    """The `Fabric` of `topology` under the slowdowns of `state`, built once and reused (with its plan caches)
    while the topology object lives: the O(cluster) part of pricing (per-level device counts, NIC and uplink
    capacities) is paid once per cluster and health, not per evaluation. A state that only differs in occupancy
    reuses the same fabric; the answer is the one a fresh `Fabric(topology, state)` gives."""
    key = health_key(state)
    with _fabrics_lock:
        per = _fabrics.get(topology)
        if per is None:
            per = {}
            _fabrics[topology] = per
        fabric = per.get(key)
        if fabric is not None:
            return fabric
    fabric = Fabric(topology, state)
    with _fabrics_lock:
        per = _fabrics.setdefault(topology, {})
        if key not in per and len(per) >= _FABRICS_PER_TOPOLOGY:
            del per[next(iter(per))]
        return per.setdefault(key, fabric)


def phase_seconds(fabric: Fabric, plans: Sequence[Plan]) -> list[tuple[float, str]]:
    """Seconds of each of `plans` run at the same time, sharing links in proportion to their bytes, and the tier
    that bounds each (see the module docstring). A plan object listed k times is k concurrent operations."""
    uses: dict[int, tuple[Plan, int]] = {}
    for p in plans:
        u = uses.get(id(p))
        uses[id(p)] = (p, 1 if u is None else u[1] + 1)
    total: dict[int, float] = {}
    for p, k in uses.values():
        for s in p.stages:
            for r, x in s.loads:
                total[r] = total.get(r, 0.0) + x * k
    caps, names = fabric.caps, fabric.names
    done: dict[int, tuple[float, str]] = {}
    for p, _ in uses.values():
        secs, worst, tier = 0.0, -1.0, ""
        for s in p.stages:
            best, name = s.local, s.local_tier
            for r, _x in s.loads:
                v = total[r] / (caps[r] * 1e9)
                if v > best:
                    best, name = v, names[r]
            secs += best
            if best > worst:
                worst, tier = best, name
        done[id(p)] = (p.latency + p.slowdown * secs, tier)
    return [done[id(p)] for p in plans]


def max_min_phase_seconds(
    fabric: Fabric, plans: Sequence[Plan], background: Background | None = None
) -> list[tuple[float, str]]:
    """Seconds of each of `plans` run at the same time, sharing NICs and uplinks max-min fairly, and the tier
    that bounds each longest (module doc, **Sharing**): how `placement.cost.step` prices a round."""
    return share_phase(fabric, plans, background)[0]


@dataclass(frozen=True)
class Background:
    """Other jobs' traffic on the fabric as the sharing rule sees it: per shared link (resource index of a
    `Fabric`), the flows that run beside a phase, each a `Plan` of one stage whose own rate is the flow's average
    rate (bytes/s) and whose bytes outlast any phase (`placement.cost.shared` builds it). A phase is priced with
    the flows on the links it loads added as operations that never finish (`share_phase`)."""

    flows: Mapping[int, tuple[Plan, ...]]

    def touching(self, plans: Sequence[Plan], caps: Sequence[float]) -> list[Plan]:
        """The background flows that can bind `plans`, each once, in a fixed order: those on a link `plans` load
        that can fill up. A link cannot fill when what the flows on it can ask is below its capacity (`caps`,
        bytes/s): each background flow its average rate, each operation at most its rate alone there (bytes over
        its stage's time alone); its background flows then run at their rates beside the phase and change no
        time, so they are left out (the same times, a much smaller filling)."""
        flows = self.flows
        peak: dict[int, float] = {}
        for p in plans:
            for st in p.stages:
                touched = [(r, x) for r, x in st.loads if r in flows]
                if not touched:
                    continue
                alone = max(st.local, max(x / caps[r] for r, x in st.loads))
                for r, x in touched:
                    peak[r] = peak.get(r, 0.0) + (x / alone if alone > 0 else caps[r])
        full = set()
        for r, demand in peak.items():
            asked = (
                demand
                + sum(x for f in flows[r] for rr, x in f.stages[0].loads if rr == r) / BACKGROUND_SECONDS
            )
            if asked >= caps[r] * (1.0 - 1e-9):
                full.add(r)
        seen: dict[int, Plan] = {}
        if full:
            for p in plans:
                for st in p.stages:
                    for r, _x in st.loads:
                        if r in full:
                            for f in flows[r]:
                                seen.setdefault(id(f), f)
        return list(seen.values())


BACKGROUND_SECONDS = 1e6
"""Seconds of traffic a background flow carries (`Background`): longer than any phase, so it never finishes."""


def background_flow(links: Sequence[tuple[int, float]], name: str) -> Plan:
    """A background flow at `links` (resource, bytes/s) each: one operation whose own rate is its heaviest link's
    rate, so max-min gives it at most its average rate and shares what it leaves."""
    t = BACKGROUND_SECONDS
    return Plan("background", 0.0, (Stage(t, name, tuple((r, x * t) for r, x in links)),))


def share_phase(
    fabric: Fabric, plans: Sequence[Plan], background: Background | None = None
) -> tuple[list[tuple[float, str]], list[int]]:
    """`max_min_phase_seconds` and each plan's component: the index of the first plan it shares a link with,
    directly or through others (its own index when it shares none). A component's times depend only on its
    plans in their order and on whether every plan of the list loads both directions of its links alike, so a
    caller that changes some plans reprices only the components they meet before and after the change
    (`placement.solve.incremental`) and gets the same floats. A plan listed k times is k operations. The result
    is kept on the fabric per list of plan objects (the fabric's plans are cached, so the mappings a call scores
    share whole phases); callers read it, never change it.

    `background`: other jobs' flows (`Background`); those on links the plans load join the filling as operations
    that take at most their average rate and never finish, and only the plans' own times are returned."""
    extra = background.touching(plans, fabric.caps_bytes) if background is not None else []
    if extra:
        n = len(plans)
        times, comp = share_phase(fabric, [*plans, *extra])
        return times[:n], comp[:n]
    key = tuple(map(id, plans))
    hit = fabric._shares.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], plans, strict=True)):
        return hit[1]
    res = _share_phase(fabric, plans)
    if len(fabric._shares) >= _SHARE_CACHE_LIMIT:
        fabric._shares.clear()
    fabric._shares[key] = (tuple(plans), res)
    return res


_SHARE_CACHE_LIMIT = 4096
"""Phases `share_phase` keeps per fabric (each holds its plans: a bound on memory for large jobs' searches)."""


def _share_phase(fabric: Fabric, plans: Sequence[Plan]) -> tuple[list[tuple[float, str]], list[int]]:
    """`share_phase` computed."""
    n = len(plans)
    caps, names = fabric.caps_bytes, fabric.names
    # both directions of a link have one capacity: when every plan loads them alike (rings, trees, all-to-all),
    # the outbound one stands for both
    side = 2
    for p in plans:
        for st in p.stages:
            if _shape(st)[1][2] is None:
                side = 1
    parent = list(range(n))
    first: dict[int, int] = {}
    users: dict[int, int] = {}
    joined = False
    for i, p in enumerate(plans):
        stages = p.stages
        if len(stages) == 1:
            links = _shape(stages[0])[1][side] or ()
        else:
            links = tuple({r: 0.0 for st in stages for r, _w in _shape(st)[1][side] or ()}.items())
        for r, _w in links:
            j = first.get(r)
            if j is None:
                first[r] = i
                users[r] = 1
                continue
            users[r] += 1
            a = i
            while parent[a] != a:
                parent[a] = a = parent[parent[a]]
            while parent[j] != j:
                parent[j] = j = parent[parent[j]]
            if a != j:
                parent[max(a, j)] = min(a, j)
                joined = True
    out: list[tuple[float, str]] = [(0.0, "")] * n
    comp = list(range(n))
    members: dict[int, list[int]] = {}
    if joined:
        for i in range(n):
            a = i
            while parent[a] != a:
                a = parent[a]
            comp[i] = a
            if a != i:  # the root is its component's first plan: members stay in the plans' order
                members.setdefault(a, [a]).append(i)
    for i, p in enumerate(plans):
        if comp[i] != i or i in members:
            continue
        # alone on its shared links: its plan's time, stage by stage the slower of its own links and its loads
        secs, worst, tier = 0.0, -1.0, ""
        for st in p.stages:
            best, name = st.local, st.local_tier
            for r, x in st.loads:
                v = x / caps[r]
                if v > best:
                    best, name = v, names[r]
            secs += best
            if best > worst:
                worst, tier = best, name
        out[i] = (p.latency + p.slowdown * secs, tier)
    for ids in members.values():
        for i, t in zip(ids, _fill(caps, names, [plans[i] for i in ids], side, users), strict=True):
            out[i] = t
    return out, comp


_Loads = tuple[tuple[int, float], ...]
_Shape = tuple[float, tuple[_Loads | None, ...]]


def _shape(st: Stage) -> _Shape:
    """A stage's loads as sharing reads them, computed once per stage: the heaviest load, every link with its
    load over the heaviest, and the outbound links alone when every link's two directions carry the same bytes."""
    sh = st.shape
    if sh is not None:
        return sh
    agg: dict[int, float] = {}
    for r, x in st.loads:
        agg[r] = agg.get(r, 0.0) + x
    m = max(agg.values(), default=0.0)
    pairs = tuple((r, x / m if m > 0 else 0.0) for r, x in agg.items())
    half = None
    if all(agg.get(r ^ 1) == x for r, x in agg.items()):
        half = tuple((r, w) for r, w in pairs if not r & 1)
    sh = (m, (None, pairs, half))  # by `side`: 1 both directions, 2 outbound links for both
    object.__setattr__(st, "shape", sh)
    return sh


def _fill(
    caps: Sequence[float], names: Sequence[str], plans: Sequence[Plan], side: int, users: Mapping[int, int]
) -> list[tuple[float, str]]:
    """Max-min fair sharing of the links of operations that share some (module doc, **Sharing**): progressive
    filling again at every completion, an operation's rate counted in bytes per second on its heaviest link.
    `side`: 2 when outbound links stand for both directions (`share_phase`), 1 when not; `users`: operations
    per link. Background flows (`Background`) take part but never finish: the filling ends with the others."""
    return _Filling(caps, names, plans, side, users).run()


class _Filling:
    """The state of one progressive filling (`_fill`): per operation its stage, bytes left on the heaviest link of
    that stage, its own rate and its shared links; and the tier that held it back longest."""

    def __init__(
        self,
        caps: Sequence[float],
        names: Sequence[str],
        plans: Sequence[Plan],
        side: int,
        users: Mapping[int, int],
    ) -> None:
        k = len(plans)
        self.caps, self.names, self.plans, self.side, self.users = caps, names, plans, side, users
        self.stage = [0] * k
        self.rem = [0.0] * k  # bytes left on the heaviest link of the current stage
        self.heavy = [0.0] * k  # that link's bytes
        self.own = [math.inf] * k  # the rate (bytes/s on the heaviest link) its own and unshared links allow
        self.own_name = [""] * k
        self.shared: list[list[tuple[int, float]]] = [[] for _ in range(k)]  # (link, load / heaviest)
        self.finish = [0.0] * k
        # the tier that held each operation back longest: the first one and its seconds, others when it changes
        self.tier = [""] * k
        self.tier_s = [0.0] * k
        self.spent: dict[int, dict[str, float]] = {}

    def start(self, j: int) -> None:
        """Set up operation j's current stage."""
        caps, names, users = self.caps, self.names, self.users
        p = self.plans[j]
        st, s = p.stages[self.stage[j]], p.slowdown
        sh = _shape(st)
        m = sh[0] * s
        local = st.local * s
        rate, why = (m / local if local > 0 else math.inf), st.local_tier
        mine: list[tuple[int, float]] = []
        if m > 0:
            for r, w in sh[1][self.side] or ():
                if w <= 0:
                    continue
                if users[r] > 1:
                    mine.append((r, w))
                elif caps[r] / w < rate:
                    rate, why = caps[r] / w, names[r]
        elif local > 0:
            m, rate = local, 1.0  # no bytes on shared links: its own links' time, as one unit at 1 per second
        self.heavy[j], self.rem[j], self.own[j], self.own_name[j], self.shared[j] = m, m, rate, why, mine

    def rates(self, active: Sequence[int]) -> tuple[list[float], list[str]]:
        """Every active operation's rate now and the link or tier that stops it: all rise at one level, and the
        next to stop are those at the smallest own rate or link fill (all of them at once when several tie)."""
        k = len(self.plans)
        own, shared, heavy = self.own, self.shared, self.heavy
        lam = [0.0] * k
        why = [""] * k
        link_of: dict[int, list[float]] = {}  # link -> [capacity left, weight of its unfrozen operations]
        on: dict[int, list[int]] = {}
        owns: list[tuple[float, int]] = []
        for j in active:
            if not shared[j]:  # nothing on a shared link (now): its own rate
                lam[j], why[j] = (own[j] if heavy[j] > 0 else math.inf), self.own_name[j]
                continue
            owns.append((own[j], j))
            for r, w in shared[j]:
                a = link_of.get(r)
                if a is not None:
                    a[1] += w
                    on[r].append(j)
                else:
                    link_of[r], on[r] = [self.caps[r], w], [j]
        owns.sort()
        oi, n_free, n_owns = 0, len(owns), len(owns)
        while n_free:
            while lam[owns[oi][1]] != 0.0:
                oi += 1
            level = owns[oi][0]
            links: list[int] = []
            for r, a in link_of.items():
                v = a[0] / a[1]
                if v <= level:
                    if v < level:
                        level, links = v, [r]
                    else:
                        links.append(r)
            if level == math.inf:
                raise ValueError("an operation of the phase has no link and no time of its own to bound it")
            frozen: list[int] = []
            for r in links:
                del link_of[r]
                name = self.names[r]
                for j in on[r]:
                    if lam[j] == 0.0:
                        lam[j], why[j] = level, name
                        frozen.append(j)
            while oi < n_owns and owns[oi][0] <= level:
                j = owns[oi][1]
                if lam[j] == 0.0:
                    lam[j], why[j] = level, self.own_name[j]
                    frozen.append(j)
                oi += 1
            n_free -= len(frozen)
            for j in frozen:
                for r, w in shared[j]:
                    a = link_of.get(r)
                    if a is not None:
                        d = a[1] - w
                        if d > 1e-12:
                            v = a[0] - level * w
                            a[0], a[1] = (v if v > 0.0 else 0.0), d
                        else:  # no unfrozen operation left on it
                            del link_of[r]
        return lam, why

    def run(self) -> list[tuple[float, str]]:
        """Fill, run time to the next completion, fill again, until every operation but the background is done."""
        plans, rem, heavy, tier, tier_s, spent = (
            self.plans,
            self.rem,
            self.heavy,
            self.tier,
            self.tier_s,
            self.spent,
        )
        active = [j for j, p in enumerate(plans) if p.stages]
        for j in active:
            self.start(j)
        # background flows (`Background`) never finish: the filling ends when the phase's own operations have
        real = sum(1 for j in active if plans[j].algorithm != "background")
        now = 0.0
        while real:
            lam, why = self.rates(active)
            dt = math.inf
            for j in active:
                if lam[j] > 0.0:
                    t = rem[j] / lam[j]
                    if t < dt:
                        dt = t
            if dt == math.inf:
                raise ValueError("an operation of the phase can make no progress (a link of capacity 0)")
            now += dt
            still = []
            for j in active:
                name = why[j]
                sp = spent.get(j)
                if sp is not None:
                    sp[name] = sp.get(name, 0.0) + dt
                elif name == tier[j] or not tier_s[j]:
                    tier[j], tier_s[j] = name, tier_s[j] + dt
                else:
                    spent[j] = {tier[j]: tier_s[j], name: dt}
                left_j = rem[j] - lam[j] * dt if lam[j] != math.inf else 0.0
                if left_j > 1e-12 * heavy[j]:
                    rem[j] = left_j
                    still.append(j)
                    continue
                self.stage[j] += 1
                if self.stage[j] < len(plans[j].stages):
                    self.start(j)
                    still.append(j)
                else:
                    self.finish[j] = now
                    if plans[j].algorithm != "background":
                        real -= 1
            active = still
        out = []
        for j, p in enumerate(plans):
            sp = spent.get(j)
            out.append((p.latency + self.finish[j], max(sp, key=sp.__getitem__) if sp else tier[j]))
        return out
