"""Input of a repair: the running job's devices (`resolve_current`), drain and spare selectors, how much may move
(`RepairBudget`), and the state the repair places on (drained devices unusable, the job's current devices its own).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from placement.errors import InputError, Problem
from placement.model.job import Job
from placement.model.state import ClusterState
from placement.model.topology import Topology

__all__ = ["RepairBudget", "repair_state", "resolve_current", "resolve_selectors"]


@dataclasses.dataclass(frozen=True)
class RepairBudget:
    """How much may move. `move_cost_s`: seconds one moved rank costs (its checkpoint restore); with
    `horizon_steps` (the steps the job still runs) it picks the recommended answer: the least
    ``horizon_steps * step_seconds + move_cost_s * moved_ranks``."""

    max_moved_ranks: int | None = None
    max_moved_hosts: int | None = None
    move_cost_s: float = 0.0
    horizon_steps: float = 1000.0


def resolve_current(
    topology: Topology,
    job: Job,
    current: Sequence[str | int] | Mapping[str | int, str | int],
    field_name: str = "current",
) -> list[int]:
    """Device index per rank from device ids (or indices): a list in rank order or a {rank: device} map.
    Raises `InputError` naming each bad entry (unknown rank, unknown device, a device given twice, a rank
    without a device)."""
    problems: list[Problem] = []
    out = [-1] * job.ranks
    items: list[tuple[str, object, str | int]] = []
    if isinstance(current, Mapping):
        for k, v in current.items():
            items.append((f"{field_name}.{k}" if field_name else str(k), k, v))
    else:
        if len(current) != job.ranks:
            problems.append(Problem(field_name, f"{len(current)} devices for a job of {job.ranks} ranks"))
        items = [(f"{field_name}[{r}]", r, v) for r, v in enumerate(current)]
    owner: dict[int, int] = {}
    for path, key, dev in items:
        try:
            r = int(key)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            problems.append(Problem(path, f"unknown rank {key!r}; ranks are 0..{job.ranks - 1}"))
            continue
        if not 0 <= r < job.ranks:
            problems.append(
                Problem(path, f"unknown rank {r}; the job {job.name!r} has ranks 0..{job.ranks - 1}")
            )
            continue
        d = (
            dev
            if isinstance(dev, int) and 0 <= dev < topology.num_devices
            else (topology.device_index(dev) if isinstance(dev, str) else None)
        )
        if d is None:
            problems.append(
                Problem(
                    path,
                    f"device {dev!r} is not in the cluster; devices are named host/gpuK, "
                    f"e.g. {topology.devices[0].id}",
                )
            )
            continue
        if d in owner:
            problems.append(
                Problem(
                    path, f"device {topology.devices[d].id} also holds rank {owner[d]}; one rank per device"
                )
            )
            continue
        owner[d] = r
        out[r] = d
    if isinstance(current, Mapping):
        missing = [r for r in range(job.ranks) if out[r] < 0 and all(str(r) != str(k) for k in current)]
        if missing:
            shown = ", ".join(map(str, missing[:8])) + (
                f", ... ({len(missing)} in all)" if len(missing) > 8 else ""
            )
            problems.append(
                Problem(field_name, f"ranks {shown} have no device; every rank of the running job needs one")
            )
    if problems:
        raise InputError(f"job {job.name}", problems)
    return out


def resolve_selectors(
    topology: Topology, selectors: Sequence[str], what: str
) -> tuple[set[int], list[Problem]]:
    out: set[int] = set()
    problems: list[Problem] = []
    for i, sel in enumerate(selectors):
        try:
            out.update(topology.resolve(sel))
        except KeyError as e:
            problems.append(Problem(f"{what}[{i}]", str(e.args[0])))
    return out, problems


def repair_state(
    topology: Topology, state: ClusterState, job: Job, current: Sequence[int], drained: set[int]
) -> tuple[ClusterState, list[Problem]]:
    """The state the repair places on: drained devices unusable (as failed), the job's current devices its own."""
    problems: list[Problem] = []
    occupied = dict(state.occupied)
    for r, d in enumerate(current):
        other = occupied.get(d)
        if other is not None and other != job.name:
            problems.append(
                Problem(
                    f"current[{r}]",
                    f"device {topology.devices[d].id} is occupied by job {other!r}; "
                    f"a running job's devices are free or labelled {job.name!r}",
                )
            )
        occupied[d] = job.name
    return dataclasses.replace(state, occupied=occupied, failed=frozenset(state.failed | drained)), problems
