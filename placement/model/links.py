"""Links of a cluster: a tier (bandwidth, latency), the named domain levels that each use one, the intra-node
matrix codes (NV#, PIX, PXB, PHB, NODE, SYS) and their tiers, and the rail policy of rail-optimized fabrics."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_INTRA_NODE_TIERS", "Level", "RailPolicy", "Tier", "intra_node_tier"]

_NV = re.compile(r"^NV(\d+)$")


@dataclass(frozen=True)
class Tier:
    """A link tier: unidirectional bandwidth in GB/s (1e9 bytes/s) and one-hop latency in microseconds."""

    bandwidth_gbps: float
    latency_us: float

    def scaled(self, slowdown: float) -> Tier:
        """The same tier with bandwidth divided by `slowdown` (>= 1 means slower)."""
        return Tier(self.bandwidth_gbps / slowdown, self.latency_us)


@dataclass(frozen=True)
class Level:
    """A named level of the domain tree (bottom up) and the tier used between its children.

    `oversubscription` (step model v2, `placement.cost.collectives`): the uplinks of each domain of this level carry
    1/ratio of what the devices under it could send at the next level's tier (1.0: non-blocking, the default).
    """

    name: str
    tier: Tier
    oversubscription: float = 1.0
    nvlink: bool = False
    """Each domain of this level is one NVLink domain across hosts (multi-node NVLink: a GB200 NVL72 rack, whose
    trays NCCL sees as one node): NVLS runs across its hosts when their devices have NVLink SHARP."""
    sharp: bool = False
    """The switches of this level reduce in the network (InfiniBand SHARP): NCCL's CollNet runs across hosts
    when every level up to the group's lowest common one has it."""


# Per-link and per-path defaults for intra-node matrix codes. NV# is # bonded NVLinks at 25 GB/s per link
# and direction (NVLink 2/3/4: V100, A100, H100 datasheets: 300/600/900 GB/s bidirectional over 6/12/18
# links). PCIe paths: PIX/PXB one or more PCIe switches (Gen4 x16 ~ 24 GB/s achievable), PHB through the host
# bridge, NODE across host bridges of one NUMA node, SYS across the socket interconnect (NCCL's topo.h
# ranks these the same way: PIX < PXB < PHB < SYS; QPI/UPI ~ 10 GB/s). Every value can be overridden per
# cluster in `intra_node_tiers`.
DEFAULT_INTRA_NODE_TIERS: Mapping[str, Tier] = {
    "NV": Tier(25.0, 1.0),  # per link; multiplied by the link count
    "PIX": Tier(24.0, 2.0),
    "PXB": Tier(22.0, 2.5),
    "PHB": Tier(16.0, 3.0),
    "NODE": Tier(14.0, 3.5),
    "SYS": Tier(10.0, 4.0),
}


def intra_node_tier(code: str, table: Mapping[str, Tier]) -> Tier:
    """Tier of one intra-node matrix code (``NV12``, ``PIX``, ``SOC``...) under a per-code table."""
    if code in table and code != "NV":
        return table[code]
    m = _NV.match(code)
    if m:
        per_link = table.get("NV", DEFAULT_INTRA_NODE_TIERS["NV"])
        return Tier(per_link.bandwidth_gbps * int(m.group(1)), per_link.latency_us)
    if code == "SOC":  # legacy name of SYS (nvidia-smi before 2017)
        return table.get("SYS", DEFAULT_INTRA_NODE_TIERS["SYS"])
    return table.get(code, DEFAULT_INTRA_NODE_TIERS[code])


@dataclass(frozen=True)
class RailPolicy:
    """Rail-optimized fabrics: cross-host traffic between different rails (NIC indices) takes an extra hop.

    It pays `extra_latency_us` more per transfer and runs at `bandwidth_factor` times the tier's bandwidth.
    """

    extra_latency_us: float = 2.0
    bandwidth_factor: float = 1.0
