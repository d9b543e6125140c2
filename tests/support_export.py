"""Shared by the export tests: the seats of the issue's case (a job on node02 and node07, with each socket's
CPUs), export options naming a result path, and a two-host cluster whose CPU/NUMA affinity is partly known."""

from __future__ import annotations

from placement.io.export import ExportOptions, Seat
from placement.io.native import cluster_from_dict
from placement.model.topology import Topology

S0, S1 = "0-47,96-143", "48-95,144-191"
# the case: node02 has GPUs 0, 4, 5, 6 free; rank 1 (local rank 1) needs GPU 4, on the other socket
SEATS = [
    Seat(0, "node02", 0, "H100", S0, 0),
    Seat(1, "node02", 4, "H100", S1, 1),
    Seat(2, "node02", 5, "H100", S1, 1),
    Seat(3, "node02", 6, "H100", S1, 1),
    Seat(4, "node07", 2, "H100", S0, 0),
    Seat(5, "node07", 3, "H100", S0, 0),
]
OPTS = ExportOptions(job="j", placement_path="/shared/result.json")


def affinity_topology() -> Topology:
    """Hosts a and b (leaves l1, l2) of 4 H100s each: gpu0-2 have CPUs and a NUMA node, gpu3 has neither."""
    doc = {
        "levels": [
            {"name": "node", "bandwidth_gbps": 450},
            {"name": "leaf", "bandwidth_gbps": 50},
            {"name": "spine", "bandwidth_gbps": 25},
        ],
        "node_types": [
            {
                "name": "t",
                "devices": 4,
                "kind": "H100",
                "cpu_affinity": ["0-3", "0-3", "4-7", None],
                "numa_affinity": [0, 0, 1, None],
            }
        ],
        "hosts": [
            {"name": "a", "node_type": "t", "domains": {"leaf": "l1"}},
            {"name": "b", "node_type": "t", "domains": {"leaf": "l2"}},
        ],
    }
    return cluster_from_dict(doc)[0]
