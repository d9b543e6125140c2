"""Non-tree device graphs: a networkx graph of devices and switches, a distance matrix, or a QAPLIB instance.

Each becomes a `Topology` with all-pairs paths (`Topology.from_pair_paths`) that the cost model and solver use.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from placement.errors import InputError, Problem, Problems
from placement.io.text import read_text
from placement.model.job import Edge, Job
from placement.model.links import Tier
from placement.model.topology import Topology

__all__ = [
    "QapInstance",
    "qap_job_and_topology",
    "read_qaplib",
    "topology_from_distances",
    "topology_from_graph",
]


def topology_from_graph(
    graph: nx.Graph, *, name: str = "graph", kind: str = "gpu", source: str = "<graph>"
) -> Topology:
    """Devices are the nodes with ``device=True`` (all nodes when none is marked); every edge carries
    ``bandwidth_gbps`` and ``latency_us``. A pair's path is the lowest-latency route; its bandwidth is that
    route's narrowest link. Switches are plain nodes without ``device``."""
    ps = Problems(source)
    for a, b, data in graph.edges(data=True):
        bw = data.get("bandwidth_gbps")
        if not isinstance(bw, int | float) or bw <= 0:
            ps.add(f"edges[{a}-{b}].bandwidth_gbps", f"must be a number > 0, got {bw!r}")
        lat = data.get("latency_us", 0.0)
        if not isinstance(lat, int | float) or lat < 0:
            ps.add(f"edges[{a}-{b}].latency_us", f"must be a number >= 0, got {lat!r}")
    ps.raise_if_any()
    devices = [n for n, d in graph.nodes(data=True) if d.get("device")] or list(graph.nodes)
    index = {n: i for i, n in enumerate(devices)}
    paths: list[list[Tier]] = [[Tier(1e12, 0.0)] * len(devices) for _ in devices]
    for src in devices:
        _lengths, routes = nx.single_source_dijkstra(
            graph, src, weight=lambda u, v, d: d.get("latency_us", 0.0) + 1e-9
        )
        for dst in devices:
            if dst == src:
                continue
            if dst not in routes:
                raise InputError(
                    source,
                    [
                        Problem(
                            f"nodes.{src}",
                            f"device {src!r} cannot reach device {dst!r}; the graph must be connected",
                        )
                    ],
                )
            route = routes[dst]
            bw = min(graph.edges[u, v]["bandwidth_gbps"] for u, v in itertools.pairwise(route))
            lat = sum(graph.edges[u, v].get("latency_us", 0.0) for u, v in itertools.pairwise(route))
            paths[index[src]][index[dst]] = Tier(float(bw), float(lat))
    return Topology.from_pair_paths(
        name, paths, kind=kind, device_names=[str(d).replace("/", "_") for d in devices], source=source
    )


def topology_from_distances(
    distance: Sequence[Sequence[float]],
    *,
    name: str = "distance",
    kind: str = "gpu",
    source: str = "<distance>",
) -> Topology:
    """A distance matrix as seconds per byte (x 1e-9): moving S bytes from a to b costs ``S * distance[a][b]``
    nanoseconds. A zero distance between different devices costs nothing (an effectively infinite link)."""
    ps = Problems(source)
    n = len(distance)
    for i, row in enumerate(distance):
        if len(row) != n:
            ps.add(f"distance[{i}]", f"has {len(row)} entries for {n} devices; the matrix must be square")
        for j, v in enumerate(row):
            if v < 0:
                ps.add(f"distance[{i}][{j}]", f"must be >= 0, got {v:g}")
    ps.raise_if_any()
    paths = [[Tier(1.0 / v if v > 0 else 1e300, 0.0) for v in row] for row in distance]
    return Topology.from_pair_paths(name, paths, kind=kind, source=source)


@dataclass(frozen=True)
class QapInstance:
    """A QAPLIB instance: cost(p) = sum_ij A[i][j] * B[p[i]][p[j]]; the best-known value and permutation."""

    name: str
    n: int
    a: tuple[tuple[int, ...], ...]
    b: tuple[tuple[int, ...], ...]
    best_known: int | None
    solution: tuple[int, ...] | None  # 0-based, facility i -> location solution[i]


def read_qaplib(dat: str | Path, sln: str | Path | None = None) -> QapInstance:
    """Read a QAPLIB ``.dat`` (n, A, B; line breaks not significant) and optionally its ``.sln``. Some ``.sln``
    files store the inverse permutation; the one that reproduces the stated value is kept."""
    p = Path(dat)
    tokens = read_text(p).split()
    try:
        nums = [int(t) for t in tokens]
    except ValueError:
        raise InputError(str(dat), [Problem("", "a QAPLIB .dat file holds integers only")]) from None
    if not nums or nums[0] < 1 or len(nums) < 1 + 2 * nums[0] ** 2:
        have = max(0, len(nums) - 1)
        n0 = nums[0] if nums else 0
        raise InputError(
            str(dat), [Problem("", f"n = {n0} needs 2*n*n = {2 * n0 * n0} matrix entries, found {have}")]
        )
    n = nums[0]
    flat = nums[1 : 1 + 2 * n * n]
    a = tuple(tuple(flat[i * n : (i + 1) * n]) for i in range(n))
    b = tuple(tuple(flat[n * n + i * n : n * n + (i + 1) * n]) for i in range(n))
    best = perm = None
    if sln is not None:
        st = read_text(sln).split()
        sn, sval = int(st[0]), int(st[1])
        raw = [int(x) - 1 for x in st[2 : 2 + sn]]
        inv = [0] * sn
        for i, k in enumerate(raw):
            inv[k] = i
        best = sval
        perm = tuple(raw)
        if qap_cost(a, b, raw) != sval and qap_cost(a, b, inv) == sval:
            perm = tuple(inv)
    return QapInstance(p.stem, n, a, b, best, perm)


def qap_cost(a: Sequence[Sequence[int]], b: Sequence[Sequence[int]], perm: Sequence[int]) -> int:
    n = len(a)
    return sum(a[i][j] * b[perm[i]][perm[j]] for i in range(n) for j in range(n))


def qap_job_and_topology(inst: QapInstance) -> tuple[Job, Topology]:
    """The instance as a placement problem: ranks exchange A[i][j] bytes, B is the device distance matrix.

    The objective equals the QAP cost exactly (as seconds x 1e9). Instances with a non-zero diagonal in both
    matrices (bur26*) carry per-rank unary costs that a traffic model has no place for; they are refused.
    """
    if any(inst.a[i][i] for i in range(inst.n)) and any(inst.b[i][i] for i in range(inst.n)):
        raise InputError(
            inst.name,
            [Problem("A, B", "both diagonals are non-zero: unary (rank, device) costs are not traffic")],
        )
    edges = tuple(
        Edge("qap", i, j, float(inst.a[i][j]), 1.0)
        for i in range(inst.n)
        for j in range(inst.n)
        if i != j and inst.a[i][j]
    )
    job = Job(inst.name, inst.n, None, edges=edges)
    topo = topology_from_distances([[float(x) for x in row] for row in inst.b], name=inst.name)
    return job, topo
