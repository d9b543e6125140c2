"""Scotch static mapping (`scotch_gmap`) as a benchmark-only peer: a job's traffic graph onto the free devices.

Not a runtime dependency: it shells out to the Debian package `scotch` when present and says why not otherwise.

Method (Pellegrini, "Scotch and libScotch 7.0 User's Guide", sections on `gmap`, the `tleaf` tree-leaf
target and the `sub` sub-architecture meta-target):

- **Source graph** (`.grf`): one vertex per rank plus isolated padding vertices up to the number of free
  devices, so that Scotch's load balance puts one vertex per device and the ranks may cluster (the padding
  takes the devices the job does not need). Edge weights are bytes per step (bytes x count x exposed fraction)
  scaled to integers: a point-to-point edge as it is; a collective group of n members whose ring moves V bytes
  per member becomes a clique with 2V/(n-1) on each pair (the same total n*V), or its ring with V per hop.
- **Target**: ``sub`` of a ``tleaf`` that follows the cluster tree (devices per node, nodes per leaf, ...),
  keeping only the free devices. Link costs are inverse bandwidth ratios (fastest tier = 10). Scotch's
  tleaf prices two terminals by the lowest level's link (`archTleafDomDist`); the tree still shapes its
  recursive bipartitioning, which is where the locality comes from.
- **Answer**: the `.map` output, read back to devices and scored by `placement.cost.evaluate.evaluate(check=True)`.
  Two ranks on one device make the answer `invalid` (or, with `repair=True`, the extra ranks move to the
  nearest unused free device, lowest LCA level then lowest index, and the answer is marked `repaired`).

What to expect: Scotch minimizes the sum of traffic x distance by recursive bipartitioning with one vertex per
free device. It keeps groups inside nodes on an empty cluster, but on fragmented ones the exact balance makes
it split a few TP groups over partly free nodes, and the evaluator's phases take their slowest group, so a
few split groups cost as much as many.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from placement.cost.evaluate import evaluate
from placement.cost.report import InvalidMappingError
from placement.model.job import CollectiveKind, Job
from placement.model.state import ClusterState
from placement.model.topology import Topology
from placement.model.traffic import Traffic, job_traffic
from placement.model.validate import excluded_devices

__all__ = [
    "ScotchResult",
    "free_devices",
    "graph_text",
    "read_mapping",
    "scotch_binary",
    "scotch_map",
    "target_text",
    "terminal_numbers",
    "tleaf_levels",
    "traffic_weights",
]

BINARIES = ("scotch_gmap-int64", "scotch_gmap", "gmap")
"""Scotch's mapping tool under its Debian names, 64-bit integers first (weights x costs overflow 32 bits)."""
MAX_WEIGHT = 1_000_000
"""The heaviest edge's integer weight in the source graph (64-bit builds; 10,000 on 32-bit ones)."""


@dataclass(frozen=True)
class ScotchResult:
    """One Scotch run. `status`: ok, repaired, invalid, timeout, error, unsupported or n/a (not installed).

    `seconds` is the evaluator's `comm_seconds` of the mapping (ok and repaired only); `detail` says why
    otherwise; `wall_s` covers writing, running and reading.
    """

    status: str
    seconds: float | None
    mapping: tuple[int, ...] | None
    wall_s: float
    detail: str = ""

    def cell(self, digits: int = 3) -> str:
        """The benchmark table's cell: the seconds, or the status when there are none."""
        if self.seconds is not None:
            mark = "*" if self.status == "repaired" else ""
            return f"{self.seconds:.{digits}f}{mark}"
        return self.status


def scotch_binary() -> str | None:
    """The path of `scotch_gmap` (or its 64-bit variant), None when the `scotch` package is not installed."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


def free_devices(topology: Topology, state: ClusterState, job: Job) -> list[int]:
    """Devices a rank of `job` may use, in cluster order: usable, of the job's kind, not excluded."""
    excl, _ = excluded_devices(topology, job)
    kind = job.device_kind
    return [
        d.index
        for d in topology.devices
        if state.usable(d.index, job.name) and d.index not in excl and (kind is None or d.kind == kind)
    ]


