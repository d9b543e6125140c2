"""Per-request cluster state: occupancy, failed and degraded devices and links, and fault domains.

Built against one `Topology`; device, link and domain references are resolved to indices once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from placement.model.job import Job
from placement.model.topology import Topology

__all__ = ["ClusterState", "DeviceStatus", "LinkLoad", "RunningJob", "Uplink"]


class DeviceStatus(Enum):
    """What one device can do for a new job."""

    FREE = "free"
    """Healthy and not used: can be assigned."""
    OCCUPIED = "occupied"
    """Running another job: cannot be assigned (unless it is the job being evaluated)."""
    FAILED = "failed"
    """Broken: can never be assigned."""
    DEGRADED = "degraded"
    """Usable, but every transfer touching it is slower by its slowdown factor."""


@dataclass(frozen=True)
class Uplink:
    """The link from a domain (level, index) to its parent: the path every transfer leaving the domain takes."""

    level: int
    domain: int


@dataclass(frozen=True)
class LinkLoad:
    """Traffic measured on an uplink (switch counters), GB/s per direction: `up` leaves the domain, `down` enters."""

    up: float = 0.0
    down: float = 0.0


@dataclass(frozen=True, eq=False)
class RunningJob:
    """A job already running on the fabric (background traffic): its shape and the device of each of its ranks
    (rank r on `devices[r]`). The step model derives its flows on host NICs and uplinks from them
    (`placement.cost.shared`)."""

    job_id: str
    job: Job
    devices: tuple[int, ...]

    @property
    def gpus(self) -> int:
        return len(self.devices)


@dataclass(frozen=True, eq=False)
class ClusterState:
    """Occupancy and health of one topology at one moment. Indices refer to `Topology.devices` and domains.

    - `occupied`: device -> job id; `failed`: devices that cannot run anything;
    - `device_slowdown`: degraded devices (factor >= 1 divides the bandwidth of every transfer they take part in);
    - `failed_pairs` / `pair_slowdown`: intra-node device-to-device links (index pairs, smaller first);
    - `failed_uplinks` / `uplink_slowdown`: a domain's link to its parent (a node's NIC path, a leaf's uplinks);
    - `fault_domains`: kind (power, rack, pdu...) -> domain name -> devices; any grouping, not only the tree;
    - `background`: the running jobs whose shape is known (their traffic shares the fabric with a new job);
    - `link_load`: measured traffic per uplink and direction (GB/s), beside or instead of `background`.
    """

    occupied: Mapping[int, str] = field(default_factory=dict)
    failed: frozenset[int] = frozenset()
    device_slowdown: Mapping[int, float] = field(default_factory=dict)
    failed_pairs: frozenset[tuple[int, int]] = frozenset()
    pair_slowdown: Mapping[tuple[int, int], float] = field(default_factory=dict)
    failed_uplinks: frozenset[Uplink] = frozenset()
    uplink_slowdown: Mapping[Uplink, float] = field(default_factory=dict)
    fault_domains: Mapping[str, Mapping[str, frozenset[int]]] = field(default_factory=dict)
    background: tuple[RunningJob, ...] = ()
    link_load: Mapping[Uplink, LinkLoad] = field(default_factory=dict)

    @staticmethod
    def empty() -> ClusterState:
        return ClusterState()

    def status(self, device: int) -> DeviceStatus:
        if device in self.failed:
            return DeviceStatus.FAILED
        if device in self.occupied:
            return DeviceStatus.OCCUPIED
        if self.device_slowdown.get(device, 1.0) > 1.0:
            return DeviceStatus.DEGRADED
        return DeviceStatus.FREE

    def usable(self, device: int, job_id: str | None = None) -> bool:
        """Free or degraded, or occupied by `job_id` itself (evaluating a job where it runs now)."""
        if device in self.failed:
            return False
        occ = self.occupied.get(device)
        return occ is None or (job_id is not None and occ == job_id)

    def fault_domain_of(self, kind: str, topology: Topology) -> dict[int, str]:
        """device -> fault domain name for one kind. A kind may also be a level name of the topology."""
        if kind in self.fault_domains:
            out: dict[int, str] = {}
            for name, devs in self.fault_domains[kind].items():
                for d in devs:
                    out[d] = name
            return out
        li = topology.level_index(kind)  # raises KeyError naming the levels
        names = topology.domain_names[li]
        col = topology.domain_column(li)
        return {d: names[col[d]] for d in range(topology.num_devices)}

    def fault_kinds(self, topology: Topology) -> tuple[str, ...]:
        return tuple(sorted(set(self.fault_domains) | set(topology.level_names)))

    @property
    def has_link_faults(self) -> bool:
        return bool(self.failed_pairs or self.pair_slowdown or self.failed_uplinks or self.uplink_slowdown)

    def running(self) -> tuple[RunningJob, ...]:
        """The `background` jobs that still hold devices in `occupied`: a job taken out of the occupancy (freed by
        a preemption, ended) carries no traffic."""
        if not self.background:
            return ()
        held = set(self.occupied.values())
        return tuple(r for r in self.background if r.job_id in held)

    @property
    def has_background(self) -> bool:
        """Other jobs' traffic is on the fabric (running jobs with a shape, or measured link loads)."""
        return bool(self.link_load) or bool(self.running())
