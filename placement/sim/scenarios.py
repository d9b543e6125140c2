"""Synthetic but realistic scenarios for benchmarks, tests and what-if studies, all from fixed seeds.

Fat-trees with oversubscribed upper tiers, NVL72 racks, rail-optimized fabrics, non-uniform nodes,
occupancy generators that leave whole-node or partial-node fragments, and explicit twins of structured jobs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from placement.model.devices import HostSpec, NodeType
from placement.model.job import CollectiveKind, Edge, Job, ModelShape, ParallelSpec
from placement.model.links import Level, RailPolicy, Tier
from placement.model.presets import dense_parameters, structured_job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import job_traffic

__all__ = [
    "OCCUPANCY_MODES",
    "dgx1_node",
    "explicit_twin",
    "fat_tree",
    "megatron_job",
    "nvl72",
    "occupy",
    "occupy_mixed_random",
    "p2p_ring_job",
    "rail_optimized",
]

OCCUPANCY_MODES: tuple[str, ...] = ("whole", "partial", "mixed", "mixed-random")
"""The `occupy` modes (see its docstring)."""

# DGX-1 (V100) hybrid cube-mesh, as `nvidia-smi topo -m` prints it (shared/data dgx1_v100_8gpu_4nic).
DGX1_MATRIX = (
    "X NV1 NV1 NV2 NV2 SYS SYS SYS",
    "NV1 X NV2 NV1 SYS NV2 SYS SYS",
    "NV1 NV2 X NV2 SYS SYS NV1 SYS",
    "NV2 NV1 NV2 X SYS SYS SYS NV1",
    "NV2 SYS SYS SYS X NV1 NV1 NV2",
    "SYS NV2 SYS SYS NV1 X NV2 NV1",
    "SYS SYS NV1 SYS NV1 NV2 X NV2",
    "SYS SYS SYS NV1 NV2 NV1 NV2 X",
)
# 8x A100 PCIe with NVLink bridges in pairs (nccl-tests issue 178).
A100_PCIE_PAIRS = (
    "X NV12 NODE NODE SYS SYS SYS SYS",
    "NV12 X NODE NODE SYS SYS SYS SYS",
    "NODE NODE X NV12 SYS SYS SYS SYS",
    "NODE NODE NV12 X SYS SYS SYS SYS",
    "SYS SYS SYS SYS X NV12 NODE NODE",
    "SYS SYS SYS SYS NV12 X NODE NODE",
    "SYS SYS SYS SYS NODE NODE X NV12",
    "SYS SYS SYS SYS NODE NODE NV12 X",
)


def _matrix(rows: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(r.split()) for r in rows)


NODE_TIER = Tier(450.0, 2.0)  # NVLink 4 through NVSwitch, per GPU and direction
LEAF_TIER = Tier(50.0, 5.0)  # one 400G NIC per GPU
SPINE_TIER = Tier(25.0, 7.0)  # 2:1 oversubscribed
CORE_TIER = Tier(12.5, 10.0)  # 2:1 again


NODE_TIER = Tier(450.0, 2.0)  # NVLink 4 through NVSwitch, per GPU and direction
LEAF_TIER = Tier(50.0, 5.0)  # one 400G NIC per GPU
SPINE_TIER = Tier(25.0, 7.0)  # 2:1 oversubscribed
CORE_TIER = Tier(12.5, 10.0)  # 2:1 again


def fat_tree(
    gpus: int,
    *,
    gpus_per_node: int = 8,
    nodes_per_leaf: int = 16,
    leaves_per_spine: int = 8,
    kind: str = "H100",
    node_tier: Tier = NODE_TIER,
    leaf_tier: Tier = LEAF_TIER,
    spine_tier: Tier = SPINE_TIER,
    core_tier: Tier = CORE_TIER,
    matrix: Sequence[str] | None = None,
) -> Topology:
    """A three-tier fat-tree: node < leaf < spine < core, upper tiers oversubscribed 2:1 per tier by default."""
    nodes = gpus // gpus_per_node
    nt = NodeType(f"{kind}x{gpus_per_node}", gpus_per_node, kind, _matrix(matrix) if matrix else None)
    w = len(str(nodes))
    hosts = []
    for h in range(nodes):
        leaf = h // nodes_per_leaf
        spine = leaf // leaves_per_spine
        hosts.append(
            HostSpec(
                f"n{h:0{w}d}", {"leaf": f"leaf{leaf:03d}", "spine": f"spine{spine:02d}", "core": "core"}, nt
            )
        )
    levels = [
        Level("node", node_tier),
        Level("leaf", leaf_tier),
        Level("spine", spine_tier),
        Level("core", core_tier),
    ]
    return Topology.build(f"fat-tree-{gpus}", levels, hosts)


def nvl72(racks: int, *, kind: str = "GB200") -> Topology:
    """GB200 NVL72 racks: 18 trays x 4 GPUs share one NVLink domain per rack; racks meet on a leaf/spine."""
    nt = NodeType("gb200-tray", 4, kind)
    hosts = []
    for r in range(racks):
        for t in range(18):
            hosts.append(
                HostSpec(
                    f"r{r:02d}t{t:02d}",
                    {"nvl_domain": f"nvl{r:02d}", "leaf": f"leaf{r // 8:02d}", "spine": "spine"},
                    nt,
                )
            )
    levels = [
        Level("node", Tier(900.0, 1.5)),
        Level("nvl_domain", Tier(900.0, 2.0), nvlink=True),
        Level("leaf", Tier(50.0, 5.0)),
        Level("spine", Tier(25.0, 8.0)),
    ]
    return Topology.build(f"nvl72-x{racks}", levels, hosts)


def rail_optimized(nodes: int, *, nodes_per_group: int = 32) -> Topology:
    """Rail-optimized fabric: GPU k of every node on rail switch k; crossing rails takes an extra hop."""
    nt = NodeType("hgx-h100", 8, "H100", rails=tuple(range(8)))
    hosts = [
        HostSpec(f"h{h:04d}", {"rail_group": f"rg{h // nodes_per_group:02d}", "spine": "spine"}, nt)
        for h in range(nodes)
    ]
    levels = [
        Level("node", Tier(450.0, 2.0)),
        Level("rail_group", Tier(50.0, 4.0)),
        Level("spine", Tier(25.0, 8.0)),
    ]
    return Topology.build(
        f"rail-opt-{nodes * 8}",
        levels,
        hosts,
        rail_policy=RailPolicy(extra_latency_us=3.0, bandwidth_factor=0.5),
    )


def dgx1_node(nodes: int = 2, matrix: Sequence[str] = DGX1_MATRIX, kind: str = "V100") -> Topology:
    """Hosts with a non-uniform intra-node matrix (DGX-1 cube mesh by default) on one leaf."""
    nt = NodeType("dgx1", 8, kind, _matrix(matrix))
    hosts = [HostSpec(f"dgx{h:02d}", {"leaf": "leaf"}, nt) for h in range(nodes)]
    return Topology.build("dgx1", [Level("node", Tier(50.0, 2.0)), Level("leaf", Tier(12.5, 5.0))], hosts)


def occupy(topology: Topology, fraction: float, *, seed: int = 0, mode: str = "whole") -> ClusterState:
    """Occupy about `fraction` of the devices with other jobs.

    ``whole``: whole nodes, scattered; ``partial``: every node keeps a random fragment busy (0..n-1 devices),
    the way a cluster running many small jobs looks; ``mixed``: half of each; ``mixed-random``: see
    `occupy_mixed_random` (busy nodes alternate between all busy and 1..n-1 busy, few nodes stay wholly free).
    """
    if mode not in OCCUPANCY_MODES:
        raise ValueError(f"occupy: mode {mode!r} is not one of {list(OCCUPANCY_MODES)}")
    if mode == "mixed-random":
        return occupy_mixed_random(topology, fraction, seed=seed)
    rng = random.Random(seed)
    occupied: dict[int, str] = {}
    target = round(fraction * topology.num_devices)
    hosts = list(range(len(topology.host_names)))
    rng.shuffle(hosts)
    per_host = topology.devices_in_domain[0]
    job = 0
    if mode in ("whole", "mixed"):
        goal = target if mode == "whole" else target // 2
        for h in hosts:
            if len(occupied) >= goal:
                break
            job += 1
            for d in per_host[h]:
                occupied[d] = f"other-{job}"
    if mode in ("partial", "mixed"):
        free_hosts = [h for h in hosts if per_host[h][0] not in occupied]
        while len(occupied) < target and free_hosts:
            h = rng.choice(free_hosts)
            devs = [d for d in per_host[h] if d not in occupied]
            k = min(
                len(devs) - 1 if len(devs) > 1 else 1,
                rng.randint(1, max(1, len(per_host[h]) - 1)),
                target - len(occupied),
            )
            job += 1
            for d in rng.sample(devs, k):
                occupied[d] = f"other-{job}"
            if len([d for d in per_host[h] if d not in occupied]) <= 1:
                free_hosts.remove(h)
    return ClusterState(occupied=occupied)


def megatron_job(
    name: str,
    *,
    tp: int,
    pp: int,
    dp: int,
    cp: int = 1,
    ep: int = 1,
    kind: str | None = "H100",
    parameters: float | None = None,
    hidden: int = 8192,
    layers: int = 80,
    seq_len: int = 4096,
    micro_batches: int = 16,
    require_tp_node: bool = False,
    exposure: dict[str, float] | None = None,
) -> Job:
    """A Megatron-style structured job; the parameter count defaults to ``12 h^2 L`` (`dense_parameters`)."""

    params = parameters if parameters is not None else dense_parameters(hidden, layers)
    par = ParallelSpec(tp=tp, cp=cp, ep=ep, dp=dp, pp=pp)
    model = ModelShape(
        parameters=params,
        hidden=hidden,
        layers=layers,
        seq_len=seq_len,
        micro_batch=1,
        micro_batches=micro_batches,
        bytes_per_element=2,
        experts=max(ep, 1) * 8 if ep > 1 else 0,
        top_k=2 if ep > 1 else 0,
    )
    rule = "require" if require_tp_node else "prefer"
    return structured_job(name, par, model, kind=kind, tp_rule=rule, exposure=exposure)


def occupy_mixed_random(topology: Topology, fraction: float, *, seed: int = 0) -> ClusterState:
    """Occupy exactly ``round(fraction * devices)`` devices, node by node in a random order (issue 8's case).

    Each busy node holds either all of its devices busy or a uniformly random 1 to n-1 of its n devices busy
    (its lowest-numbered devices are not favoured: the busy ones are a random sample), half and half: the
    kinds alternate along the shuffled node order, so whole and partial nodes differ by at most one. The last
    node is cut to hit the target; above about 3/4, where one pass over the nodes cannot reach it, the rest
    are taken at random from the free devices left. Nodes are filled until the target is met, so at 60% of an 8-GPU cluster
    about a fifth of the nodes stay wholly free (4,096 GPUs: about 100 of 512 nodes). Deterministic by `seed`.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"occupy_mixed_random: fraction {fraction} is not within [0, 1]")
    rng = random.Random(seed)
    target = round(fraction * topology.num_devices)
    hosts = list(range(len(topology.host_names)))
    rng.shuffle(hosts)
    per_host = topology.devices_in_domain[0]
    occupied: dict[int, str] = {}
    whole_next = rng.random() < 0.5
    for job, h in enumerate(hosts, start=1):
        left = target - len(occupied)
        if left <= 0:
            break
        devs = per_host[h]
        n = len(devs)
        k = n if whole_next or n == 1 else rng.randint(1, n - 1)
        whole_next = not whole_next
        for d in rng.sample(devs, min(k, left)):
            occupied[d] = f"other-{job}"
    left = target - len(occupied)
    if left > 0:  # above about 3/4 one pass cannot reach the target: top up at random
        rest = [d for d in range(topology.num_devices) if d not in occupied]
        for d in rng.sample(rest, left):
            occupied[d] = "other-topup"
    return ClusterState(occupied=occupied)