def traffic_weights(traffic: Traffic, *, groups: str = "clique") -> dict[tuple[int, int], float]:
    """Undirected bytes per step between rank pairs (smaller rank first), summed over groups and edges.

    A group of n members moves V = 2(n-1)/n*S per member for an all-reduce, (n-1)/n*S otherwise, times its
    count and exposed fraction; ``groups="clique"`` spreads n*V over its n(n-1)/2 pairs, ``"ring"`` puts V on
    each of the n hops of the ring in member order.
    """
    if groups not in ("clique", "ring"):
        raise ValueError(f"traffic_weights: groups={groups!r} is not 'clique' or 'ring'")
    out: dict[tuple[int, int], float] = {}

    def add(a: int, b: int, w: float) -> None:
        if a != b and w > 0:
            key = (a, b) if a < b else (b, a)
            out[key] = out.get(key, 0.0) + w

    for g in traffic.groups:
        n = len(g.members)
        if n < 2:
            continue
        per_member = (2.0 * (n - 1) / n if g.kind is CollectiveKind.ALL_REDUCE else (n - 1) / n) * g.bytes
        vol = per_member * g.count * g.exposed
        if groups == "clique":
            for i, a in enumerate(g.members):
                for b in g.members[i + 1 :]:
                    add(a, b, 2.0 * vol / (n - 1))
        else:
            for i, a in enumerate(g.members):
                add(a, g.members[(i + 1) % n], vol)
    for e in traffic.edges:
        add(e.src, e.dst, e.bytes * e.count * e.exposed)
    return out


def graph_text(
    vertices: int, weights: Mapping[tuple[int, int], float], *, max_weight: int = MAX_WEIGHT
) -> str:
    """A Scotch source graph (format 0, base 0, edge weights only): `vertices` vertices, symmetric arcs.

    Weights scale so the heaviest edge is `max_weight`; every edge keeps at least 1. Vertices beyond the
    ranks named in `weights` are isolated (padding).
    """
    if vertices < 1:
        raise ValueError(f"graph_text: vertices={vertices} must be >= 1")
    top = max(weights.values(), default=0.0)
    adj: list[list[tuple[int, int]]] = [[] for _ in range(vertices)]
    for (a, b), w in sorted(weights.items()):
        if not (0 <= a < vertices and 0 <= b < vertices) or a == b:
            raise ValueError(
                f"graph_text: edge ({a}, {b}) is not between two distinct vertices of 0..{vertices - 1}"
            )
        iw = max(1, round(w / top * max_weight)) if top > 0 else 1
        adj[a].append((b, iw))
        adj[b].append((a, iw))
    arcs = sum(len(x) for x in adj)
    lines = ["0", f"{vertices} {arcs}", "0 010"]
    for nbrs in adj:
        lines.append(" ".join([str(len(nbrs))] + [f"{w} {v}" for v, w in nbrs]))
    return "\n".join(lines) + "\n"


def _link_cost(fastest: float, bandwidth: float) -> int:
    return max(1, round(10.0 * fastest / bandwidth))


def tleaf_levels(topology: Topology) -> list[tuple[int, int]]:
    """(children, link cost) per tleaf level from the root down to the devices of a node.

    Needs a uniform tree (every domain of a level has as many children, every node as many devices); levels
    with one child are skipped. Raises ValueError naming the level otherwise, and for device-graph topologies.
    """
    if topology.pair_paths is not None:
        raise ValueError("tleaf needs a tree; this topology is a device graph (pair_paths)")
    fastest = max(lv.tier.bandwidth_gbps for lv in topology.levels)
    out: list[tuple[int, int]] = []
    top = len(topology.levels) - 1
    roots = len(topology.domain_names[top])
    if roots > 1:
        out.append((roots, _link_cost(fastest, topology.levels[top].tier.bandwidth_gbps)))
    for li in range(top, 0, -1):
        sizes = {len(c) for c in topology.children[li]}
        if len(sizes) != 1:
            raise ValueError(
                f"tleaf needs a uniform tree: {topology.levels[li].name} domains have "
                f"{sorted(sizes)} children"
            )
        size = sizes.pop()
        if size > 1:
            out.append((size, _link_cost(fastest, topology.levels[li].tier.bandwidth_gbps)))
    per_node = {len(d) for d in topology.devices_in_domain[0]}
    if len(per_node) != 1:
        raise ValueError(f"tleaf needs a uniform tree: nodes have {sorted(per_node)} devices")
    size = per_node.pop()
    if size > 1:
        out.append((size, _link_cost(fastest, topology.levels[0].tier.bandwidth_gbps)))
    if not out:
        raise ValueError("tleaf needs at least two devices")
    return out


