"""`render_picture`, behind ``--picture out.svg`` of `placement place` and `placement evaluate`: the placement drawn
by `placement.io.export.picture`, its errors reported against the flag.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from placement.cost.report import CostReport
from placement.errors import InputError, Problem
from placement.io.export.picture import render
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["render_picture"]


def render_picture(
    topology: Topology,
    state: ClusterState,
    job: Job,
    mapping: Sequence[int],
    report: CostReport | None,
    path: str | Path,
    *,
    color_by: str | None = None,
    console: Console | None = None,
) -> Path:
    """Draw the placement to `path` (SVG, PNG or PDF by suffix); returns the path. With `console`, say so there.

    For `place` and `evaluate`: ``if picture: render_picture(topo, st, jb, mapping, report, picture)``. A bad
    suffix, colour option or mapping is an `InputError` whose source is ``--picture``.
    """
    try:
        written = render(topology, state, job, mapping, report, path, color_by=color_by)
    except InputError as e:
        raise InputError("--picture", [Problem(p.path, p.message) for p in e.problems]) from None
    if console is not None:
        console.print(f"wrote {written}", highlight=False, soft_wrap=True)
    return written