def explicit_twin(job: Job, *, name: str | None = None) -> Job:
    """The explicit form of a structured job: exactly the groups and edges `job_traffic(job)` derives.

    Same ranks, kind and constraints; the exposure is already folded into each group and edge. Evaluating
    either form on any mapping gives the same cost, which is what the structured and generic solver paths are
    compared on.
    """

    t = job_traffic(job)
    return Job(
        name or job.name,
        job.ranks,
        job.device_kind,
        groups=t.groups,
        edges=t.edges,
        constraints=job.constraints,
    )


def p2p_ring_job(job: Job, *, name: str | None = None) -> Job:
    """An explicit job of point-to-point edges only: each group becomes the ring NCCL runs for it.

    Every member of a group of n sends to the next (in member order, wrapping around) the bytes a ring
    collective moves per member: ``2(n-1)/n * S`` for an all-reduce, ``(n-1)/n * S`` otherwise (Patarasuk &
    Yuan 2009; NCCL's PERFORMANCE.md), with the group's count and exposed fraction; the job's point-to-point
    edges (pipeline stages) are kept. Same bytes on the wire per step as `job`; the cost differs because the
    model prices a collective once on its slowest path but prices every edge separately (issue 8's
    "p2p-only explicit job").
    """

    t = job_traffic(job)
    edges: list[Edge] = []
    for g in t.groups:
        n = len(g.members)
        if n < 2:
            continue
        factor = 2.0 * (n - 1) / n if g.kind is CollectiveKind.ALL_REDUCE else (n - 1) / n
        for i, src in enumerate(g.members):
            edges.append(Edge(g.label, src, g.members[(i + 1) % n], factor * g.bytes, g.count, g.exposed))
    edges.extend(t.edges)
    return Job(name or job.name, job.ranks, job.device_kind, edges=tuple(edges), constraints=job.constraints)
