"""The files a command reads (a cluster with its state, a job) and where its output goes (a file, or stdout), the
same for every command; how a launch file names this `placement` and the result it reads.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from placement.cli.errors import err, escape
from placement.io.native import load_cluster, load_job, load_state
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["launch_path", "load_cluster_state", "load_inputs", "own_command", "write_output"]


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


def own_command() -> str:
    """The command that runs this very `placement` (what launch files call, so that `placement bind` is the
    program that wrote them): the `placement` on PATH when that is this one, else its path (relative to the
    working directory when inside it), or ``PYTHON -m placement.cli.app`` when run as a module."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is None or not argv0.name.startswith("placement") or argv0.suffix or not argv0.is_file():
        return shlex.join([_near(Path(sys.executable)), "-m", "placement.cli.app"])
    found = shutil.which(argv0.name) if argv0.name == "placement" else None
    if found is not None and Path(found).resolve() == argv0.resolve():
        return "placement"
    return shlex.join([_near(argv0)])


def _near(path: Path) -> str:
    """`path` relative to the working directory when it lies inside it, else absolute."""
    full = path.absolute()
    try:
        return str(full.relative_to(Path.cwd()))
    except ValueError:
        return str(full)


def launch_path(path: Path) -> str:
    """Where a launch file finds `path`: relative to the working directory (the launch runs in the directory
    the export ran in: `sbatch`'s submit directory, torchrun's and mpirun's working directory)."""
    return os.path.relpath(path.absolute(), Path.cwd())
