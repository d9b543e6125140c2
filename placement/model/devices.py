"""What a cluster is built of: device kinds (peak FLOP/s, memory; the built-in datasheet table), node types (a
kind of host: devices, matrix, rails, NICs), hosts as read from a file, and the devices of a built cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEVICE_KINDS", "Device", "DeviceKind", "HostSpec", "NodeType"]


@dataclass(frozen=True)
class DeviceKind:
    """An accelerator model: peak dense BF16/FP16 tensor TFLOP/s and device memory in GB (1e9 bytes)."""

    name: str
    tflops: float
    memory_gb: float


# Peak dense (no sparsity) BF16/FP16 tensor-core TFLOP/s and memory, from the vendors' datasheets:
# NVIDIA V100 SXM2 32 GB, A100 SXM 80 GB, H100 SXM, H200 SXM, HGX B200 (per GPU), GB200 NVL72 (per GPU:
# 180 PFLOP/s dense and 13.4 TB over 72 GPUs), L40S; AMD Instinct MI300X.
DEVICE_KINDS: Mapping[str, DeviceKind] = {
    k.name: k
    for k in (
        DeviceKind("V100", 125.0, 32.0),
        DeviceKind("A100", 312.0, 80.0),
        DeviceKind("H100", 989.0, 80.0),
        DeviceKind(
            "H800", 989.0, 80.0
        ),  # the H100 SXM's compute and memory, NVLink cut to 400 GB/s (8 links)
        DeviceKind("H200", 989.0, 141.0),
        DeviceKind("B200", 2250.0, 180.0),
        DeviceKind("GB200", 2500.0, 186.0),
        DeviceKind("MI300X", 1307.0, 192.0),
        DeviceKind("L40S", 362.0, 48.0),
    )
}


@dataclass(frozen=True)
class NodeType:
    """A kind of host: device count, device kind, optional intra-node code matrix and per-device rails.

    Step model v2 (`placement.cost.collectives`): the host's devices share `nics` NICs of `nic_gbps` GB/s each way
    (default: one NIC per device at the level-1 tier's bandwidth, what today's files mean). `mesh_link_gbps`
    marks a fully connected mesh without a switch (AMD XGMI): each device pair has its own link of that
    bandwidth, and the level-0 tier is the device's total.
    """

    name: str
    devices: int
    kind: str = "gpu"
    matrix: tuple[tuple[str, ...], ...] | None = None
    rails: tuple[int | None, ...] | None = None
    nics: int | None = None
    nic_gbps: float | None = None
    mesh_link_gbps: float | None = None
    cpu_affinity: tuple[str | None, ...] | None = None
    """Per device: the CPUs close to it (nvidia-smi's "CPU Affinity", e.g. ``0-47,96-143``); None: unknown."""
    numa_affinity: tuple[int | None, ...] | None = None
    """Per device: its NUMA node (nvidia-smi's "NUMA Affinity"); None: unknown."""


@dataclass(frozen=True)
class HostSpec:
    """A host as read from a file: its name, the domain it belongs to at each level above the host, its type."""

    name: str
    domains: Mapping[str, str]
    node_type: NodeType


@dataclass(frozen=True)
class Device:
    """One accelerator. `id` is stable and readable: ``host/gpuK``; `index` is its position in the cluster."""

    index: int
    id: str
    host: str
    host_index: int
    local_index: int
    kind: str
    rail: int | None