def terminal_numbers(topology: Topology) -> list[int]:
    """The tleaf terminal number of every device: its path of child positions, root first, in mixed radix."""
    tleaf_levels(topology)  # uniformity check
    top = len(topology.levels) - 1
    pos: list[dict[int, int]] = [
        {} for _ in topology.levels
    ]  # pos[l][domain] = its position under its parent
    radix: list[int] = [0 for _ in topology.levels]
    for li in range(1, top + 1):
        for kids in topology.children[li]:
            radix[li - 1] = len(kids)
            for i, k in enumerate(kids):
                pos[li - 1][k] = i
    roots = len(topology.domain_names[top])
    out: list[int] = []
    for dev in topology.devices:
        num = topology.domain_of(dev.index, top) if roots > 1 else 0
        for li in range(top - 1, -1, -1):
            num = num * radix[li] + pos[li][topology.domain_of(dev.index, li)]
        local = topology.devices_in_domain[0][dev.host_index]
        num = num * len(local) + local.index(dev.index)
        out.append(num)
    return out


def target_text(topology: Topology, devices: Sequence[int]) -> str:
    """A Scotch target: ``sub`` of the cluster's ``tleaf`` keeping `devices`; sub-terminal i is devices[i]."""
    levels = tleaf_levels(topology)
    term = terminal_numbers(topology)
    tleaf = "tleaf " + " ".join([str(len(levels))] + [f"{s} {c}" for s, c in levels])
    return f"sub {len(devices)} " + " ".join(str(term[d]) for d in devices) + "\n" + tleaf + "\n"


def read_mapping(text: str, ranks: int, devices: Sequence[int]) -> list[int]:
    """Devices of ranks 0..ranks-1 from a Scotch `.map` (count, then ``vertex terminal`` lines); padding dropped."""
    tokens = text.split()
    if not tokens:
        raise ValueError("empty Scotch mapping")
    count = int(tokens[0])
    pairs = tokens[1:]
    if len(pairs) != 2 * count:
        raise ValueError(f"Scotch mapping says {count} lines but has {len(pairs) // 2}")
    out = [-1] * ranks
    for i in range(count):
        v, t = int(pairs[2 * i]), int(pairs[2 * i + 1])
        if v < ranks:
            if not 0 <= t < len(devices):
                raise ValueError(f"Scotch mapped vertex {v} to terminal {t}, outside 0..{len(devices) - 1}")
            out[v] = devices[t]
    missing = [r for r, d in enumerate(out) if d < 0]
    if missing:
        raise ValueError(f"Scotch mapping lacks {len(missing)} rank(s), first {missing[0]}")
    return out


def _repair(topology: Topology, mapping: list[int], devices: Sequence[int]) -> int:
    """Move every rank after the first on a shared device to the nearest unused free device; returns moves."""
    used: dict[int, int] = {}
    extra: list[int] = []
    for r, d in enumerate(mapping):
        if d in used:
            extra.append(r)
        else:
            used[d] = r
    spare = [d for d in devices if d not in used]
    for r in extra:
        at = mapping[r]
        best = min(spare, key=lambda d: (topology.lca_level(at, d), d))
        spare.remove(best)
        mapping[r] = best
    return len(extra)


