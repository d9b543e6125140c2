"""Trace replay: read a GPU-cluster trace, simulate its jobs arriving, queueing, being placed by a policy and
running on a cluster, and report completion times, utilization and fragmentation per policy (docs/replay.md).
"""

from placement.sim.replay.shapes import ShapeRule, parse_shape_rule
from placement.sim.replay.sim import POLICIES, ReplayResult, SimConfig, simulate
from placement.sim.replay.traces import FORMATS, Trace, TraceJob, read_trace

__all__ = [
    "FORMATS",
    "POLICIES",
    "ReplayResult",
    "ShapeRule",
    "SimConfig",
    "Trace",
    "TraceJob",
    "parse_shape_rule",
    "read_trace",
    "simulate",
]
