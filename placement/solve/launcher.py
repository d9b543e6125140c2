"""The job option ``launcher: torchrun`` in the solver: torchrun numbers ranks host by host, so every host's ranks
must be one contiguous block. Solved after the free search, as a sequence of (host, devices) blocks.

Candidates are the free answer and every mapping found on the way (baselines, multilevel candidates), each made
contiguous (hosts ordered by their smallest rank, each keeping its devices), then a first-improvement search over
block moves (swap or move a host in the sequence, trade a host for an unused one, swap two ranks' devices inside a
host when the host's links differ), scored by the evaluator. The budget is a number of scorings (deterministic)
and the request's wall-clock deadline. The free answer's cost is reported next to the constrained one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from placement.cost.report import CostReport
from placement.errors import InfeasibleError, InternalError
from placement.model.job import host_blocks
from placement.model.topology import Topology
from placement.solve.prepared import PreparedRequest
from placement.solve.types import report_key

__all__ = ["contiguous", "is_contiguous"]

Block = tuple[int, tuple[int, ...]]  # (host index, devices in rank order)
Score = Callable[[list[int] | None], CostReport | None]


def is_contiguous(topology: Topology, mapping: Sequence[int]) -> bool:
    """Every host's ranks form one contiguous block (what torchrun can launch)."""
    try:
        host_blocks([topology.devices[d].host for d in mapping])
    except ValueError:
        return False
    return True


def _blocks(topology: Topology, mapping: Sequence[int], key: str) -> list[Block]:
    """The hosts of `mapping` with their devices (in the order of the ranks holding them), ordered by the
    smallest (``min``) or mean (``mean``) rank each host holds."""
    by: dict[int, list[tuple[int, int]]] = {}
    for r, d in enumerate(mapping):
        by.setdefault(topology.devices[d].host_index, []).append((r, d))

    def order(h: int) -> float:
        rs = [r for r, _ in by[h]]
        return float(rs[0]) if key == "min" else sum(rs) / len(rs)

    return [(h, tuple(d for _, d in by[h])) for h in sorted(by, key=lambda h: (order(h), h))]


def _mapping(blocks: Sequence[Block]) -> list[int]:
    return [d for _, devs in blocks for d in devs]


def _key(rep: CostReport) -> tuple[float, float, float]:
    return report_key(rep)


def _neighbours(request: PreparedRequest, blocks: list[Block]) -> list[list[Block]]:
    """Block moves, cheapest kinds first."""
    topo = request.topology
    out: list[list[Block]] = []
    n = len(blocks)
    for i in range(n):
        for j in range(i + 1, n):
            b = list(blocks)
            b[i], b[j] = b[j], b[i]
            out.append(b)
    for i in range(n):
        for j in range(n):
            if abs(i - j) > 1:
                b = list(blocks)
                b.insert(j, b.pop(i))
                out.append(b)
    used = {h for h, _ in blocks}
    free: dict[int, list[int]] = {}
    for d in request.candidates:
        h = topo.devices[d].host_index
        if h not in used:
            free.setdefault(h, []).append(d)
    pinned = set(request.pinned.values())
    for i, (_, devs) in enumerate(blocks):
        if any(d in pinned for d in devs):
            continue
        for h2, ds in free.items():
            if len(ds) >= len(devs):
                b = list(blocks)
                b[i] = (h2, tuple(ds[: len(devs)]))
                out.append(b)
    for i, (h, devs) in enumerate(blocks):
        nt = topo.host_types[h]
        if nt.matrix is None and topo.rail_policy is None:
            continue
        for a in range(len(devs)):
            for c in range(a + 1, len(devs)):
                swapped = list(devs)
                swapped[a], swapped[c] = swapped[c], swapped[a]
                b = list(blocks)
                b[i] = (h, tuple(swapped))
                out.append(b)
    return out


def contiguous(
    request: PreparedRequest, score: Score, free: tuple[list[int], CostReport], others: Sequence[list[int]]
) -> tuple[list[int], CostReport, dict[str, float | int | str]]:
    """The best contiguous mapping found from `free` (the unconstrained answer) and `others`, and the stats that
    compare it with the free answer. Raises `InfeasibleError` when no candidate is valid."""
    topo = request.topology
    opts = request.options
    budget = max(50, int(100 * opts.time_limit_s))
    spent = 0
    t_end = None if opts.deterministic else max(request.deadline, time.perf_counter() + 0.3)
    best: tuple[list[Block], CostReport] | None = None
    seen: set[tuple[int, ...]] = set()

    def consider(blocks: list[Block]) -> bool:
        nonlocal best, spent
        m = _mapping(blocks)
        if tuple(m) in seen:
            return False
        seen.add(tuple(m))
        spent += 1
        rep = score(m)
        if rep is not None and (best is None or _key(rep) < _key(best[1])):
            best = (blocks, rep)
            return True
        return False

    def out_of_budget() -> bool:
        return spent >= budget or (t_end is not None and time.perf_counter() > t_end) or request.stopped()

    for m in [free[0], *others]:
        for key in ("min", "mean"):
            consider(_blocks(topo, m, key))
    if best is None:
        raise InfeasibleError(
            [
                "launcher torchrun: each host's ranks must be one contiguous block, and no such mapping of the candidates "
                "meets the job's other rules (required levels, pins); relax them or use launcher: any "
                "(mpirun --rankfile / srun --distribution=arbitrary with placement bind)"
            ]
        )
    improved = True
    while improved and not out_of_budget():
        improved = False
        for nb in _neighbours(request, best[0]):
            if out_of_budget():
                break
            if consider(nb):
                improved = True
                break
    mapping, rep = _mapping(best[0]), best[1]
    if not is_contiguous(topo, mapping):
        raise InternalError("the torchrun search returned a mapping whose hosts' ranks are not contiguous")
    f = free[1]
    stats: dict[str, float | int | str] = {
        "launcher": "torchrun",
        "launcher_free_step_seconds": f.step_seconds,
        "launcher_free_comm_seconds": f.comm_seconds,
        "launcher_step_ratio": rep.step_seconds / f.step_seconds if f.step_seconds > 0 else 1.0,
        "launcher_free_was_contiguous": int(is_contiguous(topo, free[0])),
        "launcher_scorings": spent,
    }
    return mapping, rep, stats
