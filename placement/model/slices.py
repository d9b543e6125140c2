"""Balanced slices and segments: the sizes they imply and the input rules they must meet.

The mapping rules themselves are checked by `placement.model.validate`; the solver's side is
`placement.decide.balance` (balanced slices) and `placement.solve.units` (segments as required units).
"""

from __future__ import annotations

from collections import Counter

from placement.errors import Problem
from placement.model.job import Job
from placement.model.topology import Topology

__all__ = ["balance_counts", "host_size", "segment_ranks", "slice_problems"]


def host_size(topology: Topology, job: Job) -> set[int]:
    """The distinct numbers of devices of the job's kind per host (hosts without one left out)."""
    col = topology.domain_column(0)
    per = Counter(
        col[d.index] for d in topology.devices if job.device_kind is None or d.kind == job.device_kind
    )
    return set(per.values())


def segment_ranks(topology: Topology, job: Job) -> int | None:
    """Ranks per segment (`nodes` x devices per host of the job's kind); None without a segment rule or when the
    hosts differ in size (`slice_problems` reports it)."""
    seg = job.constraints.segment
    if seg is None:
        return None
    sizes = host_size(topology, job)
    if len(sizes) != 1:
        return None
    return seg.nodes * next(iter(sizes))


def balance_counts(total: int, slice_ranks: int, domains: int) -> tuple[int, int]:
    """(q, r): `domains` domains holding `total` ranks in slices of `slice_ranks`, balanced: r of them hold q + 1
    slices, the others q."""
    slices = total // slice_ranks
    return slices // domains, slices % domains


def slice_problems(topology: Topology, job: Job) -> list[Problem]:
    """Input errors of the balance and segment rules: unknown levels, sizes that do not divide the job."""
    out: list[Problem] = []
    levels = list(topology.level_names)
    bal, seg = job.constraints.balance, job.constraints.segment
    if bal is not None:
        if bal.level not in levels:
            out.append(
                Problem("constraints.balance.level", f"unknown level {bal.level!r}; levels are {levels}")
            )
        if bal.slice < 1:
            out.append(Problem("constraints.balance.slice", f"must be >= 1 rank, got {bal.slice}"))
        elif job.ranks % bal.slice:
            out.append(
                Problem(
                    "constraints.balance.slice",
                    f"slices of {bal.slice} ranks do not divide the job's {job.ranks} ranks",
                )
            )
    if seg is not None:
        if seg.level not in levels:
            out.append(
                Problem("constraints.segment.level", f"unknown level {seg.level!r}; levels are {levels}")
            )
        elif seg.level == levels[0] and seg.nodes > 1:
            out.append(
                Problem(
                    "constraints.segment.level",
                    f"a segment of {seg.nodes} nodes cannot lie inside one {levels[0]}; name a level above it",
                )
            )
        if seg.nodes < 1:
            out.append(Problem("constraints.segment.nodes", f"must be >= 1 node, got {seg.nodes}"))
        else:
            sizes = sorted(host_size(topology, job))
            kind = f" {job.device_kind}" if job.device_kind else ""
            if len(sizes) != 1:
                out.append(
                    Problem(
                        "constraints.segment.nodes",
                        f"hosts hold {sizes} devices{kind} each; a segment of nodes needs one host size",
                    )
                )
            elif job.ranks % (seg.nodes * sizes[0]):
                size = seg.nodes * sizes[0]
                out.append(
                    Problem(
                        "constraints.segment.nodes",
                        f"segments of {seg.nodes} node(s) x {sizes[0]} devices = {size} ranks do not divide the "
                        f"job's {job.ranks} ranks",
                    )
                )
    return out
