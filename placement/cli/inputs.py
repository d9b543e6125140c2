"""The files a command reads (a cluster with its state, a job) and where its output goes (a file, or stdout), the
same for every command.
"""

from __future__ import annotations

import sys
from pathlib import Path

from placement.cli.errors import err, escape
from placement.io.native import load_cluster, load_job, load_state
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["load_cluster_state", "load_inputs", "write_output"]


def write_output(text: str, dest: Path | None) -> None:
    """`text` to stdout, or to `dest` (saying so on stderr)."""
    if dest is None:
        sys.stdout.write(text)
    else:
        dest.write_text(text)
        err.print(f"wrote {escape(str(dest))}", highlight=False, soft_wrap=True)


def load_cluster_state(cluster: Path, state: Path | None) -> tuple[Topology, ClusterState]:
    """The cluster file and the state on it: the state file, else the cluster's own static state, else empty."""
    topo, static = load_cluster(cluster)
    return topo, load_state(state, topo, static) if state else (static or ClusterState())


def load_inputs(cluster: Path, job: Path, state: Path | None) -> tuple[Topology, ClusterState, Job]:
    """The cluster, its state and the job of `evaluate`, `place` and `repair`."""
    topo, st = load_cluster_state(cluster, state)
    return topo, st, load_job(job)