def scotch_map(
    topology: Topology,
    state: ClusterState,
    job: Job,
    *,
    time_limit_s: float = 60.0,
    groups: str = "best",
    repair: bool = False,
    strategy: str | None = None,
    workdir: Path | None = None,
) -> ScotchResult:
    """Map `job` with scotch_gmap on the free devices and score it with `placement.cost.evaluate.evaluate`.

    `groups` encodes collectives as ``"clique"`` or ``"ring"`` edges (`traffic_weights`); ``"best"`` (the
    default: the peer at its strongest) runs both and keeps the valid answer of lower cost, its detail naming
    the encoding. `time_limit_s` bounds each scotch_gmap run (the process is killed after it).

    Fixed seed (``-Cf``; ``-Cd`` crashes Scotch 7.0.3 on sub targets), no load imbalance (``-b0``, else Scotch
    puts two ranks on one device). `strategy` is passed as ``-m``; `workdir` keeps the files (a temporary directory
    otherwise). Never raises for Scotch's own failures: they come back as the result's status and detail.
    """
    if groups == "best":
        t0 = time.perf_counter()
        runs = [
            scotch_map(
                topology,
                state,
                job,
                time_limit_s=time_limit_s,
                groups=g,
                repair=repair,
                strategy=strategy,
                workdir=None if workdir is None else workdir / g,
            )
            for g in ("ring", "clique")
        ]
        wall = time.perf_counter() - t0
        scored = [
            (r.seconds, g, r) for g, r in zip(("ring", "clique"), runs, strict=True) if r.seconds is not None
        ]
        if not scored:
            r = runs[0]
            return ScotchResult(
                r.status, None, r.mapping, wall, f"ring: {r.detail}; clique: {runs[1].detail}"
            )
        _, g, r = min(scored, key=lambda x: (x[0], x[1]))
        return ScotchResult(
            r.status, r.seconds, r.mapping, wall, "; ".join(x for x in (f"{g} groups", r.detail) if x)
        )
    t0 = time.perf_counter()
    binary = scotch_binary()
    if binary is None:
        return ScotchResult("n/a", None, None, 0.0, "scotch_gmap not found (apt-get install scotch)")
    devices = free_devices(topology, state, job)
    if len(devices) < job.ranks:
        return ScotchResult("error", None, None, 0.0, f"{len(devices)} free devices for {job.ranks} ranks")
    try:
        target = target_text(topology, devices)
    except ValueError as e:
        return ScotchResult("unsupported", None, None, time.perf_counter() - t0, str(e))
    traffic = job_traffic(job)
    big = binary.endswith("-int64")
    graph = graph_text(
        len(devices), traffic_weights(traffic, groups=groups), max_weight=MAX_WEIGHT if big else 10_000
    )
    with tempfile.TemporaryDirectory(prefix="scotch-") as tmp:
        where = workdir or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        (where / "job.grf").write_text(graph)
        (where / "free.tgt").write_text(target)
        cmd = (
            [binary, "-Cf", "-b0"]
            + ([f"-m{strategy}"] if strategy else [])
            + [str(where / "job.grf"), str(where / "free.tgt"), str(where / "job.map")]
        )
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit_s, check=False)
        except subprocess.TimeoutExpired:
            return ScotchResult("timeout", None, None, time.perf_counter() - t0, f"over {time_limit_s:g} s")
        if proc.returncode != 0:
            why = (proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"])[-1]
            return ScotchResult("error", None, None, time.perf_counter() - t0, why)
        text = (where / "job.map").read_text()
    try:
        mapping = read_mapping(text, job.ranks, devices)
    except ValueError as e:
        return ScotchResult("error", None, None, time.perf_counter() - t0, str(e))
    status, detail = "ok", ""
    shared = job.ranks - len(set(mapping))
    if shared:
        if not repair:
            return ScotchResult(
                "invalid",
                None,
                tuple(mapping),
                time.perf_counter() - t0,
                f"{shared} rank(s) share a device with another rank",
            )
        moved = _repair(topology, mapping, devices)
        status, detail = "repaired", f"{moved} rank(s) moved off a shared device"
    try:
        rep = evaluate(topology, state, job, mapping, traffic=traffic, check=True)
    except InvalidMappingError as e:
        return ScotchResult("invalid", None, tuple(mapping), time.perf_counter() - t0, str(e.violations[0]))
    seconds = float(getattr(rep, "comm_seconds", rep.seconds))
    return ScotchResult(status, seconds, tuple(mapping), time.perf_counter() - t0, detail)
