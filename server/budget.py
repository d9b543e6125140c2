"""The cost budget of a request message, checked before it is converted: every repeated field, map and count
against `placement.limits.Limits`, by walking the message generically (new RPCs are covered without code).

Raises `placement.limits.LimitError` (RESOURCE_EXHAUSTED) or `InputError` (INVALID_ARGUMENT, values out of range).
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf.descriptor import FieldDescriptor

from placement.errors import InputError, Problem
from placement.limits import Limits, tick
from placement.v1 import placement_pb2 as pb

__all__ = ["check_message", "estimate_devices", "estimate_matrix_cells", "estimate_ranks"]

_REPEATED_LIMIT = {
    "pins": "max_pins",
    "fault_domains": "max_fault_domains",
    "members": "max_group_members",
    "mapping": "max_mapping_entries",
    "assignments": "max_mapping_entries",
    "hosts": "max_hosts",
    "generate": "max_hosts",
    "matrix": "max_matrix_side",
    "rails": "max_matrix_side",
    "groups": "max_groups",
    "edges": "max_groups",
    "devices": "max_state_entries",
    "occupied": "max_state_entries",
    "failed": "max_state_entries",
    "degraded": "max_state_entries",
    "links": "max_state_entries",
    "exclude": "max_state_entries",
}
"""Repeated and map fields by name -> the limit on their length; any other repeated field: max_state_entries."""

_COUNT_LIMIT = {
    "ranks": "max_ranks",
    "nodes": "max_hosts",
    "devices": "max_devices",
    "tp": "max_ranks",
    "cp": "max_ranks",
    "ep": "max_ranks",
    "dp": "max_ranks",
    "pp": "max_ranks",
}
"""Integer fields that size an allocation -> their limit (RESOURCE_EXHAUSTED above it)."""
_INT_TYPES = frozenset(
    {
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32,
        FieldDescriptor.CPPTYPE_UINT64,
    }
)
_INDEX_FIELDS = frozenset({"rank", "src", "dst", "job_index"})
"""Integer fields that index something -> at most max_index (INVALID_ARGUMENT above it)."""


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def check_message(msg: Any, limits: Limits) -> None:
    """Walk every set field of `msg` (iteratively, each message once): lengths and counts within `limits`,
    index values within max_index, then the cluster and job estimates. Linear in the message's size."""
    bad: list[Problem] = []
    stack: list[tuple[Any, str]] = [(msg, "")]
    seen = 0
    while stack:
        m, path = stack.pop()
        seen += 1
        tick(seen, "checking the request's size")
        if isinstance(m, pb.Cluster):
            _check_cluster(m, path or "cluster", limits)
        elif isinstance(m, pb.Job):
            limits.check("max_ranks", estimate_ranks(m), _join(path, "ranks (tp*cp*ep*dp*pp)"))
        for fd, value in m.ListFields():
            where = _join(path, fd.name)
            if fd.label == FieldDescriptor.LABEL_REPEATED:
                limits.check(_REPEATED_LIMIT.get(fd.name, "max_state_entries"), len(value), where)
                if fd.name == "members" and fd.cpp_type in _INT_TYPES:
                    big = next((v for v in value if v > limits.max_index), None)
                    if big is not None:
                        bad.append(
                            Problem(where, f"rank {big} is above the limit max_index={limits.max_index}")
                        )
                if fd.name == "pins":  # map<int32, string>
                    big = next((k for k in value if k > limits.max_index), None)
                    if big is not None:
                        bad.append(
                            Problem(
                                f"{where}.{big}",
                                f"rank {big} is above the limit max_index={limits.max_index}",
                            )
                        )
                if fd.message_type is not None and not fd.message_type.GetOptions().map_entry:
                    stack.extend((v, f"{where}[{i}]") for i, v in enumerate(value))
                elif (
                    fd.message_type is not None
                    and fd.message_type.fields_by_name["value"].message_type is not None
                ):
                    stack.extend((v, f"{where}.{k}") for k, v in value.items())
            elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                stack.append((value, where))
            elif isinstance(value, int) and not isinstance(value, bool):
                if fd.name in _COUNT_LIMIT:
                    limits.check(_COUNT_LIMIT[fd.name], value, where)
                elif fd.name in _INDEX_FIELDS and value > limits.max_index:
                    bad.append(Problem(where, f"{value} is above the limit max_index={limits.max_index}"))
            elif isinstance(value, float) and not math.isfinite(value):
                bad.append(Problem(where, f"must be a finite number, got {value}"))
            if len(bad) >= 100:
                break
    if bad:
        raise InputError("request", bad)


def _check_cluster(cluster: pb.Cluster, path: str, limits: Limits) -> None:
    hosts = len(cluster.hosts) + sum(max(g.nodes, 0) for g in cluster.generate)
    limits.check("max_hosts", hosts, f"{path} hosts (generate nodes + hosts)")
    limits.check("max_devices", estimate_devices(cluster), f"{path} devices")
    limits.check(
        "max_matrix_cells", estimate_matrix_cells(cluster), f"{path} intra-node matrix cells over all hosts"
    )
    for i, nt in enumerate(cluster.node_types):
        for j, row in enumerate(nt.matrix):
            if len(row) > 8 * limits.max_matrix_side:  # a row of codes: "NV18 " per cell, ~5 characters
                limits.check(
                    "max_matrix_side", len(row.split()), f"{path}.node_types[{i}].matrix[{j}] (columns)"
                )


def _type_sizes(cluster: pb.Cluster) -> dict[str, int]:
    return {
        nt.name: max(nt.devices if nt.HasField("devices") else len(nt.matrix), 1) for nt in cluster.node_types
    }


def estimate_devices(cluster: pb.Cluster) -> int:
    """An upper bound of the devices the cluster message describes (a server limit applies before building)."""
    sizes = _type_sizes(cluster)
    total = 0
    for g in cluster.generate:
        per = sizes.get(g.node_type, 1) if g.node_type else max(g.devices, 1)
        total += max(g.nodes, 0) * per
    for h in cluster.hosts:
        total += sizes.get(h.node_type, 1) if h.node_type else max(h.devices, 1)
    return total


def estimate_matrix_cells(cluster: pb.Cluster) -> int:
    """Matrix cells checked when building: per host with a matrix, devices squared."""
    sides = {nt.name: max(len(nt.matrix), nt.devices) for nt in cluster.node_types if nt.matrix}
    with_matrix = {name: n * n for name, n in sides.items()}
    cells = sum(
        max(g.nodes, 0) * with_matrix[g.node_type] for g in cluster.generate if g.node_type in with_matrix
    )
    return int(cells) + int(
        sum(with_matrix[h.node_type] for h in cluster.hosts if h.node_type in with_matrix)
    )


def estimate_ranks(job: pb.Job) -> int:
    """The ranks a job message asks for: the larger of `ranks` and tp*cp*ep*dp*pp."""
    p = job.parallel
    world = 1
    for dim in ("tp", "cp", "ep", "dp", "pp"):
        world *= max(int(getattr(p, dim)), 1)
    return max(job.ranks, world if job.HasField("parallel") else 1)
